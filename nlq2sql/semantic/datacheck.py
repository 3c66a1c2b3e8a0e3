"""Checks of a semantic layer against its data that MetricFlow cannot make (it never reads data).

Every table exists; every entity, dimension and measure expression binds in DuckDB; time dimensions
are DATE or TIMESTAMP; a **primary or unique entity is unique** (a duplicated key fans out every join
and silently multiplies metrics); no dimension or measure is NULL in every row of a non-empty table
(it would group or answer the same whatever the question). Every problem is returned, naming file,
line, key (for a fan-out, a duplicated value) and the manifest object (:attr:`DataProblem.target`),
so the binding excludes exactly that object (:mod:`.prune`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.project import Problem

if TYPE_CHECKING:
    from metricflow_semantic_interfaces.implementations.elements.dimension import PydanticDimension
    from metricflow_semantic_interfaces.implementations.elements.entity import PydanticEntity
    from metricflow_semantic_interfaces.implementations.elements.measure import PydanticMeasure

__all__ = ["DataProblem", "check_data"]

_TIME_TYPES = ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS", "TIMESTAMP_MS", "TIMESTAMP_S")


@dataclass(frozen=True)
class DataProblem:
    """One data problem: where it is written (``problem``) and the object it touches, as the
    manifest path the pruning removes (``semantic_models.M``, ``semantic_models.M.dimensions.D``,
    ``…entities.E``, ``…measures.X``, ``metrics.N``)."""

    problem: Problem
    target: str

    def __str__(self) -> str:
        return str(self.problem)


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _qi(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _missing(table: str, schema: str, tables: set[tuple[str, str]], db_name: str, default: bool) -> str:
    """A missing relation, with the schemas that hold one of that name and the option to choose one."""
    elsewhere = sorted(s for s, t in tables if t == table)
    text = f"table or view {table!r} is not in schema {schema!r} of the database ({db_name})"
    if elsewhere:
        where = ", ".join(repr(s) for s in elsewhere)
        text += f"; schema {where} holds one: pass --db-schema {elsewhere[0]}"
        if default:
            text += " (or point at the dbt project, whose profile names its schema)"
    return text



def _kind(x: object) -> str:
    return str(getattr(x, "value", x)).lower()



def check_data(catalog: Catalog, con: duckdb.DuckDBPyConnection, db_name: str) -> list[DataProblem]:
    """Every data problem of ``catalog`` on ``con`` (empty: the layer and its data agree)."""
    problems: list[DataProblem] = []
    tables = {(r[0], r[1]) for r in con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                                                 "WHERE table_catalog = current_database()").fetchall()}
    proj = catalog.project

    def problem(sm: str, keys: tuple[str, ...], message: str, target: tuple[str, ...] | None = None) -> None:
        path, line = proj.locate("semantic_model", sm, *keys)
        problems.append(DataProblem(Problem(path, line, ".".join(("semantic_models", sm, *keys)), message),
                                    ".".join(("semantic_models", sm, *(keys if target is None else target)))))

    for sm in catalog.manifest.semantic_models:
        table, schema = sm.node_relation.alias, sm.node_relation.schema_name
        if (schema, table) not in tables:
            problem(sm.name, ("model",), _missing(table, schema, tables, db_name, catalog.project.target.is_default),
                    ())
            continue
        src = f"{_qi(schema)}.{_qi(table)}"
        elements: list[tuple[str, PydanticEntity | PydanticDimension | PydanticMeasure, str]] = []
        elements += [("entities", e, e.expr or e.name) for e in sm.entities]
        elements += [("dimensions", d, d.expr or d.name) for d in sm.dimensions]
        elements += [("measures", m, str(m.expr) if m.expr is not None else m.name) for m in sm.measures]
        bad: set[str] = set()
        bound: list[tuple[str, PydanticEntity | PydanticDimension | PydanticMeasure, str]] = []
        wrong_type: dict[str, str] = {}
        for group, el, expr in elements:
            try:
                kind = con.execute(f"SELECT typeof({expr}) FROM {src} LIMIT 1").fetchone()
            except duckdb.Error as exc:
                problem(sm.name, (group, el.name), f"expression {expr!r} fails in DuckDB: {_first_line(exc)}")
                bad.add(el.name)
                continue
            bound.append((group, el, expr))
            is_time = group == "dimensions" and _kind(el.type) == "time"
            if is_time and kind is not None and kind[0] not in (*_TIME_TYPES, "NULL"):
                wrong_type[el.name] = kind[0]
        # all NULL first: an empty CSV column is typed INTEGER, and its real problem is that it is empty
        bad |= _all_null(con, src, table, [b for b in bound if b[0] != "entities"], problem, sm.name)
        for name, kind_name in wrong_type.items():
            if name not in bad:
                problem(sm.name, ("dimensions", name),
                        f"time dimension {name!r} is {kind_name}, not a DATE or TIMESTAMP")
                bad.add(name)
        for e in sm.entities:
            etype = _kind(e.type)
            if etype not in ("primary", "unique") or e.name in bad:
                continue
            expr = e.expr or e.name
            row = con.execute(f"SELECT CAST(k AS VARCHAR), n FROM (SELECT {expr} AS k, COUNT(*) AS n FROM {src} "
                              f"WHERE k IS NOT NULL GROUP BY 1 HAVING COUNT(*) > 1) LIMIT 1").fetchone()
            if row is not None:
                problem(sm.name, ("entities", e.name),
                        f"{etype} entity {e.name!r} is not unique in {table!r}: key {row[0]!r} occurs {row[1]} times "
                        "(every join through it would fan out and multiply the metrics)")
    problems += _metric_exprs(catalog, con, tables)
    return problems


def _all_null(con: duckdb.DuckDBPyConnection, src: str, table: str,
              bound: list[tuple[str, PydanticEntity | PydanticDimension | PydanticMeasure, str]],
              problem: Callable[[str, tuple[str, ...], str], None], sm: str) -> set[str]:
    """Dimensions and measures NULL in every row of a table that has rows (one scan per table):
    each reported; their names returned."""
    if not bound:
        return set()
    counts = ", ".join(f"COUNT({expr})" for _, _, expr in bound)
    try:
        row = con.execute(f"SELECT COUNT(*), {counts} FROM {src}").fetchone()
    except duckdb.Error:  # an expression that binds alone but not as an argument: left to the queries
        return set()
    if row is None or not row[0]:
        return set()
    out: set[str] = set()
    for (group, el, _), n in zip(bound, row[1:], strict=True):
        if n == 0:
            what = f"{_kind(el.type)} dimension" if group == "dimensions" else "measure"
            problem(sm, (group, el.name), f"{what} {el.name!r} is NULL in every row of {table!r} ({row[0]} rows)")
            out.add(el.name)
    return out


def _metric_exprs(catalog: Catalog, con: duckdb.DuckDBPyConnection,
                  tables: set[tuple[str, str]]) -> list[DataProblem]:
    """A simple metric written without a measure (its own ``agg`` and ``expr`` over a semantic
    model) binds in DuckDB over that model's table."""
    out: list[DataProblem] = []
    models = {sm.name: sm for sm in catalog.manifest.semantic_models}
    for m in catalog.manifest.metrics:
        params = m.type_params
        agg = params.metric_aggregation_params
        if _kind(m.type) != "simple" or params.measure is not None or agg is None:
            continue
        sm = models.get(agg.semantic_model)
        if sm is None or (sm.node_relation.schema_name, sm.node_relation.alias) not in tables:
            continue
        expr = params.expr or m.name
        try:
            con.execute(f"SELECT typeof({expr}) FROM {_qi(sm.node_relation.schema_name)}.{_qi(sm.node_relation.alias)} "
                        "LIMIT 1").fetchone()
        except duckdb.Error as exc:
            path, line = catalog.project.locate("metric", m.name, "type_params", "expr")
            out.append(DataProblem(Problem(path, line, f"metrics.{m.name}.type_params.expr",
                                           f"expression {expr!r} fails in DuckDB: {_first_line(exc)}"),
                                   f"metrics.{m.name}"))
    return out
