"""Check a model's SQL before it runs: one read-only SELECT over the warehouse's tables, nothing else.

The first of two walls (the :mod:`.sandbox` is the second): refuses, saying why, a second statement,
DDL/DML, ATTACH/COPY/INSTALL/PRAGMA/SET, file- or URL-reading functions and tables outside the
warehouse. Read by sqlglot (DuckDB) and by DuckDB's own parser, refused when either objects, so a
trick one reads differently cannot slip through. Outside literals and quoted identifiers text must be
plain ASCII (look-alikes are refused, naming the character and its NFKC form). Every outcome is a
:class:`Verdict`; nothing raises."""

from __future__ import annotations

import json
import re
import threading
import unicodedata
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import duckdb
import sqlglot
from sqlglot import exp

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["ALLOWED_TABLE_FUNCTIONS", "REFUSED", "SQL_ERROR", "Verdict", "check_sql", "forbidden_function"]

REFUSED = "sql_refused"
SQL_ERROR = "sql_error"
OK = "ok"
MAX_SQL_CHARS = 20_000
#: Table functions a SELECT may read from: generated rows only, never files.
ALLOWED_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
#: Functions refused anywhere (scalar or table): they read files, URLs, the environment, settings
#: or the catalog outside the warehouse, or run SQL text of their own.
_FORBIDDEN_NAMES = frozenset({
    "glob", "sniff_csv", "getenv", "current_setting", "query", "query_table", "which_secret",
    "checkpoint", "force_checkpoint", "sql_auto_complete", "json_execute_serialized_sql",
    "json_serialize_sql", "json_deserialize_sql", "json_serialize_plan", "load_extension",
    "install_extension", "httpfs", "http_get", "http_post", "httpfs_get", "iceberg_metadata",
    "iceberg_snapshots", "parquet_metadata", "parquet_schema", "parquet_file_metadata",
    "parquet_kv_metadata", "parquet_bloom_probe", "summary", "test_all_types", "test_vector_types",
    "enable_profiling", "disable_profiling", "pg_timezone_names", "icu_calendar_names",
})
_FORBIDDEN_PREFIXES = ("read_", "duckdb_", "pragma_", "pg_", "sqlite_", "postgres_", "mysql_", "delta_",
                       "iceberg_", "parquet_", "json_execute", "__internal", "http")
_FORBIDDEN_SUFFIXES = ("_scan", "_attach", "_query", "_execute")
#: sqlglot node classes that never belong in a SELECT (looked up by name: sqlglot versions differ).
_FORBIDDEN_NODES = tuple(c for c in (getattr(exp, n, None) for n in (
    "Command", "Insert", "Update", "Delete", "Merge", "Create", "Drop", "Alter", "AlterTable", "Copy",
    "Pragma", "Set", "Use", "Attach", "Detach", "Install", "Load", "TruncateTable", "Describe",
    "Summarize", "Transaction", "Commit", "Rollback", "Export", "Import", "Cache", "Uncache", "Refresh",
    "Kill", "Grant", "Revoke", "Analyze", "Show", "Into", "LoadData")) if isinstance(c, type))
_TOP_LEVEL = (exp.Select, exp.SetOperation, exp.Subquery)
#: A statement must open with one of these (after comments and parentheses): checked before any
#: parser sees it, because DuckDB's parser itself reads files for some statements (IMPORT DATABASE).
_OPENING_WORDS = frozenset({"select", "with", "from"})
_OPENING = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*([A-Za-z_]*)", re.S)


@dataclass(frozen=True)
class Verdict:
    """The guard's answer: ``status`` is ``ok`` (run ``sql``), ``sql_refused`` or ``sql_error``
    (DuckDB's own parser rejects it: a syntax error, reported with DuckDB's first message line)."""

    status: str
    reason: str | None
    sql: str
    tables: tuple[str, ...] = field(default=())
    ordered: bool = False  # the outermost query has an ORDER BY: its rows' order means something

    @property
    def accepted(self) -> bool:
        return self.status == OK


