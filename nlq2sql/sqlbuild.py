"""Canonical intent → one canonical SQL text plus bound parameters, from a semantic model.

Every identifier and expression comes from the warehouse's semantic model (the catalog,
:mod:`nlq2sql.semantic`); filter values are only ever bound parameters.  The model never
writes SQL, and nothing it says is spliced into SQL text.  Each semantic model is read
through its own sub-query (its expressions bind to its own table, as in MetricFlow), and a
dimension of another model joins on the one entity that links them, as a LEFT OUTER JOIN:
fact rows with no match form a NULL group instead of vanishing.  Row order is fully
determined: ranked queries break metric ties by the dimension value ascending, so top-N
cut-offs are deterministic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import duckdb

from .errors import SqlBuildError
from .intent import Intent
from .semantic.catalog import FACT_ALIAS, Catalog, default_catalog

GRAINS = ("month", "quarter", "year")
OPS: dict[str, str] = {"eq": "=", "neq": "<>"}
_PLAIN = re.compile(r"^[a-z_][a-z0-9_]*$")


@lru_cache(maxsize=1)
def _keywords() -> frozenset[str]:
    con = duckdb.connect()
    try:
        return frozenset(r[0] for r in con.execute("SELECT keyword_name FROM duckdb_keywords()").fetchall())
    finally:
        con.close()


def quote(name: str) -> str:
    """An identifier from the semantic model, quoted only when it must be (keyword, case)."""
    if _PLAIN.match(name) and name not in _keywords():
        return name
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Query:
    """SQL text with positional ``?`` parameters; the pair is the cache key."""

    sql: str
    params: tuple[str, ...]


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


def build_sql(intent: Intent, catalog: Catalog | None = None) -> Query:
    """Build SQL for a *canonical* intent (see :func:`nlq2sql.intent.canonicalise`).

    Results are cached by (catalog, intent fields): a Query is immutable, so equal intents share it.
    """
    shape = _Shape(intent.intent, intent.metric, intent.dimension, intent.time_grain,
                   tuple(_Filter(f.field, f.op, f.value) for f in intent.filters), intent.limit, intent.order)
    cat = catalog or default_catalog()
    try:
        return _build_cached(cat, shape)
    except TypeError:  # an unhashable field: only possible for an unvalidated (constructed) intent
        return _build(cat, shape)


class _From:
    """The FROM clause being assembled: the metric's model as ``f`` plus joined models."""

    def __init__(self, cat: Catalog, fact: str) -> None:
        self.cat, self.fact = cat, fact
        self.fact_cols: dict[str, str] = {}  # projected name → SQL over the fact table
        self.joined: dict[str, dict[str, str]] = {}  # model → projected name → SQL

    def column(self, dimension: str) -> str:
        """The qualified column of a categorical dimension, joining its model when needed."""
        d = self.cat.dimensions.get(dimension)
        if d is None:
            raise SqlBuildError(f"dimension {dimension!r} is not in semantic model {self.cat.name!r}")
        if d.model == self.fact:
            self.fact_cols[d.name] = d.expr
            return f"{FACT_ALIAS}.{quote(d.name)}"
        join = self.cat.joins.get((self.fact, d.model))
        if join is None:
            raise SqlBuildError(f"dimension {dimension!r} is not reachable from {self.fact!r}")
        self.fact_cols[join.entity] = join.fact_expr
        cols = self.joined.setdefault(d.model, {})
        cols[join.entity] = join.dim_expr
        cols[d.name] = d.expr
        return f"{quote(d.model)}.{quote(d.name)}"

    def lines(self) -> list[str]:
        def sub(table: str, cols: dict[str, str]) -> str:
            body = ", ".join(f"{expr} AS {quote(name)}" for name, expr in cols.items())
            return f"(SELECT {body} FROM {quote(table)})"

        out = [f"FROM {sub(self.cat.tables[self.fact], self.fact_cols)} AS {FACT_ALIAS}"]
        for model, cols in self.joined.items():
            join = self.cat.joins[(self.fact, model)]
            ent = quote(join.entity)
            out.append(f"LEFT JOIN {sub(self.cat.tables[model], cols)} AS {quote(model)} "
                       f"ON {quote(model)}.{ent} = {FACT_ALIAS}.{ent}")
        return out


def _build(cat: Catalog, intent: _Shape) -> Query:
    metric = cat.metrics.get(intent.metric)
    if metric is None:
        raise SqlBuildError(f"metric {intent.metric!r} is not in semantic model {cat.name!r}")
    src = _From(cat, metric.model)
    src.fact_cols.update(dict(metric.measures))
    time_name, time_expr = metric.time
    time_col = f"{FACT_ALIAS}.{quote(time_name)}"
    select: list[str] = []
    group: list[str] = []
    order: list[str] = []

    if intent.intent == "time_series":
        if intent.time_grain not in GRAINS:
            raise SqlBuildError(f"time_grain {intent.time_grain!r} is not allow-listed")
        src.fact_cols[time_name] = time_expr
        grain = f"DATE_TRUNC('{intent.time_grain}', {time_col})"
        select.append(f"{grain} AS period")
        group.append(grain)
        order.append("period ASC")
    dim_alias = quote(intent.dimension) if intent.dimension is not None else None
    if intent.dimension is not None:
        col = src.column(intent.dimension)
        select.append(f"{col} AS {dim_alias}")
        group.append(col)
    elif intent.intent != "time_series":
        raise SqlBuildError(f"{intent.intent} needs a dimension")
    metric_alias = quote(intent.metric)
    select.append(f"{metric.sql} AS {metric_alias}")

    where: list[str] = []
    params: list[str] = []
    for flt in intent.filters:
        if flt.op not in OPS:
            raise SqlBuildError(f"op {flt.op!r} is not allow-listed")
        if flt.field == "year":
            src.fact_cols[time_name] = time_expr
            col = f"CAST(YEAR({time_col}) AS VARCHAR)"
        else:
            col = src.column(flt.field)
        where.append(f"{col} {OPS[flt.op]} ?")
        params.append(flt.value)

    if intent.intent == "time_series":
        if dim_alias is not None:
            order.append(f"{dim_alias} ASC")
    elif intent.intent == "top_n_by_metric" or intent.order is not None:
        direction = "ASC" if intent.order == "asc" else "DESC"
        order = [f"{metric_alias} {direction}", f"{dim_alias} ASC"]
    else:
        order = [f"{dim_alias} ASC"]

    lines = ["SELECT " + ", ".join(select), *src.lines()]
    if where:
        lines.append("WHERE " + " AND ".join(where))
    lines.append("GROUP BY " + ", ".join(group))
    lines.append("ORDER BY " + ", ".join(order))
    if intent.limit is not None:
        lines.append(f"LIMIT {int(intent.limit)}")
    return Query(sql="\n".join(lines), params=tuple(params))


_build_cached = lru_cache(maxsize=BUILD_CACHE_SIZE)(_build)
