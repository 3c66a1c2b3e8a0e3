"""Run built queries on DuckDB (read-only, no external access, timed out) and compare.

Results compare as in Spider's test suite: a multiset of rows, or a sequence when the intent implies
an order; floats after rounding to ``FLOAT_DIGITS`` significant digits. Results are memoised by
(SQL, params), so the many items sharing a query execute it once."""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb

from nlq2sql.errors import ExecutionError, QueryTimeoutError
from nlq2sql.semantic.engine import Query
from nlq2sql.semantic.warehouse import connect_read_only

__all__ = ["DEFAULT_TIMEOUT_S", "FLOAT_DIGITS", "Executor", "Row", "normalise", "result_hash", "rows_equal"]

FLOAT_DIGITS = 9
DEFAULT_TIMEOUT_S = 10.0
Row = tuple[Any, ...]
def _cell(value: object) -> object:
    if isinstance(value, (decimal.Decimal, float)):
        return float(f"{float(value):.{FLOAT_DIGITS}g}")
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return value


def normalise(rows: list[Row]) -> list[Row]:
    """Make rows comparable and hashable across machines (decimals, floats, dates)."""
    return [tuple(_cell(v) for v in row) for row in rows]


def rows_equal(pred: list[Row], gold: list[Row], *, ordered: bool) -> bool:
    """Spider-style equality of normalised rows."""
    if ordered:
        return pred == gold
    return Counter(pred) == Counter(gold)


def result_hash(rows: list[Row], *, ordered: bool) -> str:
    """Short digest of a normalised result; order-insensitive unless ``ordered``."""
    items = rows if ordered else sorted(rows, key=repr)
    text = json.dumps(items, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Executor:
    """A read-only DuckDB connection with a per-query timeout and a result memo."""

    def __init__(self, path: str | Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path, self.timeout_s = str(path), timeout_s
        try:
            self._con = connect_read_only(self.path)
        except duckdb.Error as exc:
            raise ExecutionError(f"cannot open warehouse {self.path}: {exc}") from None
        self._memo: dict[Query, list[Row]] = {}
        self._hashes: dict[tuple[Query, bool], str] = {}
        self._equal: dict[tuple[Query, Query, bool], bool] = {}
        self._lock = threading.Lock()
        self.executed = 0

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, query: Query) -> list[Row]:
        """Normalised rows of ``query``; executes each distinct query once."""
        with self._lock:
            hit = self._memo.get(query)
            if hit is not None:
                return hit
            timer = threading.Timer(self.timeout_s, self._con.interrupt)
            timer.start()
            try:
                rows = self._con.execute(query.sql, list(query.params)).fetchall()
            except duckdb.InterruptException:
                raise QueryTimeoutError(self.timeout_s) from None
            except duckdb.Error as exc:
                raise ExecutionError(str(exc).splitlines()[0]) from None
            finally:
                timer.cancel()
            self.executed += 1
            result = normalise(rows)
            self._memo[query] = result
            return result

    def result_hash(self, query: Query, *, ordered: bool) -> str:
        """:func:`result_hash` of ``query``'s rows, computed once per (query, ordered)."""
        key = (query, ordered)
        digest = self._hashes.get(key)
        if digest is None:
            digest = self._hashes[key] = result_hash(self.run(query), ordered=ordered)
        return digest

    def same_result(self, pred: Query, gold: Query, *, ordered: bool) -> bool:
        """:func:`rows_equal` of two queries' rows, computed once per (pred, gold, ordered)."""
        key = (pred, gold, ordered)
        same = self._equal.get(key)
        if same is None:
            same = self._equal[key] = rows_equal(self.run(pred), self.run(gold), ordered=ordered)
        return same
