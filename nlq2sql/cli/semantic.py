"""``nlq2sql semantic check|show|init`` and ``nlq2sql sql``: thin wrappers over stages.semantic_tools."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.markup import escape

from nlq2sql.cli._common import CLI_WAREHOUSE, DbOpt, SchemaOpt, SemanticModelOpt, app, dbt_options, err, handled
from nlq2sql.errors import InputError
from nlq2sql.inputs import option_text
from nlq2sql.semantic import Warehouse, open_warehouse
from nlq2sql.semantic.project import Problem, SemanticProblems
from nlq2sql.stages.semantic_tools import (
    CheckReport,
    QueryCheck,
    check,
    dumps,
    init_yaml,
    show,
    show_text,
    slowest,
    sql_for,
)

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["ROW_FORMATS", "semantic_app", "semantic_check", "semantic_init", "semantic_show", "sql_cmd",
           "write_rows"]

semantic_app = typer.Typer(help="Semantic models (dbt Semantic Layer YAML): check, show, init.",
                           no_args_is_help=True)
app.add_typer(semantic_app, name="semantic")


@semantic_app.command("check")
@handled
@dbt_options
def semantic_check(path: Annotated[str, typer.Argument(help="Semantic model: shipped name, YAML file/folder or "
                                                       "dbt's target/semantic_manifest.json.")],
                   db: DbOpt = None,
                   as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON (each query's "
                                                         "seconds too).")] = False,
                   query_timeout: Annotated[float | None, typer.Option(
                       "--query-timeout", min=0.001, metavar="S",
                       help="Each query's time limit in seconds (default 10, as every other command's); one "
                       "that runs past it is reported as slow, not as a failure.")] = None,
                   dbt: Any = None) -> None:
    """Load, check against the data, and execute one query per metric × dimension, with progress
    on stderr; exit 2 on a failed query or a data problem.  A query past --query-timeout is slow,
    not failed: listed with a warning, exit 0 when nothing failed.  Data problems are listed with
    what they exclude (other commands use the rest)."""

    wh = open_warehouse(path, db, dbt=dbt, validate=False)
    if wh.catalog.spine_note:  # said before the data's problems
        err.print(f"note: {escape(wh.catalog.spine_note)}", highlight=False, soft_wrap=True)
    wh.bind()
    report = _check_with_progress(wh, query_timeout, check)
    if as_json:
        sys.stdout.write(dumps(report) + "\n")
    for f in report.failed:
        err.print(f"{escape(f.metric)} × {escape(f.dimension)}: {escape(str(f.error))}", highlight=False)
    _say_slow(report)
    if wh.data_problems:
        excluded = wh.catalog.excluded
        err.print(f"{len(excluded)} objects are excluded by every other command (they use the rest of the layer: "
                  f"{report.metrics} metrics, {report.dimensions} dimensions):", highlight=False, soft_wrap=True)
        for ex in excluded:
            err.print(f"  excluded {escape(ex.object)}: {escape(ex.reason)}", highlight=False, soft_wrap=True)
        failed = ([Problem(wh.catalog.path, None, None, f"{len(report.failed)} of {report.queries} queries on the "
                           "rest of the layer failed")] if report.failed else [])
        raise SemanticProblems([*(p.problem for p in wh.data_problems), *failed])
    if report.failed:
        raise InputError(f"{len(report.failed)} of {report.queries} queries failed", path=wh.catalog.path)
    if not as_json:
        slow = f", {len(report.slow)} slow" if report.slow else ""
        Console().print(f"{wh.catalog.path}: valid for MetricFlow; {report.metrics} metrics × "
                        f"{report.dimensions} dimensions OK{slow}; {report.queries} queries ran on {wh.db_path.name} "
                        f"in {report.seconds:.1f} s ({report.compiles} compiles); time spine: {report.time_spine}; "
                        f"saved queries: {len(report.saved_queries)}", highlight=False)


def _check_with_progress(wh: Warehouse, timeout_s: float | None,
                         check: Callable[..., CheckReport]) -> CheckReport:
    """``check`` with its progress on stderr: a bar on a terminal, else nothing until one line at
    the end (queries, seconds, the slowest few), so a log holds one line, not a bar's frames."""

    if err.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("checking queries"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=err, transient=True) as bar:
            task = bar.add_task("", total=None)

            def step(done: int, total: int, r: QueryCheck) -> None:
                bar.update(task, completed=done, total=total, description=f"{r.metric} × {r.dimension}")

            report = check(wh, timeout_s=timeout_s, progress=step)
    else:
        report = check(wh, timeout_s=timeout_s)
    top = ", ".join(f"{r.metric} × {r.dimension} {r.seconds:.2f} s" for r in slowest(report) if r.seconds > 0)
    err.print(f"{report.queries} queries in {report.seconds:.1f} s" + (f"; slowest: {escape(top)}" if top else ""),
              highlight=False, soft_wrap=True)
    return report


