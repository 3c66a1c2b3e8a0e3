"""A team's dbt project through MetricFlow: real dbt mistakes, each one clear message (all at once).

Every bad project exits 2 with the file, the line and the key of each problem, no traceback,
nothing written; a file with several problems reports them all in one pass.  The good project
here is written the way dbt projects are (plural lists, ``ref()``, ordinary dbt keys beside the
semantic layer) and is validated by MetricFlow itself.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.semantic.catalog import WAREHOUSE_DIR

runner = CliRunner()

GOOD = """\
version: 2
models:
  - name: sales
    description: an ordinary dbt model entry, skipped
    columns:
      - name: sale_id
        data_tests: [unique, not_null]
semantic_models:
  - name: sales
    model: ref('sales')
    defaults:
      agg_time_dimension: sold_on
    entities:
      - name: sale
        type: primary
        expr: sale_id
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
      - name: sale_count
        agg: count
        expr: sale_id
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
  - name: revenue
    type: simple
    type_params:
      measure: amount
  - name: sales_count
    type: simple
    type_params:
      measure: sale_count
  - name: avg_sale
    type: ratio
    type_params:
      numerator: revenue
      denominator: sales_count
  - name: revenue_to_date
    type: cumulative
    type_params:
      measure: amount
      grain_to_date: month
saved_queries:
  - name: revenue_by_town
    query_params:
      metrics: [revenue]
      group_by: ["Dimension('shop__town')"]
