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
from rich.console import Console
from strategies import VOCAB, any_intents
from typer.testing import CliRunner

from nlq2sql.cli import _common as cli_common
from nlq2sql.cli import main as cli_main
from nlq2sql.cli.main import app
from nlq2sql.errors import SemanticModelError
from nlq2sql.intent import Intent, compact_json, compact_regex, consistency_problem, intent_schema
from nlq2sql.semantic import load_catalog, open_warehouse
from nlq2sql.semantic.catalog import resolve
from nlq2sql.semantic.spec import read_spec
from nlq2sql.sqlbuild import build_sql

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
    assert cat.metrics["avg_order_value"].sql == "SUM(f.revenue) / COUNT(DISTINCT f.order_count)"


def test_joins_are_left_outer_and_one_hop() -> None:
    cat = load_catalog("retail")
    assert {(f, t): j.entity for (f, t), j in cat.joins.items()} == {
        ("order_lines", "channels"): "channel_id", ("order_lines", "customers"): "customer_id",
        ("order_lines", "products"): "product_id"}
    q = build_sql(Intent.model_validate({"intent": "breakdown", "metric": "revenue", "dimension": "region",
                                         "time_grain": None, "filters": [], "limit": None, "order": None}))
    assert "LEFT JOIN" in q.sql and "\nJOIN" not in q.sql


# ------------------------------------------------------------------ the branch schema


def _validates(schema: dict[str, object], obj: object) -> bool:
    return not list(jsonschema.Draft202012Validator(schema).iter_errors(obj))


@settings(max_examples=300, deadline=None)
@given(intent=any_intents)
def test_branch_schema_accepts_exactly_the_consistent_intents(intent: Intent) -> None:
    obj = intent.model_dump(mode="json")
    assert _validates(intent_schema(None, "flat"), obj)
    assert _validates(intent_schema(None, "branches"), obj) == (consistency_problem(intent) is None)


@settings(max_examples=300, deadline=None)
@given(intent=any_intents)
def test_branch_regex_matches_the_branch_schema(intent: Intent) -> None:
    import re

    text = compact_json(intent)
    # the regex's filter values exclude escapes (a constrained decoder then cannot emit them)
    assume("\\" not in text)
    assert re.fullmatch(compact_regex(None, "flat"), text)
    assert bool(re.fullmatch(compact_regex(None, "branches"), text)) == (consistency_problem(intent) is None)


def test_branch_schema_shape() -> None:
    schema = intent_schema(None, "branches")
    assert [b["properties"]["intent"]["const"] for b in schema["anyOf"]] == [
        "breakdown", "top_n_by_metric", "time_series"]
    for branch in schema["anyOf"]:
        assert branch["additionalProperties"] is False and len(branch["required"]) == 7
        assert branch["properties"]["metric"]["enum"] == list(VOCAB.metrics)
    assert "anyOf" not in schema["anyOf"][0]["properties"]["dimension"], "a ranking needs a dimension"
    assert schema["anyOf"][2]["properties"]["time_grain"]["enum"] == ["month", "quarter", "year"]


# ------------------------------------------------------------------ bad semantic models

GOOD = """\
semantic_models:
  - name: sales
    model: ref('sales')
    defaults:
      agg_time_dimension: sold_on
    entities:
      - name: shop
        type: foreign
        expr: shop_id
    dimensions:
      - name: sold_on
        type: time
        type_params:
          time_granularity: day
    measures:
      - name: amount
        agg: sum
  - name: shops
    model: ref('shops')
    entities:
      - name: shop
        type: primary
        expr: shop_id
    dimensions:
      - name: town
        type: categorical
metrics:
  - name: sales
    type: simple
    type_params:
      measure: amount
  - name: avg_sale
    type: ratio
    type_params:
      numerator: sales
      denominator: sales
"""

