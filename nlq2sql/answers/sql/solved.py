"""Solved SQL for the SQL arms' retrieved examples: a bank item's gold as a short, clean SELECT.

MetricFlow's SQL is long (eight do not fit a 4,096-token context beside the schema) and in a style
the ``sql-grammar`` arm cannot write, so golds are written in the grammar's style (:mod:`.grammar`).
Each is *checked by executing it* (the gold's rows, strict); otherwise, and for what this does not
cover (derived and cumulative metrics, metric filters, multi-hop joins, listings), MetricFlow's SQL
with parameters inlined is used."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from nlq2sql.answers.sql.equivalence import compare
from nlq2sql.errors import ExecutionError
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.engine import Query
from nlq2sql.semantic.query import METRIC_TIME, MetricQuery, Value, Where
from nlq2sql.semantic.schema_text import describe_tables
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.pipeline import make_executor

if TYPE_CHECKING:
    from collections.abc import Sequence

    from metricflow_semantic_interfaces.implementations.elements.measure import PydanticMeasure
    from metricflow_semantic_interfaces.implementations.semantic_model import PydanticSemanticModel

    from nlq2sql.stages.queryset import QueryCase

__all__ = ["SolvedSql", "Unsupported", "clean_sql", "inline_params", "solve", "solved_texts"]

_OPS = {"eq": "=", "neq": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


class Unsupported(ValueError):
    """A gold this writer does not cover (the example falls back to MetricFlow's SQL)."""


@dataclass(frozen=True)
class SolvedSql:
    sql: str
    style: str  # "clean" (written here, checked by execution) | "metricflow" (compiled, inlined)


def inline_params(sql: str, params: Sequence[object]) -> str:
    """MetricFlow's SQL with its ``$N`` parameters written as literals: one standalone statement."""
    def lit(m: re.Match[str]) -> str:
        v = params[int(m.group(1)) - 1]
        if isinstance(v, int | float) and not isinstance(v, bool):
            return str(v)
        return "'" + str(v).replace("'", "''") + "'"
    return re.sub(r"\$(\d+)", lit, sql)


def _v(x: object) -> str:
    return str(getattr(x, "value", x)).lower()


class _Model:
    """One semantic model as this writer needs it: table, entities, dimensions, measures."""

    def __init__(self, sm: PydanticSemanticModel) -> None:
        self.table: str = sm.node_relation.alias
        self.entities = {e.name: (_v(e.type), e.expr or e.name) for e in sm.entities}
        self.dims = {d.name: (d.expr or d.name, _v(d.type)) for d in sm.dimensions}
        self.measures = {m.name: m for m in sm.measures}
        self.default_time = getattr(getattr(sm, "defaults", None), "agg_time_dimension", None)

    def qualify(self, expr: str) -> str:
        """``expr`` with every column written ``table.column`` (the grammar's only column form)."""
        tree = sqlglot.parse_one(expr, read="duckdb")
        for col in tree.find_all(exp.Column):
            col.set("table", exp.to_identifier(self.table))
        return tree.sql(dialect="duckdb")

    def primary(self) -> set[str]:
        return {n for n, (kind, _) in self.entities.items() if kind in ("primary", "unique", "natural")}


class _Writer:
    def __init__(self, catalog: Catalog, warehouse: Warehouse) -> None:
        self.models = [_Model(sm) for sm in catalog.manifest.semantic_models]
        self.metrics = {m.name: m for m in catalog.manifest.metrics}
        self.types = {(t.name, c.name.lower()): c.type.upper() for t in describe_tables(catalog, warehouse)
                      for c in t.columns}

    def _measure(self, name: str) -> tuple[_Model, PydanticMeasure]:
        for mo in self.models:
            if name in mo.measures:
                return mo, mo.measures[name]
        raise Unsupported(f"measure {name}")

    def _agg(self, mo: _Model, m: PydanticMeasure) -> str:
        agg, expr = _v(m.agg), mo.qualify(m.expr or m.name)
        if agg == "count_distinct":
            return f"COUNT(DISTINCT {expr})"
        if agg == "sum_boolean":
            return f"SUM(CASE WHEN {expr} THEN 1 ELSE 0 END)"
        if agg in ("sum", "min", "max", "count"):
            return f"{agg.upper()}({expr})"
        if agg == "average":
            return f"AVG({expr})"
        raise Unsupported(f"aggregation {agg}")

    def metric(self, name: str) -> tuple[_Model, str]:
        m = self.metrics.get(name)
        if m is None or getattr(m.filter, "where_filters", None):
            raise Unsupported(f"metric {name}")
        kind, tp = _v(m.type), m.type_params
        if kind == "simple" and tp.measure is not None and not tp.measure.filter:
            mo, meas = self._measure(tp.measure.name)
            return mo, self._agg(mo, meas)
        if kind == "ratio" and tp.numerator is not None and tp.denominator is not None:
            if tp.numerator.filter or tp.denominator.filter:
                raise Unsupported(f"metric {name}")
            mo, num = self.metric(tp.numerator.name)
            mo2, den = self.metric(tp.denominator.name)
            if mo2 is not mo:
                raise Unsupported("ratio over two tables")
            return mo, f"CAST({num} AS DOUBLE) / CAST(NULLIF({den}, 0) AS DOUBLE)"
        raise Unsupported(f"{kind} metric {name}")

    def field(self, base: _Model, name: str, joins: dict[str, str]) -> tuple[str, str]:
        """(SQL, kind) for a group-by / filter name; adds the one-hop join it needs to ``joins``."""
        parts = name.split("__")
        if parts[0] == METRIC_TIME and len(parts) == 2:
            dim = base.default_time
            if dim is None or dim not in base.dims:
                raise Unsupported("no time dimension")
            col = base.qualify(base.dims[dim][0])
            return f"DATE_TRUNC('{parts[1]}', {col})", "time"
        if len(parts) == 1 and name in base.entities:  # an entity itself: its key on the base table
            return base.qualify(base.entities[name][1]), "entity"
        if len(parts) != 2:
            raise Unsupported(f"field {name}")
        entity, dim = parts
        target = next((mo for mo in self.models if entity in mo.primary() and dim in mo.dims), None)
        if target is None:
            raise Unsupported(f"field {name}")
        expr, kind = target.dims[dim]
        if target is not base:
            if base.entities.get(entity, ("", ""))[0] != "foreign":
                raise Unsupported(f"{name}: more than one hop")
            on = (f"{base.table}.{base.entities[entity][1]} = {target.table}.{target.entities[entity][1]}")
            joins.setdefault(target.table, f"LEFT JOIN {target.table} ON {on}")
        if kind == "time":
            raise Unsupported(f"time dimension {name}")
        return target.qualify(expr), kind

    def write(self, q: MetricQuery) -> str:
        if not q.metrics:
            raise Unsupported("a listing (no metric)")
        bases = [self.metric(m) for m in q.metrics]
        base = bases[0][0]
        if any(mo is not base for mo, _ in bases):
            raise Unsupported("metrics of two tables")
        joins: dict[str, str] = {}
        groups = [self.field(base, g, joins)[0] for g in q.group_by]
        select = [*(f"{g} AS {_alias(n)}" for g, n in zip(groups, q.group_by, strict=True)),
                  *(f"{agg} AS {m}" for (_, agg), m in zip(bases, q.metrics, strict=True))]
        where = [self._where(base, w, joins) for w in q.where or ()]
        sql = f"SELECT {', '.join(select)} FROM {base.table}"
        sql += "".join(f" {j}" for j in joins.values())
        if where:
            sql += " WHERE " + " AND ".join(where)
        if groups:
            sql += " GROUP BY " + ", ".join(groups)
        names = [*q.group_by, *q.metrics]
        if q.order_by:
            if any(o.field not in names for o in q.order_by):
                raise Unsupported("order by a field not selected")
            keys = [f"{names.index(o.field) + 1}{' DESC' if o.descending else ''}" for o in q.order_by]
            # Ties are broken by the group-bys, as the compiled gold breaks them: otherwise a tie
            # at a LIMIT lets the database pick either row, and the rows differ run to run.
            ordered = {o.field for o in q.order_by}
            keys += [str(i + 1) for i, g in enumerate(q.group_by) if g not in ordered]
            sql += " ORDER BY " + ", ".join(keys)
        if q.limit is not None:
            sql += f" LIMIT {q.limit}"
        return sql

    def _where(self, base: _Model, w: Where, joins: dict[str, str]) -> str:
        expr, kind = self.field(base, w.field, joins)
        timed = kind == "time"
        if timed and w.field.endswith("__day"):
            expr = expr.split(", ", 1)[1][:-1]  # a day filter reads the column itself
        vals = [_literal(v, timed) for v in w.values]
        if w.op == "between":
            return f"{expr} BETWEEN {vals[0]} AND {vals[1]}"
        if w.op in ("in", "not_in"):
            return f"{expr} {'NOT IN' if w.op == 'not_in' else 'IN'} ({', '.join(vals)})"
        return f"{expr} {_OPS[w.op]} {vals[0]}"


def _alias(name: str) -> str:
    return name.split("__")[-1] if not name.startswith(METRIC_TIME) else name.replace("__", "_")


def _literal(v: Value, timed: bool) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int | float):
        return str(v)
    if "'" in v or "\\" in v or "\n" in v:
        raise Unsupported("a quote in a value")
    return f"DATE '{v}'" if timed else f"'{v}'"


