"""Executor: read-only, no external access, timeouts, memo; Spider-style comparison."""

from __future__ import annotations

import decimal
import time
from pathlib import Path

import pytest

from nlq2sql.errors import ExecutionError
from nlq2sql.stages.execute import Executor, normalise, result_hash, rows_equal
from nlq2sql.stages.sqlbuild import Query

HEAVY = Query("SELECT SUM(a.quantity * b.quantity * c.quantity) FROM order_lines a, order_lines b, "
              "order_lines c", ())


def test_warehouse_is_read_only(small_warehouse: Path) -> None:
    with Executor(small_warehouse) as ex:
        for sql in ("CREATE TABLE t AS SELECT 1 AS x", "DELETE FROM order_lines",
                    "DROP TABLE customers", "INSERT INTO channels VALUES (9, 'Fax')"):
            with pytest.raises(ExecutionError):
                ex.run(Query(sql, ()))
        assert ex.run(Query("SELECT COUNT(*) FROM channels", ())) == [(4,)]


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "COPY (SELECT 1) TO '/tmp/nlq2sql-should-not-exist.csv'",
    "ATTACH '/tmp/nlq2sql-should-not-exist.duckdb' AS other",
])
def test_external_access_is_disabled(small_warehouse: Path, sql: str) -> None:
    with Executor(small_warehouse) as ex, pytest.raises(ExecutionError):
        ex.run(Query(sql, ()))
    assert not Path("/tmp/nlq2sql-should-not-exist.csv").exists()


def test_missing_warehouse_is_an_execution_error(tmp_path: Path) -> None:
    with pytest.raises(ExecutionError, match="cannot open warehouse"):
        Executor(tmp_path / "nope.duckdb")
    assert not (tmp_path / "nope.duckdb").exists()


def test_timeout_interrupts_and_connection_stays_usable(small_warehouse: Path) -> None:
    with Executor(small_warehouse, timeout_s=0.2) as ex:
        started = time.monotonic()
        with pytest.raises(ExecutionError, match="timeout"):
            ex.run(HEAVY)
        assert time.monotonic() - started < 10
        assert ex.executed == 0
        assert ex.run(Query("SELECT COUNT(*) FROM order_lines", ())) == [(5000,)]


def test_memo_executes_each_distinct_query_once(small_warehouse: Path) -> None:
    q = Query("SELECT c.region, COUNT(*) FROM customers AS c WHERE c.region <> ? GROUP BY 1 ORDER BY 1",
              ("North",))
    with Executor(small_warehouse) as ex:
        first = ex.run(q)
        again = ex.run(Query(q.sql, ("North",)))
        assert again is first and ex.executed == 1
        other = ex.run(Query(q.sql, ("South",)))
        assert ex.executed == 2 and other != first
        assert [r[0] for r in first] == ["Central", "East", "South", "West"]


def test_failed_query_is_not_memoised(small_warehouse: Path) -> None:
    with Executor(small_warehouse) as ex:
        for _ in range(2):
            with pytest.raises(ExecutionError, match="no_such_table|does not exist"):
                ex.run(Query("SELECT * FROM no_such_table", ()))
        assert ex.executed == 0


def test_rows_equal_ordered_vs_multiset() -> None:
    a = [("North", 1.0), ("South", 2.0), ("South", 2.0)]
    b = [("South", 2.0), ("North", 1.0), ("South", 2.0)]
    assert rows_equal(a, b, ordered=False)
    assert not rows_equal(a, b, ordered=True)
    assert rows_equal(a, list(a), ordered=True)
    # Multiset, not set: multiplicity matters.
    assert not rows_equal(a, [("North", 1.0), ("South", 2.0)], ordered=False)
    assert not rows_equal(a, a + [("East", 3.0)], ordered=False)


def test_float_tolerance_and_decimal_normalisation() -> None:
    [[x]] = normalise([(0.1 + 0.2,)])
    assert x == 0.3
    assert normalise([(decimal.Decimal("1234.50"),)]) == normalise([(1234.5,)])
    assert normalise([(1 / 3,)]) == normalise([(0.333333333,)])
    assert normalise([(1.0,)]) != normalise([(1.00001,)])
    assert rows_equal(normalise([("a", 100.0000000001)]), normalise([("a", 100.0)]), ordered=True)


def test_dates_normalise_to_iso_text(executor: Executor) -> None:
    rows = executor.run(Query("SELECT MIN(order_date), DATE_TRUNC('quarter', MAX(order_date)) "
                              "FROM order_lines", ()))
    assert rows == [("2024-01-01", "2025-10-01T00:00:00")]


def test_result_hash_order_sensitivity() -> None:
    a, b = [("x", 1), ("y", 2)], [("y", 2), ("x", 1)]
    assert result_hash(a, ordered=False) == result_hash(b, ordered=False)
    assert result_hash(a, ordered=True) != result_hash(b, ordered=True)
    assert result_hash(a, ordered=False) != result_hash([("x", 1)], ordered=False)
    assert len(result_hash(a, ordered=True)) == 16


def test_memoised_hash_and_equality_match_the_functions(small_warehouse: Path) -> None:
    by_region = Query("SELECT c.region, COUNT(*) FROM customers AS c GROUP BY 1 ORDER BY 1", ())
    reversed_ = Query("SELECT c.region, COUNT(*) FROM customers AS c GROUP BY 1 ORDER BY 1 DESC", ())
    with Executor(small_warehouse) as ex:
        a, b = ex.run(by_region), ex.run(reversed_)
        for ordered in (True, False):
            assert ex.result_hash(by_region, ordered=ordered) == result_hash(a, ordered=ordered)
            assert ex.same_result(by_region, reversed_, ordered=ordered) == rows_equal(a, b, ordered=ordered)
        assert ex.same_result(by_region, reversed_, ordered=False)
        assert not ex.same_result(by_region, reversed_, ordered=True)
        assert ex.result_hash(by_region, ordered=True) != ex.result_hash(reversed_, ordered=True)
        assert ex.executed == 2
