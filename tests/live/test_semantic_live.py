"""End-to-end on the real CPU vLLM: the branch schema, the shipped warehouses, and a semantic
model + database nobody shipped, evaluated without touching the code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.run.server import LocalServer
from nlq2sql.semantic import load_catalog
from nlq2sql.stages.intent import parse_intent
from nlq2sql.transport.client import Sampling

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from byo_warehouse import build_db, write_evalset, write_model  # noqa: E402


def _records(out: Path) -> list[dict]:
    return list(iter_records(out / "records.jsonl"))


def test_branch_schema_makes_inconsistent_intents_ungrammatical(vllm_server: LocalServer, tmp_path: Path) -> None:
    """With one anyOf branch per intent kind, vLLM cannot emit what flat SmolLM2 mostly emits."""
    out = tmp_path / "branches"
    cfg = EvalConfig(evalset="heldout", out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                     concurrency=8, limit=8, sampling=Sampling(max_tokens=160, schema="branches"))
    summary = run_eval(cfg).to_json()
    recs = _records(out)
    assert len(recs) == 8 and all(r["outcome"] == "ok" for r in recs)
    finished = [r for r in recs if r["finish_reason"] == "stop"]
    assert len(finished) >= 6
    for r in finished:
        assert r["status"] in ("ok",), (r["status"], r["status_reason"], r["raw_text"])
    assert summary["status_counts"].get("inconsistent", 0) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    sent = json.loads(manifest["sampling"]["schema_json"])
    assert manifest["sampling"]["schema"] == "branches" and len(sent["anyOf"]) == 3


@pytest.mark.parametrize("warehouse", ["tpch", "flights"])
def test_shipped_warehouse_eval(vllm_server: LocalServer, tmp_path: Path, warehouse: str) -> None:
    out = tmp_path / warehouse
    cfg = EvalConfig(evalset="heldout", out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                     concurrency=4, limit=4, semantic_model=warehouse, sampling=Sampling(max_tokens=160))
    summary = run_eval(cfg).to_json()
    recs = _records(out)
    cat = load_catalog(warehouse)
    assert len(recs) == 4 and summary["n"] == 4
    for r in recs:
        assert r["id"].startswith(("tpch-ho-", "fl-ho-"))
        if r["finish_reason"] == "stop":  # answers are constrained to this warehouse's vocabulary
            assert parse_intent(r["raw_text"], cat).metric in cat.metrics
        assert r["gold_result_hash"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["semantic_model"] == warehouse
    assert manifest["semantic_model_path"] == f"warehouses/{warehouse}/semantic_model.yml"


def test_byo_semantic_model_eval(vllm_server: LocalServer, tmp_path: Path) -> None:
    folder = write_model(tmp_path / "semantic")
    db = build_db(tmp_path / "library.duckdb")
    es = write_evalset(tmp_path / "library.jsonl")
    out = tmp_path / "run"
    cfg = EvalConfig(evalset=str(es), out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                     concurrency=6, semantic_model=str(folder), warehouse=db, guardrails=(),
                     sampling=Sampling(max_tokens=160, schema="branches"))
    summary = run_eval(cfg).to_json()
    recs = _records(out)
    assert summary["n"] == 6 and len(recs) == 6
    cat = load_catalog(folder)
    for r in recs:
        if r["finish_reason"] == "stop":
            intent = parse_intent(r["raw_text"], cat)
            assert intent.metric in cat.vocabulary.metrics
            assert r["status"] == "ok" and r["sql"] and r["exec_error"] is None
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["db"] == "library.duckdb" and len(manifest["db_sha256"]) == 64
    assert "loans_per_borrower" in manifest["sampling"]["schema_json"]


def test_v2_answer_is_constrained_to_metricflow_names_and_scored_by_rows(vllm_server: LocalServer,
                                                                        tmp_path: Path) -> None:
    """--answer query on the real server: the manifest's schema constrains every finished answer to
    MetricFlow's metric and group-by names (or an abstention); each is compiled and scored by rows."""
    from nlq2sql.semantic.contract import parse_answer
    from nlq2sql.semantic.query import MetricQuery

    out = tmp_path / "v2"
    cfg = EvalConfig(evalset="heldout", out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                     concurrency=6, limit=6, answer="query", prompt="query", guardrails=(),
                     sampling=Sampling(max_tokens=200))
    summary = run_eval(cfg).to_json()
    recs = _records(out)
    cat = load_catalog("retail")
    assert len(recs) == 6 and summary["n"] == 6 and summary["answer"] == "query"
    finished = [r for r in recs if r["finish_reason"] == "stop"]
    assert finished, [r["finish_reason"] for r in recs]
    for r in finished:
        assert r["status"] == "ok", (r["status"], r["status_reason"], r["raw_text"])
        answer = parse_answer(r["raw_text"], cat)
        if isinstance(answer, MetricQuery):
            assert set(answer.metrics) <= set(cat.metrics)
            assert r["sql"] is not None or r["final_status"] == "compile_error"
        assert r["gold_result_hash"]
    assert set(summary["field_accuracy"]) == {"metrics", "group_by", "where", "order_by", "limit"}