def _say_slow(report: CheckReport) -> None:
    """Each slow query with the limit it ran past, and how to give it more time."""
    if not report.slow:
        return
    limit = report.query_timeout_s
    err.print(f"warning: {len(report.slow)} of {report.queries} queries ran past the {limit:g} s limit (slow, not "
              f"failed; give them more time with --query-timeout {max(limit * 6, 60):g}):", highlight=False,
              soft_wrap=True)
    for r in report.slow:
        err.print(f"  slow {escape(r.metric)} × {escape(r.dimension)}: did not finish in {limit:g} s",
                  highlight=False, soft_wrap=True)


@semantic_app.command("show")
@handled
@dbt_options
def semantic_show(semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None,
                  schema: SchemaOpt = "flat",
                  as_json: Annotated[bool, typer.Option("--json", help="Print everything as JSON: every group-by "
                                                        "name, known values, the JSON Schemas and the regex sent "
                                                        "to the server.")] = False, dbt: Any = None) -> None:
    """List the metrics (labels, the group-by names each reaches), dimensions with known values,
    saved queries and years; --json for the full report."""

    report = show(open_warehouse(semantic_model, db, dbt=dbt), schema)
    sys.stdout.write(dumps(report) + "\n" if as_json else show_text(report))


@semantic_app.command("init")
@handled
def semantic_init(db: Annotated[Path, typer.Option("--db", help="DuckDB file to describe.")],
                  out: Annotated[Path | None, typer.Option(help="Write the YAML here (default: stdout).")] = None,
                  force: Annotated[bool, typer.Option(help="Overwrite --out.")] = False) -> None:
    """Write a starting semantic model from a database's tables and columns, to edit."""
    from nlq2sql.records.store import write_text_atomic  # deferred: 30-60 ms of pydantic models off sql's start-up

    if not db.is_file():
        raise InputError("no such database file", path=str(db), field="--db")
    if out is not None and out.is_dir():
        raise InputError("is a directory; give a file name for the YAML", path=str(out), field="--out")
    if out is not None and out.exists() and not force:
        raise InputError("exists; pass --force to overwrite", path=str(out), field="--out")
    text = init_yaml(db)
    if out is None:
        sys.stdout.write(text)
    else:
        write_text_atomic(out, text)  # nothing half-written, no temp file left
        Console().print(f"wrote {out}")


def _exact(value: object) -> object:
    """A value JSON cannot hold (Decimal, date), printed exactly as DuckDB returned it: no rounding."""
    return str(value)


@app.command("sql")
@handled
@dbt_options
def sql_cmd(intent: Annotated[str, typer.Option("--intent", help="The query as JSON text (or @FILE): a v2 "
                                                "MetricFlow query {\"metrics\": [...], \"group_by\": [...]} or a "
                                                "v1 intent.")],
            semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None,
            execute: Annotated[bool, typer.Option(help="Run it: the rows go to stdout (see --format), the SQL "
                                                  "only with --show-sql, to stderr.")] = False,
            format: Annotated[str, typer.Option("--format", help="With --execute: jsonl (one JSON object per "
                                                "row, keyed by column) | csv (a header line, then the "
                                                "rows).")] = "jsonl",
            show_sql: Annotated[bool, typer.Option("--show-sql", help="With --execute: also print the SQL and its "
                                                   "parameters, to stderr.")] = False,
            dbt: Any = None) -> None:
    """Print the SQL and bound parameters for one query; with --execute, its result rows instead
    (stdout holds only the rows, so `| jq` or a CSV reader takes them)."""

    if format not in ROW_FORMATS:
        raise InputError(f"unknown format {format!r} (known: {', '.join(ROW_FORMATS)})", field="--format")
    if not execute and format != "jsonl":
        raise InputError("the rows' format applies with --execute (without it the SQL is printed)", field="--format")
    intent = option_text(intent, "--intent")  # @FILE: a regular file only (a FIFO would block forever)
    res = sql_for(open_warehouse(semantic_model, db, dbt=dbt), intent, execute=execute)
    if not execute or show_sql:
        _write_sql(sys.stderr if execute else sys.stdout, res.sql, res.params)
    if execute:
        write_rows(sys.stdout, list(res.columns or ()), res.rows or [], format)


#: ``sql --execute --format``: how the rows are written.
ROW_FORMATS = ("jsonl", "csv")


def _write_sql(out: TextIO, sql: str, params: list[JsonValue]) -> None:
    import json

    out.write(sql + ";\n")
    out.write("-- params: " + json.dumps(params, default=str) + "\n")


def write_rows(out: TextIO, columns: list[str], rows: list[list[Any]], fmt: str) -> None:
    """Rows as JSON lines (an object per row, keyed by column) or CSV (a header, then the rows;
    NULL as an empty field); a value JSON cannot hold is written exactly as DuckDB gave it."""
    import json

    if fmt == "csv":
        import csv

        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        w.writerows([["" if v is None else v if isinstance(v, int | float | str) else _exact(v) for v in row]
                     for row in rows])
        return
    for row in rows:
        out.write(json.dumps(dict(zip(columns, row, strict=True)), default=_exact) + "\n")
