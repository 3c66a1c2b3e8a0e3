"""Hypothesis strategies over the intent contract (every enum, hostile filter values).

Strategies are built once at import (not inside ``@composite`` bodies): the 10 000-example
security fuzz spends its time on examples, not on re-validating strategies.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import get_args

from hypothesis import strategies as st

from nlq2sql.semantic import default_catalog
from nlq2sql.semantic.warehouse import builder
from nlq2sql.stages.intent import (
    Filter,
    Intent,
    IntentKind,
    Op,
    Order,
    TimeGrain,
)

#: The default (retail) warehouse's vocabulary, from its semantic model, and its data's values.
VOCAB = default_catalog().vocabulary
VALUES = builder("retail").VALUES
KINDS: tuple[str, ...] = get_args(IntentKind)
METRICS: tuple[str, ...] = VOCAB.metrics
DIMENSIONS: tuple[str, ...] = VOCAB.dimensions
GRAINS: tuple[str, ...] = get_args(TimeGrain)
FILTER_FIELDS: tuple[str, ...] = VOCAB.filter_fields
OPS: tuple[str, ...] = get_args(Op)
ORDERS: tuple[str, ...] = get_args(Order)

HOSTILE = (
    "'; DROP TABLE x; --", "'", "''", '"', ";", "--", "/* */", "\\", "?", "$1", "%s",
    "North' OR '1'='1", "x'); DELETE FROM order_lines; --", "Robert'); DROP TABLE customers;--",
    "2024 OR 1=1", "\x00", "\n", " North ", "ünïcødé ✓", "SELECT", "LIMIT 1", "a" * 64,
)
KNOWN = tuple(v for vals in VALUES.values() for v in vals)

filter_values = st.one_of(st.sampled_from(HOSTILE), st.sampled_from(KNOWN), st.text(max_size=64))

_metric = st.sampled_from(METRICS)
_dimension = st.sampled_from(DIMENSIONS)
_grain = st.sampled_from(GRAINS)
_limit = st.none() | st.integers(1, 100)
_order = st.none() | st.sampled_from(ORDERS)


def filter_lists(values: st.SearchStrategy[str] = filter_values) -> st.SearchStrategy[list[Filter]]:
    one = st.builds(Filter, field=st.sampled_from(FILTER_FIELDS), op=st.sampled_from(OPS), value=values)
    return st.lists(one, max_size=3)


def consistent_intents(values: st.SearchStrategy[str] = filter_values) -> st.SearchStrategy[Intent]:
    """Schema-valid intents over every enum that pass ``consistency_problem``."""
    flts = filter_lists(values)
    ranked = st.builds(Intent, intent=st.sampled_from(("breakdown", "top_n_by_metric")), metric=_metric,
                       dimension=_dimension, time_grain=st.none(), filters=flts, limit=_limit,
                       order=_order)
    series = st.builds(Intent, intent=st.just("time_series"), metric=_metric,
                       dimension=st.none() | _dimension, time_grain=_grain, filters=flts,
                       limit=_limit, order=_order)
    return ranked | series


#: Any schema-valid intent, consistent or not (what a model may emit).
any_intents = st.builds(
    Intent, intent=st.sampled_from(KINDS), metric=_metric, dimension=st.none() | _dimension,
    time_grain=st.none() | _grain, filters=filter_lists(), limit=_limit, order=_order)


def _decode(seed: int, flts: list[tuple[int, str]]) -> Intent:
    """One integer picks every enum field: a cheap draw for the 10 000-example fuzz."""
    kind, seed = KINDS[seed % len(KINDS)], seed // len(KINDS)
    metric, seed = METRICS[seed % len(METRICS)], seed // len(METRICS)
    dim_i, seed = seed % (len(DIMENSIONS) + 1), seed // (len(DIMENSIONS) + 1)
    grain, seed = GRAINS[seed % len(GRAINS)], seed // len(GRAINS)
    limit_i, seed = seed % 102, seed // 102
    order_i = seed % (len(ORDERS) + 1)
    dimension = DIMENSIONS[dim_i] if dim_i < len(DIMENSIONS) else None
    if kind != "time_series":
        dimension = dimension or DIMENSIONS[seed % len(DIMENSIONS)]
    return Intent.model_validate({
        "intent": kind, "metric": metric, "dimension": dimension,
        "time_grain": grain if kind == "time_series" else None,
        "filters": [{"field": FILTER_FIELDS[i % len(FILTER_FIELDS)],
                     "op": OPS[(i // len(FILTER_FIELDS)) % len(OPS)], "value": v} for i, v in flts],
        "limit": limit_i if 1 <= limit_i <= 100 else None,
        "order": ORDERS[order_i] if order_i < len(ORDERS) else None})


#: Same space as :func:`consistent_intents`, drawn with far fewer choices per example.
fast_consistent_intents = st.builds(
    _decode, st.integers(0, 2**40),
    st.lists(st.tuples(st.integers(0, len(FILTER_FIELDS) * len(OPS) - 1), filter_values), max_size=3))


# -- hostile JSON lines, for the readers of a user's files ---------------------------------
#
# A line of an eval set, a responses file, a question file or an intent, made hostile from a
# valid one: nested far past any reader's bound, a field given a value JSON allows but the
# harness does not expect (NaN, a 5,000-digit integer, a lone surrogate, a NUL), cut short, or
# with a byte that is not UTF-8 (or a BOM, a NUL, a lone CR) put in anywhere.

#: Nesting depths around the readers' bound (64) and past Python's recursion limit (~1,000).
DEPTHS = (1, 63, 64, 65, 200, 1000, 5000)
#: JSON (or near-JSON) tokens put in place of a field's value, as raw text.
RAW_VALUES = (
    "NaN", "Infinity", "-Infinity", "1" * 5000, "-" + "9" * 4301, "1e999", "-1e-999", "0.1e1000000",
    '"\\ud800"', '"\\udfff\\ud800"', '"\\u0000"', '""', '" "', "null", "true", "[]", "{}", "[[]]",
    '{"": {}}', '"' + "x" * 5000 + '"', "1" + "0" * 30, "-0", "1.5", '"ho-001"', '["ho-001"]',
)
#: Bytes put into a line: not UTF-8, a BOM mid-file, a NUL, line-end oddities, an overlong
#: encoding and an encoded surrogate (both invalid UTF-8).
RAW_BYTES = (b"\xff", b"\xe9", b"\xef\xbb\xbf", b"\x00", b"\r", b"\xc0\x80", b"\xed\xa0\x80", b"\x85",
             b"\xe2\x80\xa8")


def _deep(text: str, depth: int, kind: str) -> str:
    return ("[" * depth + text + "]" * depth) if kind == "array" else ('{"a":' * depth + text + "}" * depth)


def _paths(obj: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Key paths of a JSON object, two levels down (``gold.metric``)."""
    out: list[tuple[str, ...]] = []
    if isinstance(obj, dict) and len(prefix) < 2:
        for k, v in obj.items():
            out.append((*prefix, k))
            out += _paths(v, (*prefix, k))
    return out