def clean_sql(query: MetricQuery, catalog: Catalog, warehouse: Warehouse) -> str:
    """The query as one clean SELECT (unchecked); :class:`Unsupported` when not covered."""
    return _Writer(catalog, warehouse).write(query)


def solve(queries: list[MetricQuery | None], catalog: Catalog, warehouse: Warehouse,
          executor: Executor) -> list[SolvedSql | None]:
    """Each gold as SQL: clean where it returns the gold's rows, else MetricFlow's (None: no gold)."""
    writer = _Writer(catalog, warehouse)
    out: list[SolvedSql | None] = []
    for q in queries:
        if q is None:
            out.append(None)
            continue
        compiled = catalog.engine.compile(q)
        gold_rows = executor.run(compiled)
        try:
            sql = writer.write(q)
            same = compare(executor.run(Query(sql, ())), gold_rows, ordered=q.ordered).strict
        except (Unsupported, ExecutionError, sqlglot.errors.ParseError):
            same = False
        out.append(SolvedSql(sql, "clean") if same else
                   SolvedSql(inline_params(compiled.sql, compiled.params), "metricflow"))
    return out


def solved_texts(cases: Sequence[QueryCase], warehouse: Warehouse) -> tuple[dict[str, str], dict[str, int]]:
    """Each bank case's solution as the SQL arms' assistant turn (its id → text): the solved SQL,
    or the abstention for a case without a gold; and how many of each style."""
    with make_executor(warehouse) as ex:
        solved = solve([c.gold for c in cases], warehouse.catalog, warehouse, ex)
    texts: dict[str, str] = {}
    styles: dict[str, int] = {}
    for case, s in zip(cases, solved, strict=True):
        texts[case.id] = s.sql if s is not None else '{"unanswerable": "not in this semantic layer"}'
        style = s.style if s is not None else "unanswerable"
        styles[style] = styles.get(style, 0) + 1
    return texts, styles
