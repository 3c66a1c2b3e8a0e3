"""Checks of a semantic layer against its data that MetricFlow cannot make (it never reads data).

Every table a semantic model reads exists; every entity, dimension and measure expression
binds in DuckDB; each time dimension is a DATE or TIMESTAMP; and a **primary or unique
entity really is unique** in its table — a duplicated key makes every join through it fan
out and silently multiplies the metrics on the other side.  Every problem is reported at once,
naming file, line and key (and, for a fan-out, one duplicated key value).
"""

from __future__ import annotations

from typing import Any

import duckdb

from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.project import Problem, SemanticProblems

__all__ = ["check_data"]

_TIME_TYPES = ("DATE", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS", "TIMESTAMP_MS", "TIMESTAMP_S")


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


def check_data(catalog: Catalog, con: duckdb.DuckDBPyConnection, db_name: str) -> None:
    """Raise :class:`SemanticProblems` listing every data problem of ``catalog`` on ``con``."""
    problems: list[Problem] = []
    tables = {(r[0], r[1]) for r in con.execute("SELECT table_schema, table_name FROM information_schema.tables "
                                                 "WHERE table_catalog = current_database()").fetchall()}
    proj = catalog.project

    def problem(sm: str, keys: tuple[str, ...], message: str) -> None:
        path, line = proj.locate("semantic_model", sm, *keys)
        problems.append(Problem(path, line, ".".join(("semantic_models", sm, *keys)), message))

    for sm in catalog.manifest.semantic_models:
        table, schema = sm.node_relation.alias, sm.node_relation.schema_name
        if (schema, table) not in tables:
            problem(sm.name, ("model",), _missing(table, schema, tables, db_name, catalog.project.target.is_default))
            continue
        src = f"{_qi(schema)}.{_qi(table)}"
        elements: list[tuple[str, Any, str]] = []
        elements += [("entities", e, e.expr or e.name) for e in sm.entities]
        elements += [("dimensions", d, d.expr or d.name) for d in sm.dimensions]
        elements += [("measures", m, str(m.expr) if m.expr is not None else m.name) for m in sm.measures]
        bad: set[str] = set()
        for group, el, expr in elements:
            try:
                kind = con.execute(f"SELECT typeof({expr}) FROM {src} LIMIT 1").fetchone()
            except duckdb.Error as exc:
                problem(sm.name, (group, el.name), f"expression {expr!r} fails in DuckDB: {_first_line(exc)}")
                bad.add(el.name)
                continue
            is_time = group == "dimensions" and str(getattr(el.type, "value", el.type)).lower() == "time"
            if is_time and kind is not None and kind[0] not in (*_TIME_TYPES, "NULL"):
                problem(sm.name, (group, el.name), f"time dimension {el.name!r} is {kind[0]}, not a DATE or TIMESTAMP")
        for e in sm.entities:
            etype = str(getattr(e.type, "value", e.type)).lower()
            if etype not in ("primary", "unique") or e.name in bad:
                continue
            expr = e.expr or e.name
            row = con.execute(f"SELECT CAST(k AS VARCHAR), n FROM (SELECT {expr} AS k, COUNT(*) AS n FROM {src} "
                              f"WHERE k IS NOT NULL GROUP BY 1 HAVING COUNT(*) > 1) LIMIT 1").fetchone()
            if row is not None:
                problem(sm.name, ("entities", e.name),
                        f"{etype} entity {e.name!r} is not unique in {table!r}: key {row[0]!r} occurs {row[1]} times "
                        "(every join through it would fan out and multiply the metrics)")
    if problems:
        raise SemanticProblems(problems)
