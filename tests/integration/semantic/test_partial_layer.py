"""A partial layer: data problems exclude exactly what they touch, and every command uses the rest.

The layer here has one of each data problem (a missing table, a misspelt column in a dimension
and in a measure, a time dimension stored as text, an aggregation time dimension and a measure
NULL in every row, a categorical dimension NULL in every row, a primary entity that is not
unique) beside sound objects, and metrics and saved queries built on both.  ``semantic check``
lists every problem (file, line, key) and what it excludes, and exits 2; ``sql``, ``evalset
check`` and ``score`` work on the rest, refuse a name that was excluded saying why, and the run's
manifest records the exclusions.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from nlq2sql.cli import _common as cli_common
from nlq2sql.cli import main as cli_main
from nlq2sql.cli.main import app
from nlq2sql.errors import SemanticModelError
from nlq2sql.semantic import Catalog, binding, load_catalog, open_warehouse
from nlq2sql.semantic.prune import prune

runner = CliRunner()

LAYER = """\
semantic_models:
  - name: orders
    model: ref('orders')
    defaults:
      agg_time_dimension: ordered_on
    entities:
      - name: order
        type: primary
        expr: order_id
      - name: customer
        type: foreign
        expr: customer_id
      - name: store
        type: foreign
        expr: store_id
    dimensions:
      - name: ordered_on
        type: time
        type_params:
          time_granularity: day
      - name: shipped_on
        type: time
        type_params:
          time_granularity: day
      - name: channel
        type: categorical
      - name: note
        type: categorical
    measures:
      - name: amount
        agg: sum
      - name: order_total
        agg: count
        expr: order_id
      - name: tax
        agg: sum
        expr: amount * tax_rate
      - name: discount
        agg: sum
  - name: customers
    model: ref('customers')
    entities:
      - name: customer
        type: primary
        expr: customer_id
    dimensions:
      - name: region
        type: categorical
      - name: segment
        type: categorical
        expr: segmnt
  - name: stores
    model: ref('stores')
    entities:
      - name: store
        type: primary
        expr: store_id
    dimensions:
      - name: city
        type: categorical
  - name: visits
    model: ref('visits')
    defaults:
      agg_time_dimension: visited_at
    entities:
      - name: visit
        type: primary
        expr: visit_id
      - name: customer
        type: foreign
        expr: customer_id
    dimensions:
      - name: visited_at
        type: time
        type_params:
          time_granularity: day
    measures:
      - name: visit_count
        agg: count
        expr: visit_id
  - name: refunds
    model: ref('refunds')
    defaults:
      agg_time_dimension: refunded_on
    entities:
      - name: refund
        type: primary
        expr: refund_id
    dimensions:
      - name: refunded_on
        type: time
        type_params:
          time_granularity: day
    measures:
      - name: refund_amount
        agg: sum
metrics:
  - name: revenue
    type: simple
    type_params:
      measure: amount
  - name: order_count
    type: simple
    type_params:
      measure: order_total
  - name: avg_order
    type: ratio
    type_params:
      numerator: revenue
      denominator: order_count
  - name: tax_total
    type: simple
    type_params:
      measure: tax
  - name: net_revenue
    type: derived
    type_params:
      expr: revenue - tax_total
      metrics: [revenue, tax_total]
  - name: net_per_order
    type: ratio
    type_params:
      numerator: net_revenue
      denominator: order_count
  - name: tax_to_date
    type: cumulative
    type_params:
      measure: tax
      grain_to_date: month
  - name: discounts
    type: simple
    type_params:
      measure: discount
  - name: visits
    type: simple
    type_params:
      measure: visit_count
  - name: visit_to_order
    type: conversion
    type_params:
      conversion_type_params:
        entity: customer
        calculation: conversion_rate
        base_measure: visit_count
        conversion_measure: order_total
  - name: refunded
    type: simple
    type_params:
      measure: refund_amount
  - name: noted_revenue
    type: simple
    type_params:
      measure: amount
    filter: "{{ Dimension('order__note') }} = 'gift'"
  - name: web_revenue
    type: simple
    type_params:
      measure: amount
    filter: "{{ Dimension('order__channel') }} = 'web'"
