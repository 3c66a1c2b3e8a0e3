"""End-to-end on the real CPU vLLM: retrieved few-shot examples reach the model and are recorded."""

from __future__ import annotations

import json
from pathlib import Path

from retail import retail_wh

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.run.server import LocalServer
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.transport.client import Sampling


def test_retrieved_examples_are_sent_and_recorded(vllm_server: LocalServer, tmp_path: Path) -> None:
    runs = {}
    for k in (0, 4):
        out = tmp_path / f"k{k}"
        run_eval(EvalConfig(evalset="heldout", out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                            concurrency=4, limit=4, conditions=REGISTRY.from_options(examples=k),
                            sampling=Sampling(max_tokens=160, schema="branches")))
        runs[k] = {r["id"]: r for r in iter_records(out / "records.jsonl")}
    dev = {c.id: c for c in load_evalset("dev", retail_wh()).cases}
    for rid, rec in runs[4].items():
        assert len(rec["example_ids"]) == 4 and set(rec["example_ids"]) <= set(dev)
        # the server counted the four solved turns: measured on its side, not assumed
        extra = rec["prompt_tokens"] - runs[0][rid]["prompt_tokens"]
        assert extra >= 4 * 20, (rid, extra)
        assert "example_ids" not in runs[0][rid]
    manifest = json.loads((tmp_path / "k4" / "manifest.json").read_text())
    assert manifest["examples"]["k"] == 4 and manifest["examples"]["bank"] == "dev"
    assert manifest["examples"]["bank_path"] == "evalsets/dev.jsonl"
    assert json.loads((tmp_path / "k0" / "manifest.json").read_text())["examples"] is None


def test_two_stage_planner_chooses_then_answers_within_the_choice(vllm_server: LocalServer, tmp_path: Path) -> None:
    out = tmp_path / "planner"
    summary = run_eval(EvalConfig(evalset="heldout", out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                                  concurrency=4, limit=4, conditions=REGISTRY.from_options(planner="two-stage"),
                                  sampling=Sampling(max_tokens=160))).to_json()
    recs = list(iter_records(out / "records.jsonl"))
    assert len(recs) == 4
    for r in recs:
        assert r["planner_choice"] in ("breakdown", "top_n_by_metric", "time_series"), r
        assert r["requests"] == 2 and r["planner_completion_tokens"] and r["planner_latency_s"] > 0
        assert r["latency_total_s"] >= r["latency_s"]
        if r["raw_intent"] is not None:  # the second stage's grammar held the chosen kind
            assert r["raw_intent"]["intent"] == r["planner_choice"] and r["status"] == "ok"
    assert summary["timing"]["planner_latency_s"]["n"] == 4 and summary["timing"]["requests"]["mean"] == 2
    assert json.loads((out / "manifest.json").read_text())["planner"] == "two-stage"


def test_abstain_below_reads_the_intent_token_logprobs(vllm_server: LocalServer, tmp_path: Path) -> None:
    """The CPU vLLM streams logprobs under the JSON-Schema grammar: every answer's intent kind
    has a decisive token, and the confidence read from it decides abstention."""
    out = tmp_path / "logprob"
    summary = run_eval(EvalConfig(evalset="heldout", out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                                  concurrency=4, limit=4, guardrails=(),
                                  conditions=REGISTRY.from_options(abstain_below=0.5),
                                  sampling=Sampling(max_tokens=160, schema="branches"))).to_json()
    recs = list(iter_records(out / "records.jsonl"))
    assert len(recs) == 4
    for r in recs:
        if r["raw_intent"] is None:
            continue
        ev = r["intent_evidence"]
        assert ev is not None and ev["kind"] == r["raw_intent"]["intent"], r
        assert 0 < ev["confidence"] <= 1 and 0 < ev["p_token"] <= 1
        assert r["abstained"] == (ev["confidence"] < 0.5)
    assert summary["selective"]["n"] == 4
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sampling"]["top_logprobs"] == 8 and manifest["abstain_below"] == 0.5