def _sub(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


#: (title, YAML text, expected line or None, key fragment, message fragment)
BAD: list[tuple[str, str, int | None, str, str]] = [
    ("YAML syntax error", GOOD.replace("  - name: shops", "  - name: [shops", 1), 19, "", "YAML syntax error"),
    ("empty file", "", None, "", "empty file"),
    ("not a mapping", "- just\n- a list\n", 1, "", "top level must be a mapping"),
    ("unknown top-level key", GOOD + "saved_queries: []\n", 37, "saved_queries", "unknown top-level key"),
    ("unknown measure", _sub("measure: amount", "measure: amont"), 31, "metrics.sales.type_params.measure",
     "unknown measure 'amont'"),
    ("ratio of a missing metric", _sub("denominator: sales", "denominator: visits"), 36,
     "metrics.avg_sale.type_params.denominator", "denominator 'visits' is not a defined metric"),
    ("join with no path",
     _sub("        type: primary\n        expr: shop_id", "        type: foreign\n        expr: shop_id"),
     20, "semantic_models.shops.entities", "no join path from 'sales'"),
    ("two join paths", _sub("        type: foreign\n        expr: shop_id",
                            "        type: foreign\n        expr: shop_id\n      - name: store\n        type: foreign\n"
                            "        expr: shop_id").replace("        type: primary\n        expr: shop_id",
                                                      "        type: primary\n        expr: shop_id\n"
                                                      "      - name: store\n        type: unique\n"
                                                      "        expr: shop_id"),
     23, "semantic_models.shops.entities", "ambiguous join from 'sales' to 'shops': 2 entities match (shop, store)"),
    ("dimension name used twice", _sub("    measures:\n      - name: amount",
                                       "      - name: town\n        type: categorical\n        expr: \"'x'\"\n"
                                       "    measures:\n      - name: amount"), 28,
     "semantic_models.shops.dimensions.town", "dimension name 'town' is used twice (also in 'sales')"),
    ("bad agg", _sub("agg: sum", "agg: median"), 17, "semantic_models.sales.measures.amount.agg", "Input should be"),
    ("model not a ref", _sub("model: ref('shops')", "model: shops"), 19, "semantic_models.shops.model",
     "model must be ref('TABLE')"),
    ("time dimension not time", _sub("agg_time_dimension: sold_on", "agg_time_dimension: town"), 5,
     "semantic_models.sales.defaults.agg_time_dimension", "not a time dimension"),
    ("no metrics", GOOD.split("metrics:")[0], None, "", "no metrics defined"),
    ("unknown key in a dimension", _sub("        type: categorical", "        type: categorical\n        colour: red"),
     27, "semantic_models.shops.dimensions.town.colour", "Extra inputs are not permitted"),
    ("dimension called year", _sub("- name: town", "- name: year"), 25, "semantic_models.shops.dimensions.year",
     "reserved"),
    ("ratio of a ratio", _sub("denominator: sales", "denominator: avg_sale"), 36,
     "metrics.avg_sale.type_params.denominator", "ratios of ratios"),
    ("metric defined twice", GOOD + "  - name: sales\n    type: simple\n    type_params:\n      measure: amount\n",
     37, "metrics.sales", "defined twice"),
    ("name not an identifier", _sub("- name: town", "- name: town name"), 25, "semantic_models.shops.dimensions",
     "not a plain identifier"),
]

#: Errors only a database can reveal: (title, YAML text, key fragment, message fragment)
BAD_DB: list[tuple[str, str, str, str]] = [
    ("missing table", _sub("model: ref('shops')", "model: ref('stores')"), "semantic_models.shops.model",
     "table or view 'stores' is not in the database"),
    ("missing column", _sub("      - name: town\n        type: categorical",
                            "      - name: town\n        type: categorical\n        expr: city"),
     "semantic_models.shops.dimensions.town", "fails in DuckDB"),
    ("expr that fails in DuckDB", _sub("        agg: sum", "        agg: sum\n        expr: amount +* 2"),
     "semantic_models.sales.measures.amount", "fails in DuckDB"),
]


@pytest.fixture(scope="module")
def sales_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import duckdb

    path = tmp_path_factory.mktemp("sales") / "sales.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE shops AS SELECT * FROM (VALUES (1, 'Ely'), (2, 'Bath')) t(shop_id, town)")
    con.execute("CREATE TABLE sales AS SELECT * FROM (VALUES (1, DATE '2024-01-02', 5.0), "
                "(2, DATE '2024-02-03', 7.0), (3, DATE '2024-02-04', 1.0)) t(shop_id, sold_on, amount)")
    con.close()
    return path


