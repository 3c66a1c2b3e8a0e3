"""Canonical intent → MetricFlow's SQL plus bound parameters.

An intent is restated as a :class:`~nlq2sql.semantic.query.MetricQuery` and MetricFlow compiles it,
its row order explicit: ranked questions break metric ties by the dimension ascending, so top-N
cut-offs are deterministic. Filter values are only ever bound parameters."""

from __future__ import annotations

from pydantic import ValidationError

from nlq2sql.errors import SqlBuildError
from nlq2sql.semantic.catalog import YEAR_FIELD, Catalog
from nlq2sql.semantic.engine import Query
from nlq2sql.semantic.query import MetricQuery, OrderBy, Where
from nlq2sql.stages.intent import Intent

__all__ = ["GRAINS", "Query", "build_sql", "to_query"]

GRAINS = ("month", "quarter", "year")
OPS = ("eq", "neq")
_NO_DAY = ("9999-12-31", "0001-01-01")  # BETWEEN a later and an earlier day: no row


def _group_by(cat: Catalog, dimension: str) -> str:
    d = cat.dimensions.get(dimension)
    if d is None:
        raise SqlBuildError(f"dimension {dimension!r} is not in semantic model {cat.name!r}")
    return d.group_by


def to_query(intent: Intent, catalog: Catalog) -> MetricQuery:
    """The MetricFlow query a v1 intent means (order made explicit, the year as a date range)."""
    if intent.metric not in catalog.metrics:
        raise SqlBuildError(f"metric {intent.metric!r} is not in semantic model {catalog.name!r}")
    group_by: list[str] = []
    order: list[OrderBy] = []
    if intent.intent == "time_series":
        if intent.time_grain not in GRAINS:
            raise SqlBuildError(f"time_grain {intent.time_grain!r} is not allow-listed")
        group_by.append(f"metric_time__{intent.time_grain}")
        order.append(OrderBy(field=group_by[0]))
    elif intent.dimension is None:
        raise SqlBuildError(f"{intent.intent} needs a dimension")
    dim = _group_by(catalog, intent.dimension) if intent.dimension is not None else None
    if dim is not None:
        group_by.append(dim)
    where: list[Where] = []
    for flt in intent.filters:
        if flt.op not in OPS:
            raise SqlBuildError(f"op {flt.op!r} is not allow-listed")
        if flt.field == YEAR_FIELD:
            # A value that is no year matches no row (as a year compared as text did): an empty range.
            year = flt.value.isascii() and flt.value.isdigit() and len(flt.value) == 4
            span = (f"{flt.value}-01-01", f"{flt.value}-12-31") if year else _NO_DAY
            if flt.op == "eq":
                where.append(Where(field="metric_time__day", op="between", values=span))
            else:
                where.append(Where(field="metric_time__day", op="not_in", values=span) if not year else
                             Where(field="metric_time__year", op="neq", values=(span[0],)))
        else:
            where.append(Where(field=_group_by(catalog, flt.field), op=flt.op, values=(flt.value,)))
    if intent.intent == "time_series":
        if dim is not None:
            order.append(OrderBy(field=dim))
    elif intent.intent == "top_n_by_metric" or intent.order is not None:
        assert dim is not None
        order = [OrderBy(field=intent.metric, descending=intent.order != "asc"), OrderBy(field=dim)]
    else:
        assert dim is not None
        order = [OrderBy(field=dim)]
    return MetricQuery(metrics=(intent.metric,), group_by=tuple(group_by), where=tuple(where) or None,
                       order_by=tuple(order), limit=intent.limit)


#: Distinct intents whose Query is remembered (bounded); MetricFlow compiles are cached per shape too.
BUILD_CACHE_SIZE = 4096
_CACHE: dict[tuple[Catalog, str], Query] = {}


def build_sql(intent: Intent, catalog: Catalog) -> Query:
    """SQL for a *canonical* intent (see :func:`nlq2sql.stages.intent.canonicalise`), compiled by MetricFlow.

    Results are cached by (catalog, intent text): a Query is immutable, so equal intents share it.
    """
    cat = catalog
    key = (cat, intent.key())
    hit = _CACHE.get(key)
    if hit is None:
        try:
            query = to_query(intent, cat)
        except ValidationError as exc:  # only possible for an unvalidated (constructed) intent
            raise SqlBuildError(f"not a valid intent: {exc.errors()[0]['msg']}") from None
        hit = cat.engine.compile(query)
        if len(_CACHE) >= BUILD_CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = hit
    return hit
