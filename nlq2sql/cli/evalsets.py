"""``nlq2sql evalset check|upgrade|import``: an eval set against its warehouse, a v1 set restated as v2,
and a question file with gold SQL (CSV, JSONL, Spider, BIRD, defog) turned into a gold-SQL set."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from nlq2sql.answers.sql.gold import GoldRunner, check_gold_sql_set
from nlq2sql.answers.sql.sandbox import Sandbox
from nlq2sql.cli._common import CLI_WAREHOUSE, DbOpt, SearchPathOpt, SemanticModelOpt, app, dbt_options, err, handled
from nlq2sql.errors import EvalSetError, InputError, Problems
from nlq2sql.inputs import parse_json, read_text
from nlq2sql.records.store import write_text_atomic
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.evalset import gold_kind, resolve_path, scan_evalset
from nlq2sql.stages.goldsql import is_gold_sql_set, load_gold_sql_set, parse_search_path, resolve_search_path
from nlq2sql.stages.goldsql_import import ImportOptions, import_gold_sql, render_lines
from nlq2sql.stages.pipeline import check_evalset, make_executor
from nlq2sql.stages.queryset import check_query_set, scan_query_set, upgrade_v1_set

if TYPE_CHECKING:
    from nlq2sql.semantic.binding import Warehouse

__all__ = ["evalset_app", "evalset_check", "evalset_import", "evalset_upgrade"]

evalset_app = typer.Typer(help="Eval sets.", no_args_is_help=True)
app.add_typer(evalset_app, name="evalset")


def _is_v2_set(path: str, warehouse_name: str) -> bool:
    """A set whose first line that is a JSON object has a v2 gold (a MetricFlow query, or null:
    unanswerable) is a v2 set (:func:`~nlq2sql.stages.evalset.gold_kind`)."""

    p = resolve_path(path, warehouse_name)
    for n, text in enumerate(read_text(p, "eval set").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            obj = parse_json(text, path=str(p), line=n)
        except (InputError, ValueError):
            continue  # the loader reports the line with its own message
        if isinstance(obj, dict):
            return gold_kind(obj) == "v2"
    return False


def _check_query_set(path: str, wh: Warehouse) -> None:
    problems = Problems(str(resolve_path(path, wh.catalog.name)))
    qs = scan_query_set(path, wh.catalog, problems)
    with make_executor(wh) as ex:
        failed = check_query_set(qs, wh.catalog, ex, wh)
    line = dict(zip((c.id for c in qs.cases), qs.lines, strict=True))
    for p in failed:
        problems.add(EvalSetError(p.problem, path=qs.path, line=line[p.id], field="gold"))
    problems.raise_any()
    unanswerable = sum(1 for c in qs.cases if c.gold is None)
    Console().print(f"{qs.path}: {len(qs.cases)} v2 items OK ({unanswerable} unanswerable); every gold "
                    f"compiles with MetricFlow on {wh.name!r} and returns rows")


def _check_gold_sql_set(path: str, wh: Warehouse, search_path: tuple[str, ...] | None) -> None:
    gs = load_gold_sql_set(path, wh.name)
    schemas = resolve_search_path(wh.catalog.manifest, search_path)
    with Sandbox(wh.db_path, search_path=schemas) as box:
        problems = check_gold_sql_set(gs, GoldRunner(box))
    for p in problems:
        err.print(f"{gs.path}: {escape(str(p))}", highlight=False, soft_wrap=True)
    if problems:
        raise InputError(f"{len(problems)} gold SQL statement(s) fail, are refused or return no rows on warehouse "
                         f"{wh.name!r} (search path {','.join(schemas)})", path=gs.path)
    unanswerable = sum(1 for c in gs.cases if c.gold_sql is None)
    alternatives = sum(len(c.gold_sql or ()) for c in gs.cases)
    cats: dict[str, int] = {}
    for c in gs.cases:
        cats[c.category] = cats.get(c.category, 0) + 1
    Console().print(f"{gs.path}: {len(gs.cases)} gold-SQL items OK ({', '.join(f'{k} {v}' for k, v in cats.items())}"
                    f"; {unanswerable} unanswerable); all {alternatives} gold statements run read-only in the "
                    f"sandbox on {wh.name!r} (search path {','.join(schemas)}) and return rows", highlight=False)


@evalset_app.command("check")
@handled
@dbt_options
def evalset_check(path: Annotated[str, typer.Argument(help="Eval set name or JSONL path.")],
                  semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None,
                  search_path: SearchPathOpt = None, dbt: Any = None) -> None:
    """Validate a question file against a warehouse, reporting every problem at once (file:line:
    field each; exit 2).  Reads all three formats (documented with a JSON Schema each in
    docs/evalsets.md): v1 (gold intent), v2 (gold MetricFlow query or null) and gold SQL.  Checks
    every line, id and gold against the layer's names (with the closest ones), that every gold
    compiles, executes and returns rows, and that filter values occur in the data (with the known
    values).  A gold-SQL set's statements run read-only in the SQL arm's sandbox."""

    schemas = parse_search_path(search_path) if search_path is not None else None
    wh = open_warehouse(semantic_model, db, dbt=dbt, announce=False)
    if wh.catalog.excluded:  # the golds are checked against the rest: say what that leaves out
        names = ", ".join(e.object for e in wh.catalog.excluded)
        err.print(f"note: {len(wh.catalog.excluded)} objects excluded for data problems ({escape(names)}); the golds "
                  "are checked against the rest of the layer; see `nlq2sql semantic check`", highlight=False,
                  soft_wrap=True)
    if is_gold_sql_set(path, wh.name):
        return _check_gold_sql_set(path, wh, schemas)
    if _is_v2_set(path, wh.catalog.name):
        return _check_query_set(path, wh)
    problems = Problems(str(resolve_path(path, wh.catalog.name)))
    es, lines = scan_evalset(path, wh, problems)
    report = check_evalset(es, wh)
    line = dict(zip((c.id for c in es.cases), lines, strict=True))
    for cid, why in report.failures:
        problems.add(EvalSetError(why, path=es.path, line=line[cid], field="gold"))
    problems.raise_any()
    cats: dict[str, int] = {}
    for c in es.cases:
        cats[c.category] = cats.get(c.category, 0) + 1
    Console().print(f"{es.path}: {len(es.cases)} items OK ({', '.join(f'{k} {v}' for k, v in cats.items())}); "
                    f"every gold intent executes on {wh.name!r} and returns rows")


@evalset_app.command("upgrade")
@handled
@dbt_options
def evalset_upgrade(path: Annotated[str, typer.Argument(help="A v1 eval set: name or JSONL path.")],
                    out: Annotated[Path, typer.Option(help="Write the v2 set here (JSONL).")],
                    semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None,
                    force: Annotated[bool, typer.Option(help="Overwrite --out.")] = False, dbt: Any = None) -> None:
    """Restate a v1 set's golds as MetricFlow queries (v2), each checked to return the rows its v1
    gold returns; any difference is reported (every one) and nothing is written."""

    if out.is_dir():
        raise InputError("is a directory; give a file name for the set", path=str(out), field="--out")
    if out.exists() and not force:
        raise InputError("exists; pass --force to overwrite", path=str(out), field="--out")
    wh = open_warehouse(semantic_model, db, dbt=dbt)
    if _is_v2_set(path, wh.catalog.name):
        raise InputError("is already a v2 set (its golds are MetricFlow queries)", path=path)

    if is_gold_sql_set(path, wh.name):
        raise InputError("is a gold-SQL set (its golds are SQL, scored by rows in every answer kind)", path=path)
    with make_executor(wh) as ex:
        up = upgrade_v1_set(path, wh, ex)
    for problem in up.problems:
        err.print(f"{up.path}: {escape(problem)}", highlight=False, soft_wrap=True)
    if up.problems:
        raise InputError(f"{len(up.problems)} gold(s) do not return their v1 rows as v2 queries; nothing written",
                         path=up.path)
    write_text_atomic(out, "".join(line + "\n" for line in up.lines))
    Console().print(f"wrote {out}: {len(up.lines)} v2 items, each returning its v1 gold's rows "
                    f"({up.ordered} compared in order)", highlight=False)


@evalset_app.command("import")
@handled
def evalset_import(
    source: Annotated[Path, typer.Argument(help="The question file: CSV, JSONL, Spider/BIRD JSON or defog's "
                                           "sql-eval CSV.")],
    out: Annotated[Path, typer.Option(help="Write the gold-SQL set here (JSONL).")],
    fmt: Annotated[str, typer.Option("--format", help="auto | csv | jsonl | spider | bird | defog (auto: by "
                                     "extension and columns).")] = "auto",
    question_col: Annotated[str, typer.Option(help="CSV/JSONL: the question column.")] = "question",
    sql_col: Annotated[str, typer.Option(help="CSV/JSONL: the gold SQL column.")] = "sql",
    id_col: Annotated[str | None, typer.Option(help="CSV/JSONL: the id column (default: <stem>-<n>).")] = None,
    category_col: Annotated[str | None, typer.Option(help="CSV/JSONL: the category column (default: derived "
                                                     "from the SQL).")] = None,
    db_id: Annotated[str | None, typer.Option(help="Spider/BIRD: keep items of this db_id; defog: of this "
                                              "db_name.")] = None,
    dialect: Annotated[str | None, typer.Option(help="Transpile the gold SQL from this dialect to DuckDB "
                                                "(sqlglot's names). Default: sqlite for Spider/BIRD, postgres "
                                                "for defog, none for CSV/JSONL.")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite --out.")] = False,
) -> None:
    """Convert a question file whose answers are SQL into a gold-SQL eval set (every problem of the
    source at once; nothing written unless all is well)."""

    if out.is_dir():
        raise InputError("is a directory; give a file name for the set", path=str(out), field="--out")
    if out.exists() and not force:
        raise InputError("exists; pass --force to overwrite", path=str(out), field="--out")
    lines = import_gold_sql(source, ImportOptions(fmt=fmt, question_col=question_col, sql_col=sql_col, id_col=id_col,
                                                  category_col=category_col, db_id=db_id, dialect=dialect))
    write_text_atomic(out, render_lines(lines))
    alts = sum(1 for ln in lines if isinstance(ln["gold_sql"], list))
    Console().print(f"wrote {out}: {len(lines)} gold-SQL items ({alts} with alternatives); check them with "
                    f"'nlq2sql evalset check {out} --semantic-model … --db …'", highlight=False)