def forbidden_function(name: str) -> bool:
    """Whether a function name (any case) reads outside the warehouse or runs SQL of its own."""
    n = name.lower()
    return n in _FORBIDDEN_NAMES or n.startswith(_FORBIDDEN_PREFIXES) or n.endswith(_FORBIDDEN_SUFFIXES)


def _char_problem(ch: str) -> str:
    name = unicodedata.name(ch, f"U+{ord(ch):04X}")
    folded = unicodedata.normalize("NFKC", ch)
    hint = f"; NFKC reads it as {folded!r}" if folded != ch else ""
    return f"character {ch!r} ({name}{hint}) outside a string literal or quoted identifier"


def _scan(sql: str) -> tuple[str | None, int]:
    """Scan as DuckDB does (strings '..' with '' and E'..' escapes, "identifiers", -- and nested
    /* */ comments): outside literals and quoted identifiers only printable ASCII is allowed;
    ``$`` (parameters, dollar quoting), nested block comments and anything but comments after a
    ``;`` are refused — before any parser sees a second statement."""
    i, n = 0, len(sql)
    ended = False
    end = n
    while i < n:
        ch = sql[i]
        if ended and ch in "'\"eE" and not sql.startswith(("--", "/*"), i):
            return "a second statement after ';' (exactly one SELECT is accepted)", end
        if ch == "'" or (ch in "eE" and i + 1 < n and sql[i + 1] == "'"
                         and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_"))):
            escape = ch != "'"
            i += 2 if escape else 1
            while True:
                if i >= n:
                    return "unterminated string literal", end
                c = sql[i]
                if escape and c == "\\":
                    i += 2
                    continue
                if c == "'":
                    if i + 1 < n and sql[i + 1] == "'":
                        i += 2
                        continue
                    i += 1
                    break
                i += 1
            continue
        if ch == '"':
            j = i + 1
            while True:
                if j >= n:
                    return "unterminated quoted identifier", end
                if sql[j] == '"':
                    if j + 1 < n and sql[j + 1] == '"':
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
            continue
        if sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            bad = next((c for c in sql[i:j] if not (c.isascii() and (c.isprintable() or c == "\t"))), None)
            if bad is not None:
                return _char_problem(bad) + " (in a comment)", end
            i = j
            continue
        if sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            if j < 0:
                return "unterminated block comment", end
            body = sql[i + 2:j]
            if "/*" in body:
                return "nested block comment (parsers disagree on where it ends)", end
            bad = next((c for c in body if not (c.isascii() and (c.isprintable() or c in "\t\r\n"))), None)
            if bad is not None:
                return _char_problem(bad) + " (in a comment)", end
            i = j + 2
            continue
        if ch == ";":
            if not ended:
                end = i
            ended = True
            i += 1
            continue
        if ended and not ch.isspace():
            return "a second statement after ';' (exactly one SELECT is accepted)", end
        if ch == "$":
            return "'$' outside a string literal (parameters and dollar-quoted strings are not accepted)", end
        if not ch.isascii():
            return _char_problem(ch), end
        if not (ch.isprintable() or ch in "\t\r\n"):
            return f"control character U+{ord(ch):04X} outside a string literal", end
        i += 1
    return None, end


_parser_lock = threading.Lock()
_parser_con: list[duckdb.DuckDBPyConnection] = []


def _duckdb() -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB used only to parse (never to run the model's SQL)."""
    with _parser_lock:
        if not _parser_con:
            con = duckdb.connect(":memory:", config={"enable_external_access": False,
                                                     "autoload_known_extensions": False,
                                                     "autoinstall_known_extensions": False,
                                                     "threads": 1})
            con.execute("SET lock_configuration = true")
            _parser_con.append(con)
        return _parser_con[0].cursor()


def _walk(node: JsonValue) -> Iterator[dict[str, Any]]:
    stack = [node]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            yield o
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)


def _duckdb_view(sql: str) -> tuple[str, str | None, list[tuple[str, str, str]], set[str], set[str], list[str]]:
    """DuckDB's reading: (status, reason, base tables (catalog, schema, name), CTE names,
    functions, table functions)."""
    cur = _duckdb()
    try:
        try:
            stmts = cur.extract_statements(sql)
        except duckdb.Error as exc:
            return SQL_ERROR, str(exc).splitlines()[0], [], set(), set(), []
        if len(stmts) != 1:
            return REFUSED, f"{len(stmts)} statements (exactly one SELECT is accepted)", [], set(), set(), []
        if stmts[0].type != duckdb.StatementType.SELECT:
            kind = str(stmts[0].type).rsplit(".", 1)[-1]
            return REFUSED, f"statement type {kind} (only SELECT is accepted)", [], set(), set(), []
        try:
            row = cur.execute("SELECT json_serialize_sql($1::VARCHAR)", [sql]).fetchone()
        except duckdb.Error as exc:
            return REFUSED, f"DuckDB cannot serialise it: {str(exc).splitlines()[0]}", [], set(), set(), []
    finally:
        cur.close()
    tree = json.loads(row[0]) if row else {"error": True, "error_message": "no result"}
    if tree.get("error"):
        return REFUSED, f"DuckDB: {tree.get('error_message', 'not a plain SELECT')}", [], set(), set(), []
    tables: list[tuple[str, str, str]] = []
    ctes: set[str] = set()
    funcs: set[str] = set()
    table_funcs: list[str] = []
    for o in _walk(tree):
        node_type = o.get("type")
        if node_type == "BASE_TABLE":
            tables.append((str(o.get("catalog_name") or ""), str(o.get("schema_name") or ""),
                           str(o.get("table_name") or "")))
        elif node_type == "TABLE_FUNCTION":
            fn = o.get("function")
            table_funcs.append(str(fn.get("function_name", "")) if isinstance(fn, dict) else "?")
        if o.get("class") == "FUNCTION":
            funcs.add(str(o.get("function_name", "")))
        cte_map = o.get("cte_map")
        if isinstance(cte_map, dict):
            ctes.update(str(m.get("key", "")) for m in cte_map.get("map", []) if isinstance(m, dict))
    return OK, None, tables, ctes, funcs, table_funcs


def _func_name(f: exp.Func) -> str:
    return str(f.name) if isinstance(f, exp.Anonymous) else str(f.sql_name())


def _sqlglot_view(sql: str) -> tuple[str | None, list[exp.Table], set[str], set[str], set[str], bool]:
    """sqlglot's reading: (refusal, tables, CTE names, functions, table functions, whether the
    outermost query has an ORDER BY)."""
    try:
        stmts = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError) as exc:
        return f"sqlglot cannot parse it: {str(exc).splitlines()[0][:200]}", [], set(), set(), set(), False
    except Exception as exc:  # noqa: BLE001 — sqlglot raises more than its own errors on odd input
        return f"sqlglot failed on it: {type(exc).__name__}", [], set(), set(), set(), False
    if len(stmts) != 1:
        return f"{len(stmts)} statements (exactly one SELECT is accepted)", [], set(), set(), set(), False
    tree = stmts[0]
    if not isinstance(tree, _TOP_LEVEL):
        what = type(tree).__name__
        return f"a {what} statement (only SELECT or WITH ... SELECT is accepted)", [], set(), set(), set(), False
    tables: list[exp.Table] = []
    ctes: set[str] = set()
    funcs: set[str] = set()
    table_funcs: set[str] = set()
    for node in tree.walk():
        if isinstance(node, _FORBIDDEN_NODES):
            return f"{type(node).__name__} inside the statement", [], set(), set(), set(), False
        if isinstance(node, (exp.Placeholder, exp.Parameter)):
            return "parameters are not accepted", [], set(), set(), set(), False
        if isinstance(node, exp.CTE):
            ctes.add(node.alias_or_name.lower())
        elif isinstance(node, exp.Table):
            if isinstance(node.this, exp.Func):
                table_funcs.add(_func_name(node.this).lower())
            elif not isinstance(node.this, exp.Identifier):
                what = node.sql(dialect="duckdb")[:80]
                return f"a table that is not a plain name: {what}", [], set(), set(), set(), False
            else:
                tables.append(node)
        elif isinstance(node, exp.Func):
            funcs.add(_func_name(node).lower())
    return None, tables, ctes, funcs, table_funcs, tree.args.get("order") is not None


