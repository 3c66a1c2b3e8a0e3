"""``--answer sql`` on the real server: the kind's request part (free text, no schema) is what the
server receives, and the answers are scored as SQL in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.run.server import LocalServer
from nlq2sql.transport.client import Sampling


def test_free_sql_answers_are_sent_unconstrained_and_scored_in_the_sandbox(vllm_server: LocalServer,
                                                                          tmp_path: Path) -> None:
    out = tmp_path / "sql"
    cfg = EvalConfig(evalset="heldout-v2", out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                     concurrency=2, limit=2, answer="sql", prompt="sql", guardrails=(),
                     sampling=Sampling(max_tokens=120))
    summary = run_eval(cfg).to_json()
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    manifest = json.loads((out / "manifest.json").read_text())
    assert summary["n"] == 2 and summary["answer"] == manifest["answer"] == "sql"
    assert manifest["sampling"]["structured"] == "none" and "schema_text" not in manifest["sampling"]
    assert manifest["search_path"]  # the model's SQL ran under the layer's schemas
    assert "field_accuracy" not in summary or not summary["field_accuracy"]  # judged by rows only
    for r in recs:
        assert r["answer"] == "sql" and r["outcome"] == "ok", r
        assert isinstance(r["raw_text"], str) and not r["raw_text"].lstrip().startswith("{"), r["raw_text"]
