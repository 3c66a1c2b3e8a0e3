"""The shipped ``jaffle`` warehouse: dbt's Jaffle Shop on jafgen data, with a dbt-style semantic layer.

The warehouse is built once per module into a temporary folder (a few seconds).  Checked here:
``semantic check`` passes (MetricFlow validation, data checks, every metric × reachable dimension);
every gold of the four v2 eval sets is a MetricFlow query the answer schema can express that
compiles and returns rows; ids are unique, adversarial items paraphrase held-out items (same
pair_id, same gold); two builds give the same rows; the time-bound metrics (offset windows,
windowed cumulatives) run grouped by metric_time and are MetricFlow's refusal without it; two-hop
names work in where and as entities.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from repo_paths import ROOT
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.semantic import load_catalog
from nlq2sql.semantic.contract import MAX_GROUP_BY, MAX_LIMIT, MAX_METRICS, MAX_ORDER, MAX_VALUES, MAX_WHERE
from nlq2sql.semantic.query import METRIC_TIME, MetricQuery
from nlq2sql.semantic.warehouse import build, builder

runner = CliRunner()
HERE = ROOT / "warehouses" / "jaffle"
SETS = {"dev": 20, "heldout": 60, "adversarial": 30, "unanswerable": 20}  # minimum sizes
KEYS = {"id", "question", "gold", "answerable", "category", "pair_id", "tags"}
MARTS = ("orders", "order_items", "customers", "products", "supplies", "locations")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("jaffle") / "jaffle.duckdb", name="jaffle")


def _items(name: str) -> list[dict[str, Any]]:
    lines = (HERE / "evalsets" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _category(q: MetricQuery) -> str:
    return {"time_series": "time_series", "top_n_by_metric": "top_n", "breakdown": "breakdown"}[q.kind]


def _fingerprint(path: Path) -> dict[str, tuple[int, str]]:
    """Rows and an order-independent checksum of every mart (ids, money and dates included)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        for table in MARTS:
            row = con.execute(f"SELECT COUNT(*), md5(string_agg(md5(CAST(t AS VARCHAR)), ',' ORDER BY "
                              f"md5(CAST(t AS VARCHAR)))) FROM {table} t").fetchone()
            assert row is not None
            out[table] = (int(row[0]), str(row[1]))
        return out
    finally:
        con.close()


