"""Run a guard-accepted SELECT on the warehouse where it can read nothing else and stop nothing.

A dedicated in-memory DuckDB (limits are per instance, so not the harness's ``Executor``) attaches
the warehouse READ_ONLY, then turns external access, replacement scans and extension auto-loading
off, sets memory, threads and a zero temp-directory budget, and locks its configuration. Per
statement: a wall-clock limit (``sql_timeout``), a row cap (``sql_too_many_rows``, first ``cap``
rows kept, ``truncated``), DuckDB errors as ``sql_error``; nothing raises out of
:meth:`Sandbox.run`. ``search_path`` (default ``main``) is set before locking, entries plain
identifiers naming schemas of the file (the guard refuses SET); qualified names may read any schema."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from nlq2sql.answers.sql.guard import REFUSED, SQL_ERROR, Verdict, check_sql
from nlq2sql.errors import InputError

__all__ = ["DEFAULT_MEMORY_LIMIT", "DEFAULT_ROW_CAP", "DEFAULT_TIMEOUT_S", "SQL_TIMEOUT", "SQL_TOO_MANY_ROWS",
           "Sandbox", "SandboxResult"]

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_ROW_CAP = 10_000
DEFAULT_MEMORY_LIMIT = "1GB"
SQL_TIMEOUT = "sql_timeout"
SQL_TOO_MANY_ROWS = "sql_too_many_rows"
Row = tuple[Any, ...]
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


@dataclass(frozen=True)
class SandboxResult:
    """One statement's outcome: ``status`` ∈ ok, sql_refused, sql_error, sql_timeout, sql_too_many_rows."""

    status: str
    reason: str | None = None
    columns: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    rows: list[Row] | None = None
    truncated: bool = False
    elapsed_s: float = 0.0
    tables: tuple[str, ...] = field(default=())
    ordered: bool = False  # the guard's reading: the statement orders its rows

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class Sandbox:
    """A locked, read-only DuckDB instance over one warehouse file; one statement at a time."""

    def __init__(self, db_path: str | Path, *, timeout_s: float = DEFAULT_TIMEOUT_S, row_cap: int = DEFAULT_ROW_CAP,
                 memory_limit: str = DEFAULT_MEMORY_LIMIT, threads: int = 1, alias: str = "warehouse",
                 search_path: Sequence[str] | None = None) -> None:
        if not alias.isidentifier():
            raise ValueError(f"alias {alias!r} must be a plain identifier")
        path_given = tuple(search_path) if search_path else ("main",)
        bad = [s for s in path_given if not _SCHEMA_NAME.match(s)]
        if bad:  # validated here too: the value is spliced into a SET statement
            raise InputError(f"search path entries must be plain identifiers; refused: {bad}", field="--search-path")
        self.path, self.timeout_s, self.row_cap, self.alias = str(db_path), float(timeout_s), int(row_cap), alias
        self._lock = threading.Lock()
        con = duckdb.connect(":memory:", config={"threads": int(threads), "memory_limit": memory_limit,
                                                 "temp_directory": "", "autoload_known_extensions": False,
                                                 "autoinstall_known_extensions": False})
        try:
            con.execute(f"ATTACH {_quote(self.path)} AS {alias} (READ_ONLY)")
            con.execute(f"USE {alias}")
            pairs = con.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE "
                                "table_catalog = $1 ORDER BY table_schema, table_name", [alias]).fetchall()
            schemas: dict[str, list[str]] = {}
            for schema, name in pairs:
                schemas.setdefault(str(schema), []).append(str(name))
            missing = [s for s in path_given if s not in schemas and s != "main"]
            if missing:
                known = ", ".join(sorted(schemas)) or "none"
                raise InputError(f"search path schema(s) {', '.join(missing)} not in the warehouse (its schemas "
                                 f"with tables: {known})", path=Path(self.path).name, field="--search-path")
            if search_path:
                con.execute(f"SET search_path = '{','.join(path_given)}'")
            for setting in ("enable_external_access = false", "python_enable_replacements = false",
                            "allow_community_extensions = false", "max_temp_directory_size = '0KiB'",
                            "enable_progress_bar = false", "lock_configuration = true"):
                con.execute(f"SET {setting}")
        except BaseException:
            con.close()
            raise
        self._con = con
        #: The schemas unqualified names resolve in, in order.
        self.search_path: tuple[str, ...] = path_given
        #: Every schema of the warehouse with its tables and views (what a qualified name may read).
        self.schema_tables: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in schemas.items()}
        #: The tables and views an unqualified name reaches (the search path's, first schema first).
        self.tables: tuple[str, ...] = tuple(dict.fromkeys(t for s in path_given for t in schemas.get(s, ())))

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self, sql: str) -> Verdict:
        """The guard's verdict on ``sql`` against this warehouse's tables."""
        return check_sql(sql, self.tables, catalog_names=(self.alias,), schema_tables=self.schema_tables)

    def execute(self, sql: str) -> SandboxResult:
        """Guard, then run: the one entry point for untrusted text."""
        verdict = self.check(sql)
        if not verdict.accepted:
            return SandboxResult(verdict.status if verdict.status in (REFUSED, SQL_ERROR) else REFUSED,
                                 verdict.reason)
        return self.run(verdict)

    def run(self, verdict: Verdict) -> SandboxResult:
        """Run an accepted statement under the time limit and row cap; never raises."""
        if not verdict.accepted:
            return SandboxResult(REFUSED, verdict.reason or "not accepted by the guard")
        try:
            return self._run(verdict)
        except Exception as exc:  # noqa: BLE001 — nothing a statement does may stop the run
            return SandboxResult(SQL_ERROR, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def _run(self, verdict: Verdict) -> SandboxResult:
        with self._lock:
            fired = threading.Event()

            def stop() -> None:
                fired.set()
                self._con.interrupt()

            timer = threading.Timer(self.timeout_s, stop)
            start = time.perf_counter()
            timer.start()
            try:
                cur = self._con.execute(verdict.sql)
                desc = cur.description or []
                rows = cur.fetchmany(self.row_cap + 1)
            except duckdb.InterruptException:
                return SandboxResult(SQL_TIMEOUT, f"query exceeded {self.timeout_s:g}s time limit",
                                     elapsed_s=time.perf_counter() - start, tables=verdict.tables)
            except duckdb.Error as exc:
                if fired.is_set():
                    return SandboxResult(SQL_TIMEOUT, f"query exceeded {self.timeout_s:g}s time limit",
                                         elapsed_s=time.perf_counter() - start, tables=verdict.tables)
                text = str(exc).splitlines()
                return SandboxResult(SQL_ERROR, text[0] if text else type(exc).__name__,
                                     elapsed_s=time.perf_counter() - start, tables=verdict.tables)
            finally:
                timer.cancel()
            elapsed = time.perf_counter() - start
            columns = tuple(str(d[0]) for d in desc)
            types = tuple(str(d[1]) for d in desc)
            if len(rows) > self.row_cap:
                return SandboxResult(SQL_TOO_MANY_ROWS, f"more than {self.row_cap} rows", columns, types,
                                     rows[:self.row_cap], True, elapsed, verdict.tables, verdict.ordered)
            return SandboxResult("ok", None, columns, types, rows, False, elapsed, verdict.tables, verdict.ordered)
