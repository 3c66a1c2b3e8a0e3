"""Result equivalence of a model's SQL and the gold's, as Spider 2.0 and defog's sql-eval judge it.

An answer is right when it returns the gold's rows: a multiset unless the gold orders (then in order,
except rows tying on every gold ORDER BY column). Column names and order never count: some
permutation must match. *Strict* wants exactly the gold's columns; *lenient* also accepts extra ones.
Cells are normalised: numbers within a relative tolerance (ints exactly), a DATE equals a TIMESTAMP
at midnight, lists and structs element by element. Permutations are searched only among columns
whose value multisets match, and stop after :data:`MAX_PERMUTATIONS` (``capped`` says so)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ABS_TOL", "MAX_PERMUTATIONS", "REL_TOL", "Equivalence", "cells_close", "compare", "normalise_cell",
           "normalise_rows"]

REL_TOL = 1e-6
ABS_TOL = 1e-9
MAX_PERMUTATIONS = 5000
WRONG_COLUMNS, WRONG_ROWS, WRONG_ORDER = "wrong_columns", "wrong_rows", "wrong_order"
_MIDNIGHT = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ]00:00:00(?:\.0+)?$")
_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2}(?:\.\d+)?)$")
Row = tuple[Any, ...]


@dataclass(frozen=True)
class Equivalence:
    """``strict``: the same columns (any order, any names) and rows; ``lenient``: extra columns
    allowed; ``error``: why not strict (wrong_columns, wrong_rows, wrong_order), None when strict;
    ``mapping``: the answer's column for each gold column, from the match found (lenient's when only
    lenient holds); ``capped``: the permutation search stopped at its cap."""

    strict: bool
    lenient: bool
    error: str | None
    mapping: tuple[int, ...] | None = None
    capped: bool = False


def normalise_cell(v: object) -> object:
    """One comparable, hashable value: numbers as int or float (9 significant digits, like the
    harness's executor), dates as ISO text (a midnight TIMESTAMP as its DATE), nested values as tuples."""
    if v is None:
        return v
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, (float, decimal.Decimal)):
        f = float(v)
        if math.isnan(f) or math.isinf(f):
            return f
        g = float(f"{f:.9g}")
        return int(g) if isinstance(v, decimal.Decimal) and v == v.to_integral_value() and abs(g) < 2**53 else g
    if isinstance(v, dt.datetime):
        if v.tzinfo is None and v.time() == dt.time(0):
            return v.date().isoformat()
        return v.isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, str):
        m = _MIDNIGHT.match(v)
        if m:
            return m.group(1)
        m = _STAMP.match(v)
        return f"{m.group(1)}T{m.group(2)}" if m else v
    if isinstance(v, (dt.time, dt.timedelta, uuid.UUID)):
        return v.isoformat() if isinstance(v, dt.time) else str(v)
    if isinstance(v, (list, tuple)):
        return tuple(normalise_cell(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted(((str(k), normalise_cell(x)) for k, x in v.items()), key=repr))
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return str(v)


def normalise_rows(rows: Sequence[Sequence[Any]]) -> list[Row]:
    return [tuple(normalise_cell(v) for v in r) for r in rows]


def cells_close(a: Any, b: Any, *, rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL) -> bool:
    """Equality of two normalised cells: numbers within tolerance (two ints exactly), NaN = NaN."""
    if a == b:
        return True
    na, nb = isinstance(a, (int, float)), isinstance(b, (int, float))
    if na and nb:
        if isinstance(a, int) and isinstance(b, int):
            return False
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return math.isclose(fa, fb, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return all(cells_close(x, y, rel_tol=rel_tol, abs_tol=abs_tol) for x, y in zip(a, b, strict=True))
    return False


def _sort_key(v: Any) -> tuple[int, Any]:
    if v is None:
        return (0, 0)
    if isinstance(v, (int, float)):
        return (1, -math.inf if math.isnan(v) else v)
    if isinstance(v, str):
        return (2, v)
    return (3, repr(v))


def _rows_close(a: Sequence[Row], b: Sequence[Row], tol: tuple[float, float]) -> bool:
    rel, abs_ = tol
    return all(len(x) == len(y) and all(cells_close(p, q, rel_tol=rel, abs_tol=abs_) for p, q in zip(x, y, strict=True))
               for x, y in zip(a, b, strict=True))


def _multiset_equal(a: Sequence[Row], b: Sequence[Row], tol: tuple[float, float]) -> bool:
    """Rows as multisets: exact counts first (the usual case), else sorted and compared within tolerance."""
    if len(a) != len(b):
        return False
    if Counter(a) == Counter(b):
        return True
    def key(r: Row) -> tuple[tuple[int, Any], ...]:
        return tuple(_sort_key(v) for v in r)
    return _rows_close(sorted(a, key=key), sorted(b, key=key), tol)


def _column_multiset_equal(a: Sequence[Any], b: Sequence[Any], tol: tuple[float, float]) -> bool:
    return _multiset_equal([(v,) for v in a], [(v,) for v in b], tol)


def _tie_groups(gold: Sequence[Row], tie_keys: Sequence[int], tol: tuple[float, float]) -> list[tuple[int, int]]:
    """Runs of consecutive gold rows equal on every tie key (each row alone when there are none)."""
    if not tie_keys:
        return [(i, i + 1) for i in range(len(gold))]
    groups: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(gold) + 1):
        if i == len(gold) or not _rows_close([tuple(gold[i][k] for k in tie_keys)],
                                             [tuple(gold[start][k] for k in tie_keys)], tol):
            groups.append((start, i))
            start = i
    return groups


def compare(pred: Sequence[Sequence[Any]], gold: Sequence[Sequence[Any]], *, ordered: bool,
            tie_keys: Sequence[int] = (), pred_width: int | None = None, gold_width: int | None = None,
            rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL,
            max_permutations: int = MAX_PERMUTATIONS) -> Equivalence:
    """Whether ``pred``'s rows are ``gold``'s, strictly and leniently (see the module's rules).

    ``tie_keys``: gold column indexes of the gold's ORDER BY (rows tied on all of them may come in
    any order); widths are needed only when a side has no rows."""
    tol = (rel_tol, abs_tol)
    p_rows, g_rows = normalise_rows(pred), normalise_rows(gold)
    pw = pred_width if pred_width is not None else (len(p_rows[0]) if p_rows else 0)
    gw = gold_width if gold_width is not None else (len(g_rows[0]) if g_rows else 0)
    width_error = WRONG_COLUMNS if pw != gw else None
    if pw < gw or len(p_rows) != len(g_rows):
        return Equivalence(False, False, width_error or WRONG_ROWS)
    if gw == 0:  # no gold columns (a degenerate gold): equal when both have the same number of rows
        return Equivalence(pw == 0, True, width_error)
    p_cols = [tuple(r[i] for r in p_rows) for i in range(pw)]
    g_cols = [tuple(r[j] for r in g_rows) for j in range(gw)]
    # Identical answer columns are interchangeable: one class each, with a count.
    classes: dict[tuple[Any, ...], list[int]] = {}
    for i, col in enumerate(p_cols):
        classes.setdefault(col, []).append(i)
    reps = list(classes.values())
    candidates = [[k for k, members in enumerate(reps) if _column_multiset_equal(p_cols[members[0]], g_cols[j], tol)]
                  for j in range(gw)]
    if any(not c for c in candidates):
        return Equivalence(False, False, width_error or WRONG_ROWS)
    groups = _tie_groups(g_rows, tie_keys, tol) if ordered else []
    order = sorted(range(gw), key=lambda j: len(candidates[j]))
    used = [0] * len(reps)
    assign: dict[int, int] = {}
    tried = 0
    multiset_match: tuple[int, ...] | None = None

    def rows_match(mapping: tuple[int, ...]) -> tuple[bool, bool]:
        proj = [tuple(r[i] for i in mapping) for r in p_rows]
        if not _multiset_equal(proj, g_rows, tol):
            return False, False
        if not ordered:
            return True, True
        return True, all(_multiset_equal(proj[s:e], g_rows[s:e], tol) for s, e in groups)

    def search(depth: int) -> tuple[int, ...] | None:
        nonlocal tried, multiset_match
        if tried >= max_permutations:
            return None
        if depth == gw:
            tried += 1
            mapping = tuple(reps[assign[j]][_slot(assign, j)] for j in range(gw))
            as_set, in_order = rows_match(mapping)
            if as_set and multiset_match is None:
                multiset_match = mapping
            return mapping if in_order else None
        j = order[depth]
        for k in candidates[j]:
            if used[k] < len(reps[k]):
                used[k] += 1
                assign[j] = k
                found = search(depth + 1)
                used[k] -= 1
                del assign[j]
                if found is not None:
                    return found
        return None

    def _slot(a: dict[int, int], j: int) -> int:
        """Which member of its class gold column ``j`` takes: the n-th use of the class, in gold order."""
        return sum(1 for jj in range(j) if a[jj] == a[j])

    found = search(0)
    capped = tried >= max_permutations
    if found is not None:
        strict = pw == gw
        return Equivalence(strict, True, None if strict else width_error, found, capped)
    if width_error:
        return Equivalence(False, False, width_error, multiset_match, capped)
    return Equivalence(False, False, WRONG_ORDER if multiset_match is not None else WRONG_ROWS, multiset_match, capped)
