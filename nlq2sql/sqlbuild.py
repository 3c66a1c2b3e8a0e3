"""Canonical intent → one canonical SQL text plus bound parameters.

Every identifier comes from the allow-lists below; filter values are only ever bound
parameters.  The model never writes SQL, and nothing it says is spliced into SQL text.
Row order is fully determined: ranked queries break metric ties by the dimension value
ascending, so top-N cut-offs are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from .errors import SqlBuildError
from .intent import Intent

FACT = "order_lines AS f"

#: metric → SQL expression over the fact table (the one written definition of each).
METRICS: dict[str, str] = {
    "revenue": "SUM(f.quantity * f.unit_price * (1 - f.discount))",
    "orders": "COUNT(DISTINCT f.order_id)",
    "units": "SUM(f.quantity)",
    "avg_order_value": "SUM(f.quantity * f.unit_price * (1 - f.discount)) / COUNT(DISTINCT f.order_id)",
    "customers": "COUNT(DISTINCT f.customer_id)",
}

#: field → (column expression, join alias it needs)
COLUMNS: dict[str, tuple[str, str | None]] = {
    "region": ("c.region", "c"),
    "segment": ("c.segment", "c"),
    "category": ("p.category", "p"),
    "product": ("p.product_name", "p"),
    "channel": ("ch.channel_name", "ch"),
    "year": ("CAST(YEAR(f.order_date) AS VARCHAR)", None),
}

JOINS: dict[str, str] = {
    "c": "JOIN customers AS c ON c.customer_id = f.customer_id",
    "p": "JOIN products AS p ON p.product_id = f.product_id",
    "ch": "JOIN channels AS ch ON ch.channel_id = f.channel_id",
}

GRAINS: dict[str, str] = {
    "month": "DATE_TRUNC('month', f.order_date)",
    "quarter": "DATE_TRUNC('quarter', f.order_date)",
    "year": "DATE_TRUNC('year', f.order_date)",
}

OPS: dict[str, str] = {"eq": "=", "neq": "<>"}


@dataclass(frozen=True)
class Query:
    """SQL text with positional ``?`` parameters; the pair is the cache key."""

    sql: str
    params: tuple[str, ...]


def _lookup(table: dict[str, str], key: str | None, what: str) -> str:
    if key is None or key not in table:
        raise SqlBuildError(f"{what} {key!r} is not allow-listed")
    return table[key]


class _Filter(NamedTuple):
    field: str
    op: str
    value: str


class _Shape(NamedTuple):
    """The fields SQL depends on, as plain tuples (cheap to hash and compare): the cache key."""

    intent: str
    metric: str
    dimension: str | None
    time_grain: str | None
    filters: tuple[_Filter, ...]
    limit: int | None
    order: str | None


#: Distinct intents whose SQL is remembered (bounded).
BUILD_CACHE_SIZE = 4096


def build_sql(intent: Intent) -> Query:
    """Build SQL for a *canonical* intent (see :func:`nlq2sql.intent.canonicalise`).

    Results are cached by the intent's fields: a Query is immutable, so equal intents share it.
    """
    shape = _Shape(intent.intent, intent.metric, intent.dimension, intent.time_grain,
                   tuple(_Filter(f.field, f.op, f.value) for f in intent.filters), intent.limit, intent.order)
    try:
        return _build_cached(shape)
    except TypeError:  # an unhashable field: only possible for an unvalidated (constructed) intent
        return _build(shape)


def _build(intent: _Shape) -> Query:
    metric = _lookup(METRICS, intent.metric, "metric")
    select: list[str] = []
    group: list[str] = []
    order: list[str] = []
    aliases: set[str] = set()

    if intent.intent == "time_series":
        grain = _lookup(GRAINS, intent.time_grain, "time_grain")
        select.append(f"{grain} AS period")
        group.append(grain)
        order.append("period ASC")
    if intent.dimension is not None:
        col, alias = COLUMNS.get(intent.dimension, (None, None))
        if col is None:
            raise SqlBuildError(f"dimension {intent.dimension!r} is not allow-listed")
        if alias:
            aliases.add(alias)
        select.append(f"{col} AS {intent.dimension}")
        group.append(col)
    elif intent.intent != "time_series":
        raise SqlBuildError(f"{intent.intent} needs a dimension")
    select.append(f"{metric} AS {intent.metric}")

    where: list[str] = []
    params: list[str] = []
    for flt in intent.filters:
        col, alias = COLUMNS.get(flt.field, (None, None))
        if col is None:
            raise SqlBuildError(f"filter field {flt.field!r} is not allow-listed")
        if alias:
            aliases.add(alias)
        where.append(f"{col} {_lookup(OPS, flt.op, 'op')} ?")
        params.append(flt.value)

    if intent.intent == "time_series":
        if intent.dimension is not None:
            order.append(f"{intent.dimension} ASC")
    elif intent.intent == "top_n_by_metric" or intent.order is not None:
        direction = "ASC" if intent.order == "asc" else "DESC"
        order = [f"{intent.metric} {direction}", f"{intent.dimension} ASC"]
    else:
        order = [f"{intent.dimension} ASC"]

    lines = ["SELECT " + ", ".join(select), f"FROM {FACT}"]
    lines += [JOINS[a] for a in ("c", "p", "ch") if a in aliases]
    if where:
        lines.append("WHERE " + " AND ".join(where))
    lines.append("GROUP BY " + ", ".join(group))
    lines.append("ORDER BY " + ", ".join(order))
    if intent.limit is not None:
        lines.append(f"LIMIT {int(intent.limit)}")
    return Query(sql="\n".join(lines), params=tuple(params))


_build_cached = lru_cache(maxsize=BUILD_CACHE_SIZE)(_build)
