"""The synthetic warehouse: deterministic, sized by scale, two calendar years, fixed tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from retail import RETAIL as RETAIL_MODEL
from retail import retail_wh

from nlq2sql import paths
from nlq2sql.semantic import warehouse
from nlq2sql.semantic.warehouse import connect_read_only
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.intent import canonicalise
from nlq2sql.stages.sqlbuild import build_sql

RETAIL = warehouse.builder("retail")

TABLES = {"channels", "customers", "dates", "order_lines", "products"}


def _scalar(path: Path, sql: str) -> Any:
    con = connect_read_only(path)
    try:
        row = con.execute(sql).fetchone()
    finally:
        con.close()
    assert row is not None
    return row[0]


def test_tests_use_a_private_cache(small_warehouse: Path) -> None:
    assert paths.cache_dir() != paths.PROJECT_ROOT / ".cache"
    assert warehouse.default_path() == small_warehouse
    assert warehouse.ensure() == small_warehouse


def test_tables(small_warehouse: Path) -> None:
    con = connect_read_only(small_warehouse)
    try:
        names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        cols = [r[0] for r in con.execute("DESCRIBE order_lines").fetchall()]
    finally:
        con.close()
    assert names == TABLES
    assert cols == ["order_id", "line_no", "order_date", "customer_id", "channel_id", "product_id",
                    "quantity", "unit_price", "discount"]


def test_size_follows_scale(small_warehouse: Path) -> None:
    assert RETAIL.BASE_LINES == 100_000  # the default scale: ≈ 100k order lines
    assert _scalar(small_warehouse, "SELECT COUNT(*) FROM order_lines") == int(100_000 * 0.05)
    assert _scalar(small_warehouse, "SELECT COUNT(DISTINCT order_id) FROM order_lines") <= 2_000
    assert _scalar(small_warehouse, "SELECT COUNT(*) FROM products") == len(RETAIL.PRODUCTS)
    assert _scalar(small_warehouse, "SELECT COUNT(*) FROM customers") == RETAIL.N_CUSTOMERS


def test_two_calendar_years(small_warehouse: Path) -> None:
    years = _scalar(small_warehouse, "SELECT LIST(DISTINCT YEAR(order_date) ORDER BY 1) FROM order_lines")
    assert years == [2024, 2025] and tuple(map(str, years)) == RETAIL.YEARS
    assert _scalar(small_warehouse, "SELECT COUNT(*) FROM dates") == 731


def test_dimension_values_match_the_allow_lists(executor: Executor) -> None:
    from nlq2sql.stages.sqlbuild import Query

    for table, col, field in (("customers", "region", "region"), ("customers", "segment", "segment"),
                              ("channels", "channel_name", "channel"), ("products", "category", "category"),
                              ("products", "product_name", "product")):
        got = {r[0] for r in executor.run(Query(f"SELECT DISTINCT {col} FROM {table}", ()))}
        assert got == set(RETAIL.VALUES[field]), field


def test_money_is_exact_decimal(small_warehouse: Path) -> None:
    for col in ("unit_price", "discount"):
        assert _scalar(small_warehouse, f"SELECT typeof({col}) FROM order_lines LIMIT 1").startswith("DECIMAL")
    revenue = "SELECT typeof(SUM(quantity * unit_price * (1 - discount))) FROM order_lines"
    assert _scalar(small_warehouse, revenue).startswith("DECIMAL")
    assert _scalar(small_warehouse, "SELECT MIN(discount) FROM order_lines") >= 0


def test_build_is_deterministic(tmp_path: Path, small_warehouse: Path) -> None:
    """Two independent builds return byte-identical results for every gold query."""
    other = warehouse.build(tmp_path / "again.duckdb", scale=0.05)
    queries = {build_sql(canonicalise(c.gold), RETAIL_MODEL) for name in ("dev", "heldout", "adversarial")
               for c in load_evalset(name, retail_wh()).cases}
    dumps = []
    for path in (small_warehouse, other):
        con = connect_read_only(path)
        try:
            dumps.append(json.dumps([con.execute(q.sql, list(q.params)).fetchall()
                                     for q in sorted(queries, key=lambda q: (q.sql, q.params))],
                                    default=str).encode())
            dumps.append(repr(con.execute("SELECT * FROM order_lines ORDER BY order_id, line_no")
                              .fetchall()).encode())
        finally:
            con.close()
    assert dumps[0] == dumps[2] and dumps[1] == dumps[3]
    assert len(dumps[0]) > 1000
    assert not list(tmp_path.glob("*.tmp")), "the temp file was renamed into place"


def test_different_scale_differs(tmp_path: Path) -> None:
    smaller = warehouse.build(tmp_path / "tiny.duckdb", scale=0.01)
    assert _scalar(smaller, "SELECT COUNT(*) FROM order_lines") == 1_000


@pytest.mark.parametrize("table", sorted(TABLES))
def test_tables_are_non_empty(small_warehouse: Path, table: str) -> None:
    assert _scalar(small_warehouse, f"SELECT COUNT(*) FROM {table}") > 0