def check_sql(sql: str, tables: Collection[str], *, catalog_names: Collection[str] = (),
              schema_tables: Mapping[str, Collection[str]] | None = None) -> Verdict:
    """Accept ``sql`` only as one SELECT (or WITH … SELECT) reading ``tables`` (and its own CTEs).

    ``tables`` are the table/view names an unqualified name reaches; ``catalog_names`` the
    catalog aliases a qualified name may use; ``schema_tables`` each schema of the warehouse with
    its tables (what a schema-qualified name may read; default: ``main`` holding ``tables``).
    Never raises."""
    try:
        return _check(sql, tables, catalog_names, schema_tables)
    except Exception as exc:  # noqa: BLE001 — a guard that fails refuses; the run goes on
        return Verdict(REFUSED, f"guard failure: {type(exc).__name__}", sql)


def _check(sql: str, tables: Collection[str], catalog_names: Collection[str],
           schema_tables: Mapping[str, Collection[str]] | None = None) -> Verdict:
    def refuse(reason: str) -> Verdict:
        return Verdict(REFUSED, reason, sql)

    if not sql.strip():
        return refuse("empty statement")
    if len(sql) > MAX_SQL_CHARS:
        return refuse(f"statement longer than {MAX_SQL_CHARS} characters")
    lex, stop = _scan(sql)
    if lex is not None:
        return refuse(lex)
    sql = sql[:stop]  # what follows a final ';' is only comments and whitespace
    m = _OPENING.match(sql)
    first = m.group(1).lower() if m else ""
    if first not in _OPENING_WORDS:
        return refuse(f"statement opens with {first.upper() or 'no keyword'!r} (only SELECT, WITH or FROM)")
    status, reason, d_tables, d_ctes, d_funcs, d_tfuncs = _duckdb_view(sql)
    if status != OK:
        return Verdict(status, reason, sql)
    g_reason, g_tables, g_ctes, g_funcs, g_tfuncs, ordered = _sqlglot_view(sql)
    if g_reason is not None:
        return refuse(g_reason)
    for name in sorted({*d_funcs, *d_tfuncs, *g_funcs, *g_tfuncs}):
        if forbidden_function(name):
            return refuse(f"function {name}() reads outside the warehouse or runs SQL of its own")
    for name in sorted({t.lower() for t in d_tfuncs} | g_tfuncs):
        if name not in ALLOWED_TABLE_FUNCTIONS:
            return refuse(f"table function {name}() (only {', '.join(sorted(ALLOWED_TABLE_FUNCTIONS))} are accepted)")
    known = {t.lower() for t in tables}
    ctes = {c.lower() for c in d_ctes} | g_ctes
    catalogs = {c.lower() for c in catalog_names}
    by_schema = ({s.lower(): {t.lower() for t in ts} for s, ts in schema_tables.items()} if schema_tables is not None
                 else {"main": known})
    by_schema.setdefault("main", set())
    used: list[str] = []
    refs = [(c, s, t) for c, s, t in d_tables] + [(t.catalog, t.db, t.name) for t in g_tables]
    for cat, schema, name in refs:
        low = name.lower()
        if schema and schema.lower() not in by_schema or cat and cat.lower() not in catalogs:
            return refuse(f"table {'.'.join(p for p in (cat, schema, name) if p)!r} is outside the warehouse")
        if cat or schema:
            if low not in by_schema[(schema or "main").lower()]:
                return refuse(f"table {name!r} is not in the warehouse")
        elif low not in known and low not in ctes:
            return refuse(f"table {name!r} is not in the warehouse (nor a CTE of the statement)")
        if low in known and low not in used:
            used.append(low)
    return Verdict(OK, None, sql, tuple(used), ordered)