def test_good_model_checks(tmp_path: Path, sales_db: Path) -> None:
    (tmp_path / "m.yml").write_text(GOOD)
    res = runner.invoke(app, ["semantic", "check", str(tmp_path / "m.yml"), "--db", str(sales_db), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["queries"] == 2 * 2 and not report["failed"]  # 2 metrics × (1 dimension + time series)


def test_bad_catalogue_is_broad() -> None:
    assert len(BAD) + len(BAD_DB) >= 15


@pytest.mark.parametrize("title, text, line, key, fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_model_names_file_line_and_key(tmp_path: Path, sales_db: Path, title: str, text: str,
                                           line: int | None, key: str, fragment: str) -> None:
    path = tmp_path / "model.yml"
    path.write_text(text)
    before = sorted(tmp_path.iterdir())
    res = runner.invoke(app, ["semantic", "check", str(path), "--db", str(sales_db)])
    assert res.exit_code == 2, (title, res.output)
    msg = res.output.strip()
    assert "Traceback" not in msg and len(msg.splitlines()) == 1, msg
    assert str(path) in msg and fragment in msg, msg
    if line is not None:
        assert f"{path}:{line}" in msg, msg
    if key:
        assert f"field '{key}" in msg, msg
    assert sorted(tmp_path.iterdir()) == before, "nothing left behind"


@pytest.mark.parametrize("title, text, key, fragment", BAD_DB, ids=[b[0] for b in BAD_DB])
def test_bad_model_against_the_database(tmp_path: Path, sales_db: Path, title: str, text: str, key: str,
                                        fragment: str) -> None:
    path = tmp_path / "model.yml"
    path.write_text(text)
    res = runner.invoke(app, ["semantic", "check", str(path), "--db", str(sales_db)])
    assert res.exit_code == 2, (title, res.output)
    msg = res.output.strip()
    assert f"{path}:" in msg and f"field '{key}'" in msg and fragment in msg, msg


def test_non_utf8_and_missing_files(tmp_path: Path, sales_db: Path) -> None:
    bad = tmp_path / "latin1.yml"
    bad.write_bytes(GOOD.replace("town", "t\xf6wn").encode("latin-1"))
    with pytest.raises(SemanticModelError, match="not UTF-8"):
        read_spec(bad)
    res = runner.invoke(app, ["semantic", "check", str(tmp_path / "nope.yml"), "--db", str(sales_db)])
    assert res.exit_code == 2 and "no semantic model named or found" in res.output
    (tmp_path / "own.yml").write_text(GOOD)
    res = runner.invoke(app, ["semantic", "check", str(tmp_path / "own.yml")])
    assert res.exit_code == 2 and "pass --db" in res.output


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
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("[")]
    assert sum(r[1] for r in rows) == 202, "every loan is counted, including the uncatalogued book's"
    assert rows[-1] == [None, 2]
    assert "LEFT JOIN (SELECT book_id AS book, genre AS genre FROM books) AS books" in res.stdout


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
    from nlq2sql.guardrail import load_guardrails

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
    assert res.exit_code == 0 and "[null, 2]" in res.stdout


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
    cat = resolve(read_spec(out))
    assert {"orders_count", "total_amount"} <= set(cat.metrics) and "area" in cat.dimensions
    res = runner.invoke(app, ["semantic", "check", str(out), "--db", str(db)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["semantic", "init", "--db", str(db), "--out", str(out)])
    assert res.exit_code == 2 and "--force" in res.output


def test_semantic_show_prints_the_contract() -> None:
    res = runner.invoke(app, ["semantic", "show", "--schema", "branches"])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert shown["schema"] == intent_schema(None, "branches")
    assert shown["dimensions"]["channel"]["values"] == ["Online", "Partner", "Phone", "Retail"]


# ------------------------------------------------------------------ the shipped warehouses


@pytest.mark.parametrize("name, scale, sizes", [("retail", None, (20, 60, 24)), ("tpch", 0.01, (24, 44, 18)),
                                                ("flights", None, (24, 44, 22))])
def test_shipped_warehouse_checks(tmp_path: Path, name: str, scale: float | None, sizes: tuple[int, ...]) -> None:
    """Every shipped warehouse passes `semantic check`, and each of its sets `evalset check`."""
    from nlq2sql import warehouse

    db = warehouse.ensure(name=name) if scale is None else warehouse.build(tmp_path / f"{name}.duckdb", scale, name)
    res = runner.invoke(app, ["semantic", "check", name, "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert not json.loads(res.stdout)["failed"]
    for set_name, size in zip(("dev", "heldout", "adversarial"), sizes, strict=True):
        res = runner.invoke(app, ["evalset", "check", set_name, "--semantic-model", name, "--db", str(db)])
        assert res.exit_code == 0, res.output
        assert f"{size} items OK" in " ".join(res.output.split())


def test_shipped_sets_share_no_question() -> None:
    from nlq2sql.evalset import load_evalset

    for name in ("retail", "tpch", "flights"):
        cat = load_catalog(name)
        seen: dict[str, str] = {}
        for set_name in ("dev", "heldout", "adversarial"):
            for c in load_evalset(set_name, cat).cases:
                key = " ".join(c.question.lower().split())
                assert key not in seen or seen[key] == set_name, (name, c.id, seen.get(key))
                seen[key] = set_name
