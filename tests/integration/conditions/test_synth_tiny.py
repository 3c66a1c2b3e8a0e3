"""The synthetic bank on a layer whose tables hold a handful of rows, or none (issue 38): it still
makes solved examples — compiled-but-empty ones for a metric that returns rows for no shape,
tagged ``empty-result`` in the bank, counted in the manifest and named in each record that is
shown one — and where nothing compiles it says per metric why."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from fakeserver import FakeServer, script

from nlq2sql.conditions import synth
from nlq2sql.conditions.example_bank import load_bank
from nlq2sql.conditions.examples import ExamplesSettings
from nlq2sql.conditions.registry import ConditionSet
from nlq2sql.conditions.synth import EMPTY_TAG, MetricYield, synthesize, write_bank
from nlq2sql.errors import InputError
from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.semantic import open_warehouse
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.warehouse import build
from nlq2sql.stages.execute import Executor


@pytest.fixture(scope="module")
def jaffle_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("jaffle") / "jaffle.duckdb", name="jaffle")


def _tiny(src: Path, dst: Path, rows: int) -> Path:
    """A copy of ``src`` with ``rows`` rows per table (the time spine whole: it is a calendar)."""
    con = duckdb.connect(str(dst))
    try:
        con.execute(f"ATTACH '{src}' AS s (READ_ONLY)")
        tables = con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                             "WHERE table_catalog = 's'").fetchall()
        for schema, table in tables:
            con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            limit = "" if "spine" in table else f" LIMIT {rows}"
            con.execute(f'CREATE TABLE "{schema}"."{table}" AS SELECT * FROM s."{schema}"."{table}"{limit}')
    finally:
        con.close()
    return dst


@pytest.fixture(scope="module")
def tiny(jaffle_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    return open_warehouse("jaffle", _tiny(jaffle_db, tmp_path_factory.mktemp("tiny") / "tiny.duckdb", 2))


@pytest.fixture(scope="module")
def empty(jaffle_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    return open_warehouse("jaffle", _tiny(jaffle_db, tmp_path_factory.mktemp("empty") / "empty.duckdb", 0))


def _rows(wh: Warehouse, ex: synth.Example) -> int:
    with Executor(wh.db_path) as x:
        return len(x.run(wh.catalog.engine.compile(ex.gold)))


def test_two_rows_per_table_still_give_a_bank_marked_where_empty(tiny: Warehouse) -> None:
    examples = synthesize(tiny, 20, 0)
    assert len(examples) >= 10
    for e in examples:  # the mark says exactly which golds return no rows on this data
        assert (_rows(tiny, e) == 0) == (EMPTY_TAG in e.tags), e.question


def test_a_layer_without_rows_gets_compiled_but_empty_examples(empty: Warehouse) -> None:
    examples = synthesize(empty, 12, 0)
    assert len(examples) == 12 and all(EMPTY_TAG in e.tags for e in examples)
    assert all(_rows(empty, e) == 0 for e in examples)
    assert synthesize(empty, 12, 0) == examples  # deterministic


def test_nothing_compiled_is_refused_naming_each_metric_and_why(empty: Warehouse, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    yields = {"orders": MetricYield(failed=3, first_error="metric_time is required"), "revenue": MetricYield()}
    monkeypatch.setattr(synth, "synthesize_report", lambda *a: ([], yields))
    out = tmp_path / "bank.jsonl"
    with pytest.raises(InputError) as exc:
        write_bank(empty, out, 5)
    text = str(exc.value)
    assert "orders: 3 refused (first: metric_time is required)" in text and "revenue: no query drawn" in text
    assert not out.exists()


def test_examples_on_an_empty_layer_are_recorded_as_empty(empty: Warehouse, tmp_path: Path) -> None:
    bank = load_bank("synthetic", empty, 2, "query")
    m = bank.manifest(2)
    assert m.synthetic is True and m.empty_results == m.bank_size == len(bank.cases) > 2
    items = [{"id": f"t{i}", "question": q, "gold": {"metrics": ["orders"], "group_by": []}, "answerable": True,
              "category": "breakdown", "pair_id": None, "tags": []}
             for i, q in enumerate(["How many orders were placed?", "Orders by customer type"])]
    evalset = tmp_path / "set.jsonl"
    evalset.write_text("".join(json.dumps(i) + "\n" for i in items))
    answer = json.dumps({"metrics": ["orders"], "group_by": [], "where": [], "order_by": [], "limit": None})
    out = tmp_path / "run"
    with FakeServer(tmp_path / "fake", script(default={"kind": "text", "text": answer})) as f:
        run_eval(EvalConfig(evalset=str(evalset), out=out, endpoint=f.url, model="fake-model", answer="query",
                            guardrails=(), semantic_model="jaffle", warehouse=empty.db_path, timeout_s=30.0,
                            conditions=ConditionSet.of(ExamplesSettings(examples=2, example_bank="synthetic"))))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["examples"]["empty_results"] == m.bank_size
    for rec in iter_records(out / "records.jsonl"):
        assert rec["empty_example_ids"] == rec["example_ids"] and len(rec["example_ids"]) == 2