unit_tests: []
"""


def _sub(old: str, new: str, text: str = GOOD) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


_DEEP = "semantic_models:\n" + "".join("  " * i + "- \n" for i in range(1, 4)) + "x: " + "[" * 20_000 + "]" * 20_000
_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
) + "semantic_models: *i\n"

#: (title, YAML text or bytes, expected line or None, key fragment, message fragment)
BAD: list[tuple[str, str | bytes, int | None, str, str]] = [
    ("YAML syntax error", _sub("  - name: shops", "  - name: [shops"), 32, "", "YAML syntax error"),
    ("empty file", "", None, "", "no semantic_models defined"),
    ("not a mapping", "- just\n- a list\n", 1, "", "top level must be a mapping"),
    ("misspelt top-level key", _sub("metrics:", "metrcs:"), 40, "metrcs", "unknown top-level key"),
    ("semantic_models not a list", "semantic_models:\n  name: x\n", 1, "semantic_models", "must be a list"),
    ("unknown measure", _sub("measure: amount", "measure: amont"), 41, "metrics.revenue", "amont"),
    ("ratio of a missing metric", _sub("denominator: sales_count", "denominator: visits"), None, "", "visits"),
    ("agg that does not exist", _sub("agg: sum", "agg: avg"), 27, "semantic_models.sales", "avg"),
    ("model not a ref", _sub("model: ref('shops')", "model: shops"), 31, "semantic_models.shops",
     "model must be ref('TABLE')"),
    ("agg time dimension not a time dimension", _sub("agg_time_dimension: sold_on", "agg_time_dimension: shop"),
     26, "semantic_models.sales.measures.amount", "shop"),
    ("misspelt key in a dimension",
     _sub("        type: categorical", "        type: categorical\n        descripton: x"),
     38, "semantic_models.shops.dimensions.0", "descripton"),
    ("metric defined twice", _sub("saved_queries:", "  - name: revenue\n    type: simple\n"
                                  "    type_params:\n      measure: amount\nsaved_queries:"), 59, "metrics.revenue",
     "defined twice"),
    ("semantic model defined twice", _sub("  - name: shops\n", "  - name: sales\n"), 31, "semantic_models.sales",
     "defined twice"),
    ("duplicate YAML key", _sub("        type: categorical", "        type: categorical\n        type: time"), 40,
     "semantic_models.1.dimensions.0.type", "duplicate key 'type'"),
    ("python tag", _sub("description: an ordinary dbt model entry, skipped", "description: !!python/name:os.system"),
     4, "models.0.description", "not allowed"),
    ("billion laughs", _LAUGHS, None, "", "YAML nodes"),
    ("nested 20,000 deep", _DEEP, None, "", "nested"),
    ("complex mapping key", "semantic_models:\n  ? [a, b]\n  : x\n", 2, "", "mapping key must be a plain value"),
    ("non-UTF-8", GOOD.replace("town", "t\xf6wn").encode("latin-1"), 38, "", "not UTF-8"),
    ("bad Jinja in a metric filter", _sub("      measure: amount", "      measure: amount\n    filter: "
                                         "\"{{ Dimension('shop__town' }} = 'Ely'\""), 41, "metrics.revenue", "Jinja"),
    ("time dimension without a granularity", _sub("        type: time\n        type_params:\n          "
                                                  "time_granularity: day\n", "        type: time\n"), 21,
     "semantic_models.sales.dimensions.0", "not valid"),
    ("wrong grain", _sub("time_granularity: day", "time_granularity: fortnight"), 24, "semantic_models.sales",
     "fortnight"),
    ("two primary entities", _sub("        type: foreign\n        expr: shop_id", "        type: primary\n"
                                  "        expr: shop_id"), 9, "semantic_models.sales", "primary"),
    ("primary_entity naming a second primary", _sub("    model: ref('shops')", "    model: ref('shops')\n"
                                                    "    primary_entity: store"), 31, "semantic_models.shops",
     "primary"),
    ("measure name used in two models", _sub("      - name: town\n        type: categorical",
                                             "      - name: town\n        type: categorical\n    measures:\n"
                                             "      - name: amount\n        agg: sum\n        expr: 1"), 41,
     "semantic_models.shops.measures.amount", "amount"),
    ("derived metric over itself", _sub("saved_queries:", "  - name: loop\n    type: derived\n    type_params:\n"
                                        "      expr: loop + 1\n      metrics: [loop]\nsaved_queries:"), None, "",
     "recursion"),
    ("entity type that does not exist", _sub("        type: foreign", "        type: secondary"), 18,
     "semantic_models.sales", "secondary"),
    ("empty metrics key", GOOD.split("metrics:")[0] + "metrics:\n", None, "", "No metrics present"),
    ("ratio without a denominator", _sub("      denominator: sales_count\n", ""), 49, "metrics.avg_sale.type_params",
     "ratio metric 'avg_sale' has no denominator"),
    ("ratio without a numerator", _sub("      numerator: revenue\n", ""), 49, "metrics.avg_sale.type_params",
     "ratio metric 'avg_sale' has no numerator"),
]

#: Errors only the data can reveal: (title, YAML text, key fragment, message fragment)
BAD_DB: list[tuple[str, str, str, str]] = [
    ("missing table", _sub("model: ref('shops')", "model: ref('stores')"), "semantic_models.shops.model",
     "table or view 'stores' is not in schema 'main' of the database"),
    ("missing column", _sub("      - name: town\n        type: categorical",
                            "      - name: town\n        type: categorical\n        expr: city"),
     "semantic_models.shops.dimensions.town", "fails in DuckDB"),
    ("non-unique primary key in the data (fan-out)", _sub("        type: primary\n        expr: shop_id",
                                                          "        type: primary\n        expr: shop_id % 2"),
     "semantic_models.shops.entities.shop", "not unique"),
    ("time dimension that is text", _sub("      - name: sold_on\n        type: time",
                                         "      - name: sold_on\n        type: time\n"
                                         "        expr: CAST(sold_on AS VARCHAR)"),
     "semantic_models.sales.dimensions.sold_on", "not a DATE or TIMESTAMP"),
]


def make_db(where: Path) -> Path:
    path = where / "sales.duckdb"
    if not path.exists():
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE shops AS SELECT * FROM (VALUES (1, 'Ely'), (2, 'Bath'), (3, 'York')) "
                    "t(shop_id, town)")
        con.execute("CREATE TABLE sales AS SELECT * FROM (VALUES (10, 1, DATE '2024-01-02', 5.0), "
                    "(11, 2, DATE '2024-02-03', 7.0), (12, 2, DATE '2024-02-04', 1.0), "
                    "(13, 9, DATE '2024-03-01', 2.0)) "
                    "t(sale_id, shop_id, sold_on, amount)")
        con.close()
    return path


@pytest.fixture(scope="module")
def sales_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_db(tmp_path_factory.mktemp("sales"))


def test_the_corpus_is_broad() -> None:
    assert len(BAD) + len(BAD_DB) >= 25


def test_a_dbt_project_as_it_is_checks(tmp_path: Path, sales_db: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "sales.yml").write_text(GOOD)
    (tmp_path / "dbt_project.yml").write_text("name: shop\nversion: '1.0'\nprofile: x\n")
    # the profile's target schema is where ref() resolves: the project folder holds profiles.yml here
    (tmp_path / "profiles.yml").write_text("x:\n  target: dev\n  outputs:\n    dev: {type: duckdb, schema: main}\n")
    res = runner.invoke(app, ["semantic", "check", str(tmp_path), "--db", str(sales_db), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout[:res.stdout.rindex("}") + 1])
    assert report["engine"] == "metricflow" and not report["failed"]
    assert report["metrics"] == 4 and report["time_spine"] == "generated"
    assert report["saved_queries"] == ["revenue_by_town"]
    ran = {(r["metric"], r["dimension"]) for r in report["results"] if r["ok"]}
    assert ("saved query revenue_by_town", "") in ran
    assert ("revenue_to_date", "town") in ran, "a cumulative metric is asked per month, with the dimension"


def test_ratio_with_a_zero_denominator_is_null_and_the_left_join_keeps_unmatched_rows(tmp_path: Path,
                                                                                     sales_db: Path) -> None:
    (tmp_path / "m.yml").write_text(GOOD)
    q = {"metrics": ["revenue", "avg_sale"], "group_by": ["shop__town"], "order_by": [{"field": "shop__town"}]}
    res = runner.invoke(app, ["sql", "--semantic-model", str(tmp_path / "m.yml"), "--db", str(sales_db),
                              "--intent", json.dumps(q), "--execute", "--show-sql"])
    assert res.exit_code == 0, res.output
    assert "NULLIF(" in res.stderr, "MetricFlow's ratio divides by NULLIF(denominator, 0): NULL, never Infinity"
    objects = [json.loads(x) for x in res.stdout.strip().splitlines()]  # stdout: the rows only
    assert all(list(o) == ["shop__town", "revenue", "avg_sale"] for o in objects), objects
    rows = [list(o.values()) for o in objects]
    assert [r[:2] for r in rows[:2]] == [["Bath", "8.0"], ["Ely", "5.0"]], rows
    assert rows[0][2] == 4.0 and len(rows) == 3
    assert rows[-1][0] is None, "a sale whose shop is missing forms a NULL group (LEFT OUTER JOIN)"


def _run(tmp_path: Path, db: Path, text: str | bytes) -> tuple[int, str, Path]:
    path = tmp_path / "model.yml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    res = runner.invoke(app, ["semantic", "check", str(path), "--db", str(db)])
    return res.exit_code, res.output.strip(), path


@pytest.mark.parametrize("title, text, line, key, fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_project_names_file_line_and_key(tmp_path: Path, sales_db: Path, title: str, text: str | bytes,
                                             line: int | None, key: str, fragment: str) -> None:
    before = sorted(tmp_path.iterdir())
    code, msg, path = _run(tmp_path, sales_db, text)
    assert code == 2, (title, msg)
    assert "Traceback" not in msg, msg
    assert str(path) in msg and fragment in msg, msg
    if line is not None:
        assert f"{path}:{line}" in msg, msg
    if key:
        assert f"field '{key}" in msg, msg
    assert sorted(tmp_path.iterdir()) == [*before, path] or sorted(tmp_path.iterdir()) == before, "nothing written"


@pytest.mark.parametrize("title, text, key, fragment", BAD_DB, ids=[b[0] for b in BAD_DB])
def test_bad_project_against_the_data(tmp_path: Path, sales_db: Path, title: str, text: str, key: str,
                                      fragment: str) -> None:
    code, msg, path = _run(tmp_path, sales_db, text)
    assert code == 2, (title, msg)
    assert f"{path}:" in msg and f"field '{key}'" in msg and fragment in msg, msg


def test_every_problem_is_reported_in_one_pass(tmp_path: Path, sales_db: Path) -> None:
    text = _sub("        type: categorical", "        type: categorical\n        descripton: x",
                _sub("agg: sum", "agg: avg", _sub("metrics:", "metrcs: 1\nmetrics:")))
    code, msg, path = _run(tmp_path, sales_db, text)
    assert code == 2 and "3 problems" in msg, msg
    assert "metrcs" in msg and "'avg'" in msg and "descripton" in msg, msg
    assert len(msg.splitlines()) == 4, "a header, then one line per problem"
    text = _sub("        type: primary\n        expr: shop_id", "        type: primary\n        expr: shop_id % 2",
                _sub("model: ref('sales')", "model: ref('sales')\n    description: x"))
    text = _sub("      - name: town\n        type: categorical", "      - name: town\n        type: categorical\n"
                "        expr: city", text)
    code, msg, _ = _run(tmp_path, sales_db, text)
    assert code == 2 and "3 problems" in msg, msg
    assert "not unique" in msg and "fails in DuckDB" in msg, msg
    assert "the rest of the layer is not usable" in msg and "no categorical dimension" in msg, \
        "both data problems exclude what they touch; what is left has no dimension: refused, saying why"


def test_dbts_semantic_manifest_json_is_read_directly(tmp_path: Path, sales_db: Path) -> None:
    """dbt writes target/semantic_manifest.json from the same objects: reading it gives the same
    metrics, group-bys and SQL as reading the YAML."""
    from nlq2sql.semantic.catalog import load_catalog

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "sales.yml").write_text(GOOD)
    from_yaml = load_catalog(tmp_path / "models")
    target = tmp_path / "target"
    target.mkdir()
    (target / "semantic_manifest.json").write_text(from_yaml.manifest.json())
    from_json = load_catalog(target / "semantic_manifest.json")
    assert list(from_json.metrics) == list(from_yaml.metrics)
    assert from_json.engine.group_bys(("revenue",)) == from_yaml.engine.group_bys(("revenue",))
    from nlq2sql.semantic.query import MetricQuery

    q = MetricQuery.model_validate({"metrics": ["avg_sale"], "group_by": ["shop__town"]})
    assert from_json.engine.compile(q) == from_yaml.engine.compile(q)
    res = runner.invoke(app, ["semantic", "check", str(target / "semantic_manifest.json"), "--db", str(sales_db)])
    assert res.exit_code == 0, res.output
    (target / "semantic_manifest.json").write_text('{"metrics": []}')
    res = runner.invoke(app, ["semantic", "check", str(target / "semantic_manifest.json"), "--db", str(sales_db)])
    assert res.exit_code == 2 and "not a dbt semantic_manifest.json" in res.output, res.output


def test_dot_files_in_a_project_folder_are_not_read(tmp_path: Path) -> None:
    """dbt writes ``.user.yml`` into a project folder; it is not part of the semantic layer."""
    from nlq2sql.semantic.project import read_project

    shutil.copy(WAREHOUSE_DIR / "retail" / "semantic_model.yml", tmp_path / "semantic_model.yml")
    (tmp_path / ".user.yml").write_text("id: 3f1b2c\n")
    project = read_project(tmp_path, name="retail", display="retail")
    assert not project.problems
    assert project.semantic_models


def test_a_metric_error_is_its_reason_first_not_metricflows_object_dump(tmp_path: Path, sales_db: Path) -> None:
    """MetricFlow words a ratio without a denominator as the metric's ~600-character repr, then the
    reason: reported as the reason alone, at the metric's file, line and key."""
    code, msg, path = _run(tmp_path, sales_db, _sub("      denominator: sales_count\n", ""))
    assert code == 2, msg
    assert msg.startswith(f"error: {path}:49: field 'metrics.avg_sale.type_params': ratio metric"), msg
    assert "Pydantic" not in msg and "type_params=" not in msg and len(msg) < 300, msg


def test_mf_reason_names_the_object_and_keeps_other_errors() -> None:
    from nlq2sql.semantic.mf import mf_problem, mf_reason

    class PydanticMetric:  # stands in for MetricFlow's class (matched by name), as its assertion words it
        name = "margin"
        metadata = type("M", (), {"repo_file_path": "m.yml", "file_slice": type("S", (), {"start_line_number": 7})})

        def __str__(self) -> str:
            return "name='margin' type=<MetricType.DERIVED: 'derived'> " + "x" * 600

        def fail(self) -> None:
            raise AssertionError(f"{self} is broken in some new way")

    try:
        PydanticMetric().fail()
    except AssertionError as exc:
        assert mf_reason(exc) == "metric 'margin': broken in some new way (m.yml:7)"
        p = mf_problem(exc, "proj")
        assert (p.path, p.line, p.key, p.message) == ("m.yml", 7, "metrics.margin", "metric 'margin': broken in "
                                                      "some new way")
    plain = ValueError("Error #1\nsomething\nTraceback (most recent call last): ...")
    assert mf_reason(plain) == "something"
    assert str(mf_problem(plain, "proj")) == "proj: MetricFlow: something"
