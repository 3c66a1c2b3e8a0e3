"""A PostgreSQL ``pg_dump`` plain-text file → tables in a DuckDB database.

The dump is read, never run: each ``CREATE TABLE`` is transpiled by sqlglot to DuckDB (``public.``
dropped, so tables land in ``main``), each ``COPY … FROM stdin`` block is read as text rows (``\\N``
is NULL, escapes undone) and inserted through the declared types, so DuckDB casts as PostgreSQL
would. ``SET``, owners, constraints, indexes and sequences are ignored. Deterministic."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd
import sqlglot
from sqlglot import exp

from nlq2sql.errors import InputError

__all__ = ["CopyBlock", "Dump", "build_defog_database", "build_from_dump", "load_dump", "parse_dump",
           "unescape_copy_field"]

_CREATE = re.compile(r"^CREATE TABLE\b.*?\);\s*$", re.S | re.M)
_COPY = re.compile(r"^COPY\s+(?P<table>[\w.\"]+)\s*\((?P<cols>[^)]*)\)\s+FROM\s+stdin;\s*$", re.M | re.I)
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))")


@dataclass(frozen=True)
class CopyBlock:
    """One ``COPY ... FROM stdin;`` block: its table, columns and rows (``None`` = ``\\N``)."""

    table: str
    columns: tuple[str, ...]
    rows: list[tuple[str | None, ...]] = field(default_factory=list)
    line: int = 0


@dataclass(frozen=True)
class Dump:
    """A dump read: the DuckDB ``CREATE TABLE`` statements by table, and the COPY blocks."""

    tables: dict[str, str]
    copies: list[CopyBlock]


def _bare(name: str) -> str:
    """A table name without its schema and quotes (``public."X"`` → ``X``)."""
    return name.rsplit(".", 1)[-1].strip('"')


def unescape_copy_field(text: str) -> str | None:
    """One field of COPY's text format: ``\\N`` is NULL, backslash escapes are undone."""
    if text == "\\N":
        return None
    if "\\" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return chr(int(m.group(1), 8))
        if m.group(2):
            return chr(int(m.group(2), 16))
        return _ESCAPES.get(m.group(3), m.group(3))

    return _ESCAPE.sub(one, text)


def parse_dump(text: str, source: str = "<dump>") -> Dump:
    """Split a plain-text dump into DuckDB DDL per table and COPY blocks (problems all at once)."""
    problems: list[str] = []
    lines = text.splitlines()
    copies: list[CopyBlock] = []
    body: list[str] = []  # the dump without its COPY data, for the DDL
    i = 0
    while i < len(lines):
        m = _COPY.match(lines[i])
        if not m:
            body.append(lines[i])
            i += 1
            continue
        start = i + 1
        cols = tuple(c.strip().strip('"') for c in m.group("cols").split(","))
        rows: list[tuple[str | None, ...]] = []
        i += 1
        while i < len(lines) and lines[i] != "\\.":
            fields = lines[i].split("\t")
            if len(fields) != len(cols):
                problems.append(f"{source}:{i + 1}: {len(fields)} fields, COPY {m.group('table')} names {len(cols)}")
            else:
                rows.append(tuple(unescape_copy_field(f) for f in fields))
            i += 1
        if i == len(lines):
            problems.append(f"{source}:{start}: COPY {m.group('table')} has no closing \\.")
        copies.append(CopyBlock(_bare(m.group("table")), cols, rows, start))
        i += 1
    tables: dict[str, str] = {}
    for stmt in _CREATE.findall("\n".join(body)):
        try:
            tree = sqlglot.parse_one(stmt, read="postgres")
        except sqlglot.errors.ParseError as exc:
            problems.append(f"{source}: cannot read {stmt.splitlines()[0]!r}: {str(exc).splitlines()[0]}")
            continue
        table = tree.find(exp.Table)
        assert table is not None
        table.set("db", None)
        table.set("catalog", None)
        tables[table.name] = tree.sql(dialect="duckdb")
    problems += [f"{source}:{c.line}: COPY into {c.table!r}, which no CREATE TABLE declares"
                 for c in copies if c.table not in tables]
    if problems:
        raise InputError("cannot read the dump:\n  " + "\n  ".join(problems), path=source)
    return Dump(tables, copies)


def load_dump(con: duckdb.DuckDBPyConnection, text: str, source: str = "<dump>") -> dict[str, int]:
    """Create a dump's tables on ``con`` and insert its rows; returns rows inserted per table."""
    dump = parse_dump(text, source)
    for ddl in dump.tables.values():
        con.execute(ddl)
    counts = dict.fromkeys(dump.tables, 0)
    for block in dump.copies:
        if block.rows:
            data = pd.DataFrame({f"c{j}": pd.Series([r[j] for r in block.rows], dtype="string")
                                 for j in range(len(block.columns))})
            con.register("_pgdump_rows", data)
            cols = ", ".join(f'"{c}"' for c in block.columns)
            sel = ", ".join(f"c{j}" for j in range(len(block.columns)))
            con.execute(f'INSERT INTO "{block.table}" ({cols}) SELECT {sel} FROM _pgdump_rows')
            con.unregister("_pgdump_rows")
        counts[block.table] += len(block.rows)
    return counts



def build_from_dump(out: Path, text: str, source: str = "<dump>") -> dict[str, int]:
    """Write a dump's tables to a new DuckDB file ``out``; returns rows per table."""
    con = duckdb.connect(str(out))
    try:
        counts = load_dump(con, text, source)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return counts


def build_defog_database(out: Path, database: str) -> dict[str, int]:
    """Write one of defog's sql-eval databases to ``out``: the ``pg_dump`` text the ``defog-data``
    package installs as ``defog_data/<database>/<database>.sql`` (nothing downloaded), loaded by
    :func:`build_from_dump`.  What each ``warehouses/defog_<database>/build.py`` calls."""
    from importlib.resources import files

    dump = files("defog_data").joinpath(database, f"{database}.sql")
    return build_from_dump(out, dump.read_text(encoding="utf-8"), f"defog_data/{database}/{database}.sql")
