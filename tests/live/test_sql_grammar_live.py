"""``--answer sql-grammar`` on the real server (SmolLM2): every answer is inside the warehouse's
SQL grammar (names only its tables and columns), the finished ones parse, and vLLM refuses a broken
grammar with a clear error before any item runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp
from xgrammar.testing import _is_grammar_accept_string

from nlq2sql.answers.sql.grammar import SqlGrammar, sql_grammar
from nlq2sql.errors import InputError
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.run.server import LocalServer
from nlq2sql.run.sql_grammar import probe_grammar
from nlq2sql.semantic import open_warehouse
from nlq2sql.semantic.schema_text import describe_tables
from nlq2sql.transport.client import Sampling


def test_sql_grammar_answers_name_only_the_warehouse(vllm_server: LocalServer, tmp_path: Path) -> None:
    from nlq2sql.conditions.registry import REGISTRY

    wh = open_warehouse("retail")
    grammar = sql_grammar(wh.catalog, wh)
    columns = {(t.name, c.name) for t in describe_tables(wh.catalog, wh) for c in t.columns}
    out = tmp_path / "g"
    cfg = EvalConfig(evalset="heldout-v2", out=out, endpoint=vllm_server.url, model=vllm_server.model_name,
                     concurrency=3, limit=3, answer="sql-grammar", prompt="sql", guardrails=(),
                     sampling=Sampling(max_tokens=160), conditions=REGISTRY.from_options(examples=2))
    summary = run_eval(cfg).to_json()
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    manifest = json.loads((out / "manifest.json").read_text())
    assert summary["n"] == 3 and manifest["sampling"]["grammar_sha256"] == grammar.sha256
    for r in recs:
        assert r["answer"] == "sql-grammar" and r["outcome"] == "ok", r
        text = r["raw_text"]
        # the text is the grammar's (finished) or a prefix of a grammatical statement (cut at max_tokens)
        assert _is_grammar_accept_string(grammar.text, text, require_termination=r["finish_reason"] == "stop"), text
        if r["finish_reason"] == "stop" and text.startswith("SELECT"):
            tree = sqlglot.parse_one(text, read="duckdb")
            assert {t.name for t in tree.find_all(exp.Table)} <= set(grammar.tables), text
            assert all((c.table, c.name) in columns for c in tree.find_all(exp.Column)), text
            assert r["status"] != "sql_refused", r["status_reason"]


def test_a_grammar_vllm_refuses_is_one_clear_error(vllm_server: LocalServer) -> None:
    broken = SqlGrammar('root ::= "SELECT " undefined_rule\n', ())
    with pytest.raises(InputError, match="refuses the warehouse's SQL grammar.*HTTP 400"):
        probe_grammar(vllm_server.url, vllm_server.model_name, "EMPTY", broken)