def test_semantic_check_passes(db: Path) -> None:
    res = runner.invoke(app, ["semantic", "check", "jaffle", "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert not report["failed"]
    assert report["time_spine"] == "declared"
    assert report["metrics"] >= 25 and report["queries"] > 150
    types = {m.type for m in load_catalog("jaffle").metrics.values()}
    assert types == {"simple", "ratio", "derived", "cumulative"}


def test_marts_as_dbt_builds_them(db: Path) -> None:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchall()[0][0] for t in (*MARTS, "time_spine_daily")}
        assert rows["products"] == 10 and rows["locations"] == 6 and rows["supplies"] == 65
        assert rows["orders"] > 20_000 and rows["order_items"] > rows["orders"] and rows["customers"] > 100
        # dbt's tests on the marts: totals add up, one row per key, orders without items dropped
        assert con.execute("SELECT COUNT(*) FROM orders WHERE order_total <> subtotal + tax_paid "
                           "OR order_items_subtotal <> subtotal").fetchone() == (0,)
        assert con.execute("SELECT min(ordered_at), max(ordered_at) FROM orders").fetchone() == (
            dt.date(2018, 9, 1), dt.date(2020, 8, 30))
        assert con.execute("SELECT DISTINCT customer_type FROM customers ORDER BY 1").fetchall() == [
            ("new",), ("returning",)]
        assert con.execute("SELECT COUNT(*) FROM orders o JOIN (SELECT order_id, COUNT(*) n FROM order_items "
                           "GROUP BY 1) i USING (order_id) WHERE i.n <> o.count_order_items").fetchone() == (0,)
    finally:
        con.close()


def test_eval_sets_shape_and_pairs() -> None:
    sets = {name: _items(name) for name in SETS}
    ids: set[str] = set()
    questions: set[str] = set()
    for name, items in sets.items():
        assert len(items) >= SETS[name], name
        for it in items:
            assert set(it) == KEYS, it["id"]
            assert it["id"] not in ids, it["id"]
            ids.add(it["id"])
            key = " ".join(it["question"].lower().split())
            assert key not in questions, it["id"]
            questions.add(key)
            assert it["category"] in ("breakdown", "top_n", "time_series")
            if name == "unanswerable":
                assert it["gold"] is None and it["answerable"] is False, it["id"]
            else:
                assert it["answerable"] is True and isinstance(it["gold"], dict), it["id"]
                assert _category(MetricQuery.model_validate(it["gold"])) == it["category"], it["id"]
    heldout = {it["pair_id"]: it for it in sets["heldout"]}
    assert len(heldout) == len(sets["heldout"]) and None not in heldout
    for it in sets["adversarial"]:
        assert it["pair_id"] in heldout, it["id"]
        assert it["gold"] == heldout[it["pair_id"]]["gold"], it["id"]
    assert len({it["pair_id"] for it in sets["adversarial"]}) == len(sets["adversarial"])


def test_every_gold_compiles_and_returns_rows(db: Path) -> None:
    cat = load_catalog("jaffle")
    con = duckdb.connect(str(db), read_only=True)
    try:
        for name in ("dev", "heldout", "adversarial"):
            for it in _items(name):
                q = MetricQuery.model_validate(it["gold"])
                # within what the v2 answer schema can generate (flat): names, list lengths, limit
                names = set(cat.engine.group_bys(q.metrics))
                fields = {*(w.field for w in q.where or ()), *q.group_by}
                assert fields <= names | {f"{METRIC_TIME}__{g}" for g in ("day", "week", "month", "quarter", "year")}, (
                    it["id"], fields - names)
                assert {o.field for o in q.order_by or ()} <= names | set(q.metrics), it["id"]
                assert len(q.metrics) <= MAX_METRICS and len(q.group_by) <= MAX_GROUP_BY, it["id"]
                assert len(q.where or ()) <= MAX_WHERE and len(q.order_by or ()) <= MAX_ORDER, it["id"]
                assert all(len(w.values) <= MAX_VALUES for w in q.where or ()), it["id"]
                assert q.limit is None or q.limit <= MAX_LIMIT, it["id"]
                sql = cat.engine.compile(q)
                rows = con.execute(sql.sql, list(sql.params)).fetchall()
                assert rows, f"{name} {it['id']}: no rows"
                if q.limit is not None:
                    assert len(rows) <= q.limit, it["id"]
    finally:
        con.close()


def test_evalset_check_accepts_every_set(db: Path) -> None:
    """The project's own checker (v2 golds, unanswerable items) agrees."""
    for name in SETS:
        res = runner.invoke(app, ["evalset", "check", name, "--semantic-model", "jaffle", "--db", str(db)])
        assert res.exit_code == 0, res.output
        assert f"{len(_items(name))} v2 items OK" in " ".join(res.output.split()), res.output


def test_build_is_deterministic(db: Path, tmp_path: Path) -> None:
    again = build(tmp_path / "again.duckdb", name="jaffle")
    assert _fingerprint(again) == _fingerprint(db)


def test_build_scale_and_version() -> None:
    mod = builder("jaffle")
    assert isinstance(mod.VERSION, int) and mod.DEFAULT_SCALE == 0.2


# ------------------------------------------------------------ time-bound metrics (kept aside)

TIME_BOUND = {
    "revenue_growth_mom": ["metric_time__month"],
    "revenue_growth_yoy": ["metric_time__month"],
    "revenue_trailing_7d": ["metric_time__day"],
    "orders_mtd": ["metric_time__day"],
}


@pytest.fixture(scope="module")
def with_time_bound() -> Any:
    return load_catalog("jaffle")  # the time-bound metrics are part of the shipped layer


def test_time_bound_metrics_run_by_metric_time(db: Path, with_time_bound: Any) -> None:
    """Offset-window derived and windowed / grain-to-date cumulative metrics: MetricFlow compiles
    them on DuckDB with the declared spine, and they return rows when grouped by metric_time."""
    cat = with_time_bound
    assert cat.spine == "declared" and set(TIME_BOUND) <= set(cat.metrics)
    con = duckdb.connect(str(db), read_only=True)
    try:
        for metric, group_by in TIME_BOUND.items():
            q = MetricQuery.model_validate({"metrics": [metric], "group_by": group_by, "where": [
                {"field": "metric_time__day", "op": "between", "values": ["2020-01-01", "2020-06-30"]}]})
            sql = cat.engine.compile(q)
            rows = con.execute(sql.sql, list(sql.params)).fetchall()
            assert rows and any(r[1] is not None for r in rows), metric
        # growth: June 2020 against May 2020, from plain monthly revenue
        q = MetricQuery.model_validate({
            "metrics": ["revenue", "revenue_growth_mom"], "group_by": ["metric_time__month"],
            "where": [{"field": "metric_time__day", "op": "between", "values": ["2020-05-01", "2020-06-30"]}],
            "order_by": [{"field": "metric_time__month", "descending": False}]})
        sql = cat.engine.compile(q)
        (_, may, _), (_, june, growth) = con.execute(sql.sql, list(sql.params)).fetchall()
        assert float(growth) == pytest.approx(float((june - may) * 100 / may))
    finally:
        con.close()


def test_time_bound_metrics_without_metric_time_are_metricflows_refusal(with_time_bound: Any) -> None:
    """Grouped by a dimension alone, MetricFlow refuses them with its reason (an item's compile_error);
    with metric_time added they compile (what `semantic check` asks)."""
    from nlq2sql.errors import SqlBuildError

    cat = with_time_bound
    for metric in TIME_BOUND:
        with pytest.raises(SqlBuildError):
            cat.engine.compile(MetricQuery.model_validate({"metrics": [metric],
                                                           "group_by": ["location__location_name"]}))
        cat.engine.compile(MetricQuery.model_validate({"metrics": [metric],
                                                       "group_by": ["metric_time__month", "location__location_name"]}))


def test_two_hop_where_means_the_two_hop_group_by(db: Path) -> None:
    """A two-hop where field is written with MetricFlow's entity_path: filtering on it gives the rows
    of grouping by it and keeping that group."""
    cat = load_catalog("jaffle")
    con = duckdb.connect(str(db), read_only=True)
    try:
        q = cat.engine.compile(MetricQuery.model_validate({
            "metrics": ["revenue"], "group_by": ["order__location__location_name"],
            "where": [{"field": "order__location__location_name", "op": "eq", "values": ["Brooklyn"]}]}))
        grouped = cat.engine.compile(MetricQuery.model_validate({
            "metrics": ["revenue"], "group_by": ["order__location__location_name"]}))
        rows = con.execute(q.sql, list(q.params)).fetchall()
        assert rows and rows == [r for r in con.execute(grouped.sql).fetchall() if r[0] == "Brooklyn"]
    finally:
        con.close()


def test_listed_entities_compile_for_two_hop_metrics() -> None:
    """Entities two hops away are listed with their path (order__customer), as MetricFlow takes them."""
    cat = load_catalog("jaffle")
    listed = cat.engine.group_bys(("revenue",))
    assert {"order__customer", "order__location"} <= set(listed) and not {"customer", "location"} & set(listed)
    for g in ("order__customer", "order__location"):
        cat.engine.compile(MetricQuery.model_validate({"metrics": ["revenue"], "group_by": [g]}))
