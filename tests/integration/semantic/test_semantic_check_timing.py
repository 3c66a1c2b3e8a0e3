"""``semantic check``: per-query timings, a query past ``--query-timeout`` reported as slow (not
failed, exit 0), and the generated time spine bounded by the data's years without changing what
a cumulative or offset metric answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.semantic import open_warehouse
from nlq2sql.semantic.catalog import SPINE_SQL, load_catalog, spine_reach_days, spine_sql
from nlq2sql.semantic.query import MetricQuery
from nlq2sql.semantic.warehouse import resolve_db
from nlq2sql.stages.execute import Executor

runner = CliRunner()


def test_the_json_report_times_every_query() -> None:
    res = runner.invoke(app, ["semantic", "check", "retail", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["results"] and all(r["seconds"] >= 0 for r in report["results"])
    assert report["seconds"] >= max(r["seconds"] for r in report["results"])
    assert report["query_timeout_s"] == 10 and report["slow"] == [] and report["failed"] == []
    assert "slowest: " in res.stderr and f"{report['queries']} queries in" in res.stderr


def test_a_query_past_the_timeout_is_slow_not_failed() -> None:
    """A 1 ms limit: the queries that run past it are slow, none failed; exit 0 with a warning
    naming each slow one and the option that gives them more time."""
    res = runner.invoke(app, ["semantic", "check", "retail", "--json", "--query-timeout", "0.001"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["failed"] == [] and report["slow"] and report["query_timeout_s"] == 0.001
    assert report["slow"] == [r for r in report["results"] if not r["ok"]]
    assert all(r["slow"] and "timeout" in r["error"] for r in report["slow"])
    assert f"{len(report['slow'])} of {report['queries']} queries ran past the 0.001 s limit" in res.stderr
    assert "--query-timeout" in res.stderr and "slow, not failed" in res.stderr
    for r in report["slow"]:
        assert f"slow {r['metric']} × {r['dimension']}: did not finish in 0.001 s" in res.stderr


def test_a_bad_query_timeout_is_refused() -> None:
    res = runner.invoke(app, ["semantic", "check", "retail", "--query-timeout", "0"])
    assert res.exit_code == 2


@pytest.fixture(scope="module")
def jaffle_generated() -> Iterator[tuple[Any, Executor]]:
    cat = load_catalog("jaffle", spine="generated")  # jaffle declares a spine: its layer on the generated one
    ex = Executor(resolve_db(None, "jaffle", True), timeout_s=120)
    yield cat, ex
    ex.close()


def _rows(ex: Executor, sql: str) -> list[tuple[object, ...]]:
    return sorted(ex._con.execute(sql).fetchall(), key=repr)


@pytest.mark.parametrize("metric", ["revenue_trailing_7d", "orders_mtd", "revenue_growth_mom", "revenue_growth_yoy"])
@pytest.mark.parametrize("grain", ["day", "week", "month", "quarter", "year"])
def test_windows_and_offsets_answer_the_same_on_the_bounded_spine(jaffle_generated: tuple[object, Executor],
                                                                  metric: str, grain: str) -> None:
    """A windowed or grain-to-date cumulative and an offset window: the same rows on the bounded
    spine as on every day of 1900–2100, at every grain (the edges of the data included)."""
    cat, ex = jaffle_generated
    bounded = cat.engine.compile(MetricQuery(metrics=(metric,), group_by=(f"metric_time__{grain}",))).sql
    inline = f"({spine_sql(cat.manifest)})"
    assert inline in bounded and SPINE_SQL not in bounded
    rows = _rows(ex, bounded)
    assert rows and rows == _rows(ex, bounded.replace(inline, f"({SPINE_SQL})"))


def test_an_all_time_running_total_stops_at_the_data_years_end(jaffle_generated: tuple[object, Executor]) -> None:
    """The unbounded spine's extra rows are the final total repeated past the data's years: the
    bounded spine's rows are exactly the unbounded ones up to December 31 of its last year (the
    comparison spine stops in 2030: the whole 1900–2100 join takes minutes)."""
    cat, ex = jaffle_generated
    sql = cat.engine.compile(MetricQuery(metrics=("cumulative_revenue",), group_by=("metric_time__month",))).sql
    inline = f"({spine_sql(cat.manifest)})"
    wide = ("(SELECT CAST(range AS DATE) AS date_day FROM range(DATE '1900-01-01', DATE '2031-01-01', "
            "INTERVAL 1 DAY))")
    bounded, unbounded = _rows(ex, sql), _rows(ex, sql.replace(inline, wide))
    last_day = ex._con.execute(f"SELECT MAX(date_day) FROM {inline}").fetchone()[0]
    assert last_day.month == 12 and last_day.day == 31
    assert bounded == [r for r in unbounded if r[0].date() <= last_day]
    assert {r[1] for r in unbounded if r[0].date() > last_day} == {max(r[1] for r in bounded)}


def test_the_spine_covers_the_data_and_the_largest_window() -> None:
    cat = load_catalog("jaffle", spine="generated")
    assert spine_reach_days(cat.manifest) == 366  # the year-over-year offset
    wh = open_warehouse("jaffle")
    with Executor(wh.db_path) as ex:
        first, last = ex._con.execute(f"SELECT MIN(date_day), MAX(date_day) FROM ({spine_sql(cat.manifest)})"
                                      ).fetchone()
    years = wh.years
    assert str(first) == f"{years[0]}-01-01"  # the data's first year, whole
    assert last.year >= int(years[-1]) + 1  # past the last year by the largest offset, whole years
