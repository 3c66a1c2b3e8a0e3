"""``--preset main-job``: the README's main job, the best configuration measured on the shipped
sets (``reports/main-job-v2``: 54/60 on retail's held-out set).  Qwen2.5-Coder-0.5B answers a
MetricFlow query (v2; the prompt is the answer kind's own, ``query``) under the v2 JSON Schema
(structured ``json``, max_tokens 128, greedy), with the 8 most similar solved questions of the dev bank, value linking
(hint and repair) and the learned ranking and sort guardrails."""

from nlq2sql.run.presets import Preset, register

__all__: list[str] = []  # (it registers its preset)

register(Preset("main-job", "The README's main job: v2 MetricFlow query, Qwen2.5-Coder-0.5B, 8 examples, value "
                "linking, learned ranking + sort guardrails.", {
                    "model": "qwen2.5-coder-0.5b", "answer": "query",
                    "guardrails": ("learned:ranking", "sort"), "examples": 8, "link_values": "both",
                    "temperature": 0.0, "max_tokens": 128, "structured": "json", "schema_mode": "flat",
                    "semantic_model": "retail"}))