_HOLE = "\x00hole\x00"


def _with_raw(line: str, pick: int, raw: str) -> str:
    """``line`` (a JSON object) with the value at one of its key paths replaced by ``raw`` text."""
    obj = json.loads(line)
    paths = _paths(obj)
    if not paths:
        return raw
    *parents, key = paths[pick % len(paths)]
    target = obj
    for k in parents:
        target = target[k]
    target[key] = _HOLE
    return json.dumps(obj).replace(json.dumps(_HOLE), raw, 1)


def hostile_lines(valid: Sequence[str]) -> st.SearchStrategy[bytes]:
    """One line (bytes, no line end) made from one of the ``valid`` JSON lines."""
    base = st.sampled_from(valid)
    value = st.sampled_from(RAW_VALUES) | st.tuples(st.sampled_from(DEPTHS), st.sampled_from(("array", "object"))) \
        .map(lambda t: _deep("1", *t))
    return st.one_of(
        base.map(str.encode),
        st.tuples(base, st.sampled_from(DEPTHS), st.sampled_from(("array", "object")))
        .map(lambda t: _deep(*t).encode()),
        st.tuples(base, st.integers(0, 50), value).map(lambda t: _with_raw(*t).encode("utf-8", "surrogatepass")),
        st.tuples(base, st.integers(0, 400)).map(lambda t: t[0][: t[1]].encode()),
        st.tuples(base, st.integers(0, 400), st.sampled_from(RAW_BYTES))
        .map(lambda t: t[0].encode()[: t[1]] + t[2] + t[0].encode()[t[1]:]),
    )


def hostile_files(valid: Sequence[str]) -> st.SearchStrategy[bytes]:
    """A JSONL file: a few valid or hostile lines, with or without a final line end."""
    return st.tuples(st.lists(st.one_of(st.sampled_from(valid).map(str.encode), hostile_lines(valid)),
                              max_size=3), st.booleans()) \
        .map(lambda t: b"\n".join(t[0]) + (b"\n" if t[1] and t[0] else b""))
