"""Hypothesis strategies over the intent contract (every enum, hostile filter values).

Strategies are built once at import (not inside ``@composite`` bodies): the 10 000-example
security fuzz spends its time on examples, not on re-validating strategies.
"""

from __future__ import annotations

from typing import get_args

from hypothesis import strategies as st

from nlq2sql.intent import (
    Filter,
    Intent,
    IntentKind,
    Op,
    Order,
    TimeGrain,
)
from nlq2sql.semantic import default_catalog
from nlq2sql.warehouse import builder

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