saved_queries:
  - name: revenue_by_region
    query_params:
      metrics: [revenue]
      group_by: ["Dimension('customer__region')"]
  - name: tax_by_channel
    query_params:
      metrics: [tax_total]
      group_by: ["Dimension('order__channel')"]
  - name: revenue_by_city
    query_params:
      metrics: [revenue]
      group_by: ["Dimension('store__city')"]
"""

#: A whole layer on the same data: nothing excluded.
SOUND = """\
semantic_models:
  - name: orders
    model: ref('orders')
    defaults:
      agg_time_dimension: ordered_on
    entities:
      - name: order
        type: primary
        expr: order_id
    dimensions:
      - name: ordered_on
        type: time
        type_params:
          time_granularity: day
      - name: channel
        type: categorical
    measures:
      - name: amount
        agg: sum
metrics:
  - name: revenue
    type: simple
    type_params:
      measure: amount
"""

#: (manifest path excluded for a data problem, the YAML text of its line, message fragment)
PROBLEMS: list[tuple[str, str, str]] = [
    ("semantic_models.orders.dimensions.shipped_on", "- name: shipped_on", "is VARCHAR, not a DATE or TIMESTAMP"),
    ("semantic_models.orders.measures.tax", "- name: tax", "fails in DuckDB"),
    ("semantic_models.orders.measures.discount", "- name: discount", "NULL in every row of 'orders'"),
    ("semantic_models.orders.dimensions.note", "- name: note", "NULL in every row of 'orders'"),
    ("semantic_models.customers.dimensions.segment", "- name: segment", "fails in DuckDB"),
    ("semantic_models.stores.entities.store", "- name: store\n        type: primary", "is not unique in 'stores'"),
    ("semantic_models.visits.dimensions.visited_at", "- name: visited_at", "NULL in every row of 'visits'"),
    ("semantic_models.refunds", "model: ref('refunds')",
     "table or view 'refunds' is not in schema 'main' of the database"),
]
#: What the problems take with them, and what stays.
CASCADE = {"metrics.tax_total", "metrics.net_revenue", "metrics.net_per_order", "metrics.tax_to_date",
           "metrics.discounts", "metrics.refunded", "metrics.noted_revenue", "saved_queries.tax_by_channel",
           "saved_queries.revenue_by_city"}
#: ``visits`` and ``visit_to_order`` stand on a measure whose time column is all NULL: the measure
#: stays (its metric_time is NULL), so they answer by any other group-by.
SOUND_METRICS = {"revenue", "order_count", "avg_order", "web_revenue", "visits", "visit_to_order"}


def build_db(path: Path) -> Path:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE orders AS SELECT * FROM (VALUES "
                "(1, 10, 100, DATE '2024-01-05', '2024-01-07', 'web', CAST(NULL AS VARCHAR), 20.0, "
                "CAST(NULL AS DOUBLE)), "
                "(2, 11, 100, DATE '2024-02-05', '2024-02-08', 'shop', NULL, 30.0, NULL), "
                "(3, 10, 101, DATE '2024-02-09', '2024-02-10', 'web', NULL, 50.0, NULL)) "
                "t(order_id, customer_id, store_id, ordered_on, shipped_on, channel, note, amount, discount)")
    con.execute("CREATE TABLE customers AS SELECT * FROM (VALUES (10, 'North', 'a'), (11, 'South', 'b')) "
                "t(customer_id, region, segment)")
    con.execute("CREATE TABLE stores AS SELECT * FROM (VALUES (100, 'Ely'), (100, 'Bath'), (101, 'York')) "
                "t(store_id, city)")
    con.execute("CREATE TABLE visits AS SELECT * FROM (VALUES (1, 10, CAST(NULL AS DATE)), (2, 11, NULL)) "
                "t(visit_id, customer_id, visited_at)")
    con.close()
    return path


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("partial")
    (root / "layer.yml").write_text(LAYER)
    return root / "layer.yml", build_db(root / "shop.duckdb")


@pytest.fixture(autouse=True)
def wide_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (cli_common, cli_main):
        monkeypatch.setattr(module, "err", Console(stderr=True, width=10_000))
    monkeypatch.setattr(binding, "_ANNOUNCED", set())  # each command here is a process of its own


def _line(needle: str) -> int:
    return LAYER[:LAYER.index(needle)].count("\n") + 1


def _key(target: str) -> str:
    return target + ".model" if target.count(".") == 1 else target


def test_semantic_check_lists_every_data_problem_and_what_it_excludes(shop: tuple[Path, Path]) -> None:
    layer, db = shop
    res = runner.invoke(app, ["semantic", "check", str(layer), "--db", str(db)])
    assert res.exit_code == 2, res.output
    out = res.output
    assert f"{len(PROBLEMS)} problems" in out and "Traceback" not in out, out
    for target, needle, fragment in PROBLEMS:
        line = next(ln for ln in out.splitlines() if f"field '{_key(target)}'" in ln)
        assert line.startswith(f"{layer}:{_line(needle)}: ") and fragment in line, (line, needle)
        assert f"excluded {target}: " in out, target
    for target in CASCADE:
        assert f"excluded {target}: " in out, target
    assert not any(ln.startswith("note:") for ln in out.splitlines()), "semantic check lists them: no summary"
    res = runner.invoke(app, ["semantic", "check", str(layer), "--db", str(db), "--json"])
    report = json.loads(res.stdout[:res.stdout.rindex("}") + 1])
    assert {e["object"] for e in report["excluded"]} == {t for t, _, _ in PROBLEMS} | CASCADE
    assert len(report["data_problems"]) == len(PROBLEMS) and report["metrics"] == len(SOUND_METRICS)
    assert not report["failed"], "the rest of the layer answers every query semantic check asks"


def test_the_rest_is_validated_and_excluded_names_are_gone(shop: tuple[Path, Path]) -> None:
    from metricflow_semantic_interfaces.validations.semantic_manifest_validator import SemanticManifestValidator

    layer, db = shop
    wh = open_warehouse(layer, db, announce=False)
    cat = wh.catalog
    assert not SemanticManifestValidator().validate_semantic_manifest(cat.manifest).errors
    assert set(cat.metrics) == SOUND_METRICS and set(cat.dimensions) == {"channel", "region"}
    assert [q.name for q in cat.manifest.saved_queries] == ["revenue_by_region"]
    assert {e.object for e in cat.excluded} == {t for t, _, _ in PROBLEMS} | CASCADE
    stores = next(sm for sm in cat.manifest.semantic_models if sm.name == "stores")
    assert not stores.entities and stores.primary_entity == "store", \
        "the non-unique key joins nothing; its model's own dimensions keep their name"
    whole = load_catalog(layer)
    assert len(whole.manifest.metrics) == 13 and whole.excluded == (), "the pruning works on a copy"


def test_a_sound_metric_runs_and_one_line_says_what_was_excluded(shop: tuple[Path, Path]) -> None:
    layer, db = shop
    q = {"metrics": ["revenue", "avg_order"], "group_by": ["customer__region"],
         "order_by": [{"field": "customer__region"}]}
    res = runner.invoke(app, ["sql", "--semantic-model", str(layer), "--db", str(db), "--intent", json.dumps(q),
                              "--execute"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(ln) for ln in res.stdout.splitlines()]
    assert rows == [{"customer__region": "North", "revenue": "70.0", "avg_order": 35.0},
                    {"customer__region": "South", "revenue": "30.0", "avg_order": 30.0}]
    notes = [ln for ln in res.stderr.splitlines() if ln.startswith("note:")]
    n = len(open_warehouse(layer, db, announce=False).catalog.excluded)
    assert len(notes) == 1 and f" {n} objects excluded" in notes[0] and "nlq2sql semantic check" in notes[0], notes


@pytest.mark.parametrize("query, named, why", [
    ({"metrics": ["net_per_order"]}, "metrics.net_per_order", "tax_rate"),
    ({"metrics": ["discounts"]}, "metrics.discounts", "NULL in every row"),
    ({"metrics": ["refunded"]}, "metrics.refunded", "'refunds' is not in schema 'main' of the database"),
    ({"metrics": ["revenue"], "group_by": ["customer__segment"]}, "semantic_models.customers.dimensions.segment",
     "segmnt"),
    ({"metrics": ["revenue"], "group_by": ["order__note"]}, "semantic_models.orders.dimensions.note",
     "NULL in every row"),
    ({"metrics": ["revenue"], "group_by": ["store__city"]}, "semantic_models.stores.entities.store", "fan out"),
    ({"metric": "revenue", "dimension": "segment", "intent": "breakdown", "time_grain": None, "filters": [],
      "limit": None, "order": None}, "semantic_models.customers.dimensions.segment", "segmnt"),
], ids=["derived-of-derived", "all-null-measure", "missing-table", "missing-column",
        "all-null-dimension", "non-unique-key", "v1-intent"])
def test_a_query_naming_an_excluded_object_is_refused_saying_why(shop: tuple[Path, Path], query: dict[str, object],
                                                                 named: str, why: str) -> None:
    layer, db = shop
    res = runner.invoke(app, ["sql", "--semantic-model", str(layer), "--db", str(db), "--intent", json.dumps(query)])
    assert res.exit_code == 2, res.output
    assert "excluded from this semantic layer" in res.output and named in res.output and why in res.output, res.output
    assert "Traceback" not in res.output


def test_metrics_on_an_excluded_measure_go_transitively() -> None:
    whole = load_catalog_text(LAYER)
    pruned, excluded = prune(whole.manifest, [("semantic_models.orders.measures.tax", "a reason")])
    assert {e.object for e in excluded} == {"semantic_models.orders.measures.tax", "metrics.tax_total",
                                            "metrics.net_revenue", "metrics.net_per_order", "metrics.tax_to_date",
                                            "saved_queries.tax_by_channel"}
    why = {e.object: e.reason for e in excluded}
    assert why["metrics.net_per_order"].startswith("uses metric 'net_revenue', excluded")
    assert "semantic_models.orders.measures.tax: a reason" in why["metrics.net_per_order"], "the root cause is named"
    assert {m.name for m in pruned.metrics} == {m.name for m in whole.manifest.metrics} - {
        "tax_total", "net_revenue", "net_per_order", "tax_to_date"}
    assert prune(whole.manifest, []) == (whole.manifest, ())


_TMP: dict[str, Path] = {}


def load_catalog_text(text: str) -> Catalog:
    import tempfile

    if text not in _TMP:
        folder = Path(tempfile.mkdtemp(prefix="partial-layer-"))
        (folder / "layer.yml").write_text(text)
        _TMP[text] = folder / "layer.yml"
    return load_catalog(_TMP[text])


#: What a property test may remove: the objects with problems and sound ones (whole models too).
_ELEMENTS = sorted({t for t, _, _ in PROBLEMS} | {
    "semantic_models.orders.measures.amount", "semantic_models.orders.measures.order_total",
    "semantic_models.orders.dimensions.channel", "semantic_models.orders.dimensions.ordered_on",
    "semantic_models.orders.entities.customer", "semantic_models.customers.entities.customer",
    "semantic_models.customers", "semantic_models.stores"})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_ELEMENTS), min_size=1, max_size=4, unique=True))
def test_any_pruning_validates_and_leaves_nothing_that_needs_what_is_gone(removals: list[str]) -> None:
    """Whatever is removed, what is left passes MetricFlow's validator, and no metric or saved
    query left names a measure or metric that is not there (or the layer is refused, saying so)."""
    from metricflow_semantic_interfaces.validations.semantic_manifest_validator import SemanticManifestValidator

    whole = load_catalog_text(LAYER)
    try:
        pruned, excluded = prune(whole.manifest, [(r, "removed by the test") for r in removals])
    except SemanticModelError as exc:
        assert "still rejects" in str(exc)
        return
    assert not SemanticManifestValidator().validate_semantic_manifest(pruned).errors
    gone = {e.object for e in excluded}
    assert all(r in gone or ".".join(r.split(".")[:2]) in gone for r in removals), "each, or its whole model"
    measures = {m.name for sm in pruned.semantic_models for m in sm.measures}
    metrics = {m.name for m in pruned.metrics}
    for m in pruned.metrics:
        tp = m.type_params
        assert all(x.name in measures for x in tp.input_measures or ()), m.name
        assert all(x.name in metrics for x in [tp.numerator, tp.denominator, *(tp.metrics or ())] if x), m.name
    assert all(set(q.query_params.metrics) <= metrics for q in pruned.saved_queries)


def test_the_run_manifest_records_the_exclusions(shop: tuple[Path, Path], tmp_path: Path) -> None:
    layer, db = shop
    gold = {"intent": "breakdown", "metric": "revenue", "dimension": "region", "time_grain": None, "filters": [],
            "limit": None, "order": None}
    es = tmp_path / "set.jsonl"
    es.write_text(json.dumps({"id": "q1", "question": "Revenue by region", "gold": gold, "category": "breakdown"})
                  + "\n")
    responses = tmp_path / "responses.jsonl"
    responses.write_text(json.dumps({"id": "q1", "text": json.dumps(gold)}) + "\n")
    out = tmp_path / "run"
    res = runner.invoke(app, ["score", "--evalset", str(es), "--responses", str(responses), "--out", str(out),
                              "--semantic-model", str(layer), "--db", str(db), "--guardrails", "none", "--json"])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert "db_sha256" in manifest and "excluded" in manifest
    wh = open_warehouse(layer, db, announce=False)
    assert manifest["excluded"] == [{"object": e.object, "reason": e.reason} for e in wh.catalog.excluded]
    assert json.loads((out / "summary.json").read_text())["raw_accuracy"]["k"] == 1
    sound = tmp_path / "sound.yml"
    sound.write_text(SOUND)
    facts = open_warehouse(sound, db).manifest().to_json()
    assert facts["excluded"] == [], "a whole layer records an empty list"


def test_evalset_check_names_the_exclusion(shop: tuple[Path, Path], tmp_path: Path) -> None:
    layer, db = shop
    items = [{"id": "a", "question": "Revenue by region", "answerable": True, "category": "breakdown",
              "gold": {"metrics": ["revenue"], "group_by": ["customer__region"]}},
             {"id": "b", "question": "Orders per channel", "answerable": True, "category": "breakdown",
              "gold": {"metrics": ["order_count"], "group_by": ["order__channel"]}}]
    es = tmp_path / "v2.jsonl"
    es.write_text("".join(json.dumps(i) + "\n" for i in items))
    res = runner.invoke(app, ["evalset", "check", str(es), "--semantic-model", str(layer), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert "objects excluded" in res.stderr, "a passing check still says the layer is partial"
    items.append({"id": "c", "question": "Tax by channel", "answerable": True, "category": "breakdown",
                  "gold": {"metrics": ["tax_total"], "group_by": ["order__channel"]}})
    es.write_text("".join(json.dumps(i) + "\n" for i in items))
    res = runner.invoke(app, ["evalset", "check", str(es), "--semantic-model", str(layer), "--db", str(db)])
    assert res.exit_code == 2, res.output
    assert f"{es}:3: field 'gold'" in res.output and "'tax_total' is excluded" in res.output, res.output
    assert "does not compile" not in res.output and "tax_rate" in res.output


def test_the_data_checks_run_once_per_layer_and_database(shop: tuple[Path, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from nlq2sql.semantic import datacheck

    _, db = shop
    layer = tmp_path / "layer.yml"
    layer.write_text(LAYER)
    calls: list[object] = []
    real = datacheck.check_data
    monkeypatch.setattr(datacheck, "check_data", lambda *a: calls.append(a) or real(*a))
    first = open_warehouse(layer, db, announce=False)
    again = open_warehouse(layer, db, announce=False)
    assert len(calls) == 1 and again.catalog is first.catalog
    other = tmp_path / "other.duckdb"
    other.write_bytes(db.read_bytes())
    open_warehouse(layer, other, announce=False)
    assert len(calls) == 2, "another database is checked on its own"


def test_a_measure_whose_time_column_is_unusable_stays_with_a_null_metric_time(shop: tuple[Path, Path]) -> None:
    """An all-NULL aggregation time dimension is excluded, not the measures aggregated on it: a
    question by any other group-by still reaches them (as dbt's ``mf query`` answers it)."""
    layer, db = shop
    cat = open_warehouse(layer, db, announce=False).catalog
    why = {e.object: e.reason for e in cat.excluded}
    assert "kept, with a NULL metric_time" in why["semantic_models.visits.dimensions.visited_at"]
    q = {"metrics": ["visits"], "group_by": ["customer__region"], "order_by": [{"field": "customer__region"}]}
    res = runner.invoke(app, ["sql", "--semantic-model", str(layer), "--db", str(db), "--intent", json.dumps(q),
                              "--execute"])
    assert res.exit_code == 0, res.output
    assert sum(json.loads(ln)["visits"] for ln in res.stdout.splitlines()) == 2
    q = {"metrics": ["visits"], "group_by": ["metric_time__month"]}
    res = runner.invoke(app, ["sql", "--semantic-model", str(layer), "--db", str(db), "--intent", json.dumps(q),
                              "--execute"])
    assert res.exit_code == 0 and [json.loads(ln)["metric_time__month"] for ln in res.stdout.splitlines()] == [None]
