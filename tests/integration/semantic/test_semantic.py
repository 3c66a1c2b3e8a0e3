"""Semantic models: loading (with file/line/key errors), joins, the derived contract, and a
warehouse nobody shipped working end to end without touching the code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from byo_warehouse import CASES, build_db, write_evalset, write_model
from hypothesis import assume, given, settings
from retail import RETAIL
from rich.console import Console
from strategies import VOCAB, any_intents
from typer.testing import CliRunner

from nlq2sql.cli import _common as cli_common
from nlq2sql.cli import main as cli_main
from nlq2sql.cli.main import app
from nlq2sql.semantic import load_catalog, open_warehouse
from nlq2sql.stages.intent import Intent, compact_json, compact_regex, consistency_problem, intent_schema
from nlq2sql.stages.sqlbuild import build_sql

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (cli_common, cli_main):
        monkeypatch.setattr(module, "err", Console(stderr=True, width=10_000))


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("library")
    return write_model(root / "semantic"), build_db(root / "library.duckdb")


# ------------------------------------------------------------------ the retail model


def test_retail_vocabulary_comes_from_its_yaml() -> None:
    cat = load_catalog("retail")
    assert cat.vocabulary.metrics == ("revenue", "orders", "units", "avg_order_value", "customers")
    assert set(cat.vocabulary.dimensions) == {"region", "segment", "category", "product", "channel"}
    assert cat.vocabulary.filter_fields[-1] == "year"
    assert cat.path == "warehouses/retail/semantic_model.yml"  # relative: no machine path recorded
    assert cat.metrics["avg_order_value"].type == "ratio"
    assert cat.dimensions["region"].group_by == "customer_id__region"  # MetricFlow's name for it


def test_joins_are_metricflows_left_outer_joins() -> None:
    cat = load_catalog("retail")
    assert {d.group_by for d in cat.dimensions.values()} == {
        "customer_id__region", "customer_id__segment", "product_id__category", "product_id__product",
        "channel_id__channel"}
    q = build_sql(Intent.model_validate({"intent": "breakdown", "metric": "revenue", "dimension": "region",
                                         "time_grain": None, "filters": [], "limit": None, "order": None}), RETAIL)
    assert "LEFT OUTER JOIN" in q.sql and "\nJOIN" not in q.sql


# ------------------------------------------------------------------ the branch schema


def _validates(schema: dict[str, object], obj: object) -> bool:
    return not list(jsonschema.Draft202012Validator(schema).iter_errors(obj))


@settings(max_examples=300, deadline=None)
@given(intent=any_intents)
def test_branch_schema_accepts_exactly_the_consistent_intents(intent: Intent) -> None:
    obj = intent.model_dump(mode="json")
    assert _validates(intent_schema(RETAIL, "flat"), obj)
    assert _validates(intent_schema(RETAIL, "branches"), obj) == (consistency_problem(intent) is None)


@settings(max_examples=300, deadline=None)
@given(intent=any_intents)
def test_branch_regex_matches_the_branch_schema(intent: Intent) -> None:
    import re

    text = compact_json(intent)
    # the regex's filter values exclude escapes (a constrained decoder then cannot emit them)
    assume("\\" not in text)
    assert re.fullmatch(compact_regex(RETAIL, "flat"), text)
    assert bool(re.fullmatch(compact_regex(RETAIL, "branches"), text)) == (consistency_problem(intent) is None)


def test_branch_schema_shape() -> None:
    schema = intent_schema(RETAIL, "branches")
    assert [b["properties"]["intent"]["const"] for b in schema["anyOf"]] == [
        "breakdown", "top_n_by_metric", "time_series"]
    for branch in schema["anyOf"]:
        assert branch["additionalProperties"] is False and len(branch["required"]) == 7
        assert branch["properties"]["metric"]["enum"] == list(VOCAB.metrics)
    assert "anyOf" not in schema["anyOf"][0]["properties"]["dimension"], "a ranking needs a dimension"
    assert schema["anyOf"][2]["properties"]["time_grain"]["enum"] == ["month", "quarter", "year"]


# Bad semantic layers (real dbt mistakes, every problem at once): tests/integration/semantic/test_semantic_project.py


# ------------------------------------------------------------------ a warehouse nobody shipped


def test_byo_model_spans_two_files_and_resolves(library: tuple[Path, Path]) -> None:
    folder, db = library
    wh = open_warehouse(folder, db)
    assert wh.catalog.vocabulary.metrics == ("loans", "late_days", "fees", "borrowers", "loans_per_borrower")
    assert set(wh.catalog.vocabulary.dimensions) == {"channel", "genre", "author", "city", "plan"}
    assert wh.values("plan") == ("adult", "student") and wh.years == ("2023", "2024")
    assert "Loans per borrower" in wh.vocabulary_text()


def test_byo_left_join_keeps_unmatched_rows_as_a_null_group(library: tuple[Path, Path]) -> None:
    folder, db = library
    res = runner.invoke(app, ["sql", "--semantic-model", str(folder), "--db", str(db), "--execute", "--intent",
                              json.dumps(CASES[0][2])])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]  # stdout holds only the rows: one object each
    assert all(set(r) == {"book__genre", "loans"} for r in rows), rows
    assert sum(r["loans"] for r in rows) == 202, "every loan is counted, including the uncatalogued book's"
    assert rows[-1] == {"book__genre": None, "loans": 2}
    assert "SELECT" not in res.stdout
    res = runner.invoke(app, ["sql", "--semantic-model", str(folder), "--db", str(db), "--intent",
                              json.dumps(CASES[0][2])])  # without --execute: the SQL is the output
    assert res.exit_code == 0, res.output
    assert "LEFT OUTER JOIN" in res.stdout and "main.books books_src" in res.stdout  # MetricFlow's join


def test_byo_evalset_check_score_and_sql(library: tuple[Path, Path], tmp_path: Path) -> None:
    folder, db = library
    es = write_evalset(tmp_path / "lib.jsonl")
    res = runner.invoke(app, ["evalset", "check", str(es), "--semantic-model", str(folder), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert "6 items OK" in " ".join(res.output.split())
    # retail's default vocabulary refuses the library's golds, naming file, line and field
    res = runner.invoke(app, ["evalset", "check", str(es)])
    assert res.exit_code == 2 and f"{es}:1: field 'gold.metric'" in res.output
    responses = tmp_path / "responses.jsonl"
    answers = [json.dumps(g) for _, _, g, _ in CASES]
    answers[1] = json.dumps({**CASES[1][2], "intent": "breakdown", "limit": None})  # one false breakdown
    responses.write_text("".join(json.dumps({"id": c[0], "text": t}) + "\n" for c, t in zip(CASES, answers,
                                                                                               strict=True)))
    out = tmp_path / "run"
    res = runner.invoke(app, ["score", "--evalset", str(es), "--responses", str(responses), "--out", str(out),
                              "--semantic-model", str(folder), "--db", str(db), "--guardrails", "none", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["raw_accuracy"]["k"], summary["raw_accuracy"]["n"]) == (5, 6)
    assert summary["error_taxonomy_raw"] == {"correct": 5, "false_breakdown": 1}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["semantic_model"] == "semantic" and len(manifest["semantic_model_sha256"]) == 64
    assert len(manifest["db_sha256"]) == 64 and manifest["db"] == "library.duckdb"


def test_byo_bad_filter_value_is_an_input_error(library: tuple[Path, Path], tmp_path: Path) -> None:
    folder, db = library
    es = tmp_path / "bad.jsonl"
    gold = {**CASES[3][2], "filters": [{"field": "genre", "op": "eq", "value": "Cookery"}]}
    es.write_text(json.dumps({"id": "x", "question": "q", "gold": gold, "category": "breakdown"}) + "\n")
    res = runner.invoke(app, ["evalset", "check", str(es), "--semantic-model", str(folder), "--db", str(db)])
    assert res.exit_code == 2
    assert f"{es}:1: field 'gold.filters.0.value'" in res.output and "'Cookery'" in res.output


def test_byo_guardrail_naming_an_unknown_metric_is_a_load_error(library: tuple[Path, Path], tmp_path: Path) -> None:
    from nlq2sql.errors import GuardrailError
    from nlq2sql.stages.rulesets import load_guardrails

    folder, db = library
    rules = tmp_path / "metric.toml"
    rules.write_text('name = "m"\n[[rules]]\nid = "rev"\nfield = "metric"\nfrom = ["loans"]\nto = "revenue"\n')
    with pytest.raises(GuardrailError, match="rule 'rev' names metric 'revenue'"):
        load_guardrails([str(rules)], open_warehouse(folder, db).catalog)
    assert load_guardrails(["ranking"], open_warehouse(folder, db).catalog)  # intent-only rules fit any model


def test_byo_folder_of_parquet_files(library: tuple[Path, Path], tmp_path: Path) -> None:
    import duckdb

    folder, db = library
    data = tmp_path / "data"
    data.mkdir()
    # COPY TO needs external access, which the harness's read-only connections (maybe still
    # open on ``db`` in this process) forbid: DuckDB refuses a second configuration, so copy.
    copy = tmp_path / "copy.duckdb"
    shutil.copyfile(db, copy)
    con = duckdb.connect(str(copy))
    for table in ("loans", "books", "members"):
        con.execute(f"COPY {table} TO '{data / table}.parquet' (FORMAT parquet)")
    con.close()
    res = runner.invoke(app, ["semantic", "check", str(folder), "--db", str(data)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["sql", "--semantic-model", str(folder), "--db", str(data), "--execute", "--intent",
                              json.dumps(CASES[0][2])])
    assert res.exit_code == 0 and json.loads(res.stdout.splitlines()[-1]) == {"book__genre": None, "loans": 2}


def test_semantic_init_writes_a_model_that_checks(tmp_path: Path) -> None:
    import duckdb

    db = tmp_path / "shop.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE customers AS SELECT * FROM (VALUES (1, 'north'), (2, 'south')) t(customer_id, area)")
    con.execute("CREATE TABLE orders AS SELECT * FROM (VALUES (10, 1, DATE '2024-01-01', 9.5), "
                "(11, 2, DATE '2024-01-05', 3.0)) t(order_id, customer_id, ordered_on, amount)")
    con.close()
    out = tmp_path / "model.yml"
    res = runner.invoke(app, ["semantic", "init", "--db", str(db), "--out", str(out)])
    assert res.exit_code == 0, res.output
    cat = load_catalog(out)
    assert {"orders_count", "total_amount"} <= set(cat.metrics) and "area" in cat.dimensions
    res = runner.invoke(app, ["semantic", "check", str(out), "--db", str(db)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["semantic", "init", "--db", str(db), "--out", str(out)])
    assert res.exit_code == 2 and "--force" in res.output


@pytest.mark.parametrize("name, scale", [("retail", 0.2), ("tpch", 0.01), ("flights", 0.2), ("jaffle", 0.05)])
def test_semantic_init_on_every_shipped_db_checks(tmp_path: Path, name: str, scale: float) -> None:
    """`semantic init --db` on each shipped warehouse's data writes YAML that MetricFlow validates and
    `semantic check` passes unchanged — including jaffle, whose raw supplies repeat their id (so that
    column must not become a primary entity: the data check would call it a fan-out)."""
    from nlq2sql.semantic import warehouse

    db = warehouse.build(tmp_path / f"{name}.duckdb", scale, name)
    out = tmp_path / "init.yml"
    res = runner.invoke(app, ["semantic", "init", "--db", str(db), "--out", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["semantic", "check", str(out), "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert not report["failed"]
    assert load_catalog(out).metrics


def test_semantic_show_prints_the_contract() -> None:
    res = runner.invoke(app, ["semantic", "show", "--schema", "branches", "--json"])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert shown["schema"] == intent_schema(RETAIL, "branches")
    assert shown["dimensions"]["channel"]["values"] == ["Online", "Partner", "Phone", "Retail"]


def test_semantic_show_lists_metrics_and_group_bys_by_default() -> None:
    """Without --json: a short listing (as ``mf list metrics``), every metric and group-by in it."""
    from nlq2sql.stages.semantic_tools import grouped_names

    full = json.loads(runner.invoke(app, ["semantic", "show", "--json"]).stdout)
    res = runner.invoke(app, ["semantic", "show"])
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert len(text) * 10 < len(json.dumps(full)), "a listing, not the report"
    for name, m in full["metrics"].items():
        assert any(line.split()[:1] == [name] and f"{m['label']} ({m['type']})" in line for line in text.splitlines())
        listed = " ".join(text.split())
        assert all(g in listed for g in grouped_names(m["group_by"])), name
    assert "customer_id__region: Central, East, North, South, West" in text
    assert "metric_time__{day,week,month,quarter,year}" in text
    assert grouped_names(["a__day", "b", "a__year", "a__month"]) == ["a__{day,month,year}", "b"]


# ------------------------------------------------------------------ the shipped warehouses


@pytest.mark.parametrize("name, scale, sizes", [("retail", None, (20, 60, 24)), ("tpch", 0.01, (24, 44, 18)),
                                                ("flights", None, (24, 44, 22))])
def test_shipped_warehouse_checks(tmp_path: Path, name: str, scale: float | None, sizes: tuple[int, ...]) -> None:
    """Every shipped warehouse passes `semantic check`, and each of its sets `evalset check`."""
    from nlq2sql.semantic import warehouse

    db = warehouse.ensure(name=name) if scale is None else warehouse.build(tmp_path / f"{name}.duckdb", scale, name)
    res = runner.invoke(app, ["semantic", "check", name, "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert not json.loads(res.stdout)["failed"]
    for set_name, size in zip(("dev", "heldout", "adversarial"), sizes, strict=True):
        res = runner.invoke(app, ["evalset", "check", set_name, "--semantic-model", name, "--db", str(db)])
        assert res.exit_code == 0, res.output
        assert f"{size} items OK" in " ".join(res.output.split())


def test_shipped_sets_share_no_question() -> None:
    from nlq2sql.stages.evalset import load_evalset

    for name in ("retail", "tpch", "flights"):
        cat = load_catalog(name)
        seen: dict[str, str] = {}
        for set_name in ("dev", "heldout", "adversarial"):
            for c in load_evalset(set_name, cat).cases:
                key = " ".join(c.question.lower().split())
                assert key not in seen or seen[key] == set_name, (name, c.id, seen.get(key))
                seen[key] = set_name
