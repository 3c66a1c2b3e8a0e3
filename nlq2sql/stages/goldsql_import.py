"""``nlq2sql evalset import``: question files of common formats → a gold-SQL set (:mod:`.goldsql`).

Formats (``auto`` picks by extension and columns): ``csv`` / ``jsonl`` (``--question-col``,
``--sql-col``, optional ``--id-col``, ``--category-col``); ``spider`` / ``bird`` (a JSON list;
``--db-id`` keeps one database; BIRD's ``evidence`` is appended as ``Hint: …``, its ``difficulty``
is a tag); ``defog`` (sql-eval's CSV; ``;``-separated statements and ``{a, b}`` columns become
alternatives as sql-eval expands them). ``--dialect`` (sqlglot's names) transpiles golds to DuckDB,
by default ``sqlite`` for Spider/BIRD, ``postgres`` for defog, none for CSV/JSONL; the original is
kept as ``source_sql``. Ids: the id column, else ``<db_id or file stem>-<n>`` by source position
(stable under ``--db-id``). Every problem of the source is reported at once (line, column)."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlglot

from nlq2sql.errors import EvalSetError, EvalSetProblems
from nlq2sql.inputs import read_text
from nlq2sql.stages.evalset import CATEGORY, ID_MAX_LENGTH
from nlq2sql.stages.goldsql import MAX_ALTERNATIVES, GoldSqlLine

__all__ = ["FORMATS", "ImportOptions", "defog_alternatives", "import_gold_sql", "render_lines"]

FORMATS = ("auto", "csv", "jsonl", "spider", "bird", "defog")
_DEFAULT_DIALECT = {"spider": "sqlite", "bird": "sqlite", "defog": "postgres"}
_DEFOG_COLUMNS = ("question", "query", "db_name", "query_category")
_BRACES = re.compile(r"\{([^{}]*)\}")
#: A source item as read (CSV row, JSON object), and a set line as written.
JsonObject = dict[str, Any]


@dataclass(frozen=True)
class ImportOptions:
    fmt: str = "auto"
    question_col: str = "question"
    sql_col: str = "sql"
    id_col: str | None = None
    category_col: str | None = None
    db_id: str | None = None
    dialect: str | None = None


@dataclass(frozen=True)
class _Row:
    line: int  # where the item starts in the source (JSON lists: the item's index, 1-based)
    n: int  # position among the source's items (1-based)
    values: JsonObject


def _split_statements(sql: str) -> list[str]:
    """Statements separated by ``;`` outside quotes."""
    out, buf, quote = [], [], ""
    for ch in sql:
        if quote:
            buf.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        if ch == ";":
            out.append("".join(buf))
            buf = []
            continue
        buf.append(ch)
    out.append("".join(buf))
    return [s.strip() for s in out if s.strip()]


def defog_alternatives(sql: str) -> list[str]:
    """sql-eval's gold → its acceptable statements: one per ``;``-separated statement, and for the first
    ``{a, b, …}`` in each, one per non-empty subset of the braced columns (``GROUP BY {}`` the same)."""
    out: list[str] = []
    for stmt in _split_statements(sql):
        m = _BRACES.search(stmt)
        if m is None or not m.group(1).strip():
            out.append(stmt)
            continue
        options = [o.strip() for o in m.group(1).split(",") if o.strip()]
        for r in range(1, len(options) + 1):
            for combo in itertools.combinations(options, r):
                cols = ", ".join(combo)
                right = stmt[m.end():].replace("GROUP BY {}", f"GROUP BY {cols}")
                out.append(stmt[:m.start()] + cols + right)
    return list(dict.fromkeys(out))


def _detect(path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return "jsonl"
    if suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError:
            return "spider"  # reported by the reader
        first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
        return "bird" if "SQL" in first else "spider"
    try:
        header = next(csv.reader(io.StringIO(text)), [])
    except csv.Error:  # reported, with its line, by the reader
        return "csv"
    return "defog" if all(c in header for c in _DEFOG_COLUMNS) else "csv"


def _csv_rows(text: str, where: str, needed: list[str], problems: list[EvalSetError]) -> list[_Row]:
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:  # a header CSV cannot read (a field past the csv module's limit, a NUL)
        problems.append(EvalSetError(f"not CSV: {exc}", path=where, line=1))
        return []
    missing = [c for c in needed if c not in header]
    for c in missing:
        problems.append(EvalSetError(f"no column {c!r} (columns: {', '.join(header) or 'none'})", path=where, line=1,
                                     field=c))
    if missing:
        return []
    rows: list[_Row] = []
    start = reader.line_num + 1
    try:
        for n, rec in enumerate(reader, start=1):
            rows.append(_Row(start, n, dict(rec)))
            start = reader.line_num + 1
    except csv.Error as exc:  # the rest of the file cannot be read as CSV: said with the line it stopped at
        problems.append(EvalSetError(f"not CSV: {exc}", path=where, line=reader.line_num or start))
    return rows


def _jsonl_rows(text: str, where: str, problems: list[EvalSetError]) -> list[_Row]:
    rows: list[_Row] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            problems.append(EvalSetError(f"not JSON: {exc}", path=where, line=lineno))
            continue
        if not isinstance(obj, dict):
            problems.append(EvalSetError("not a JSON object", path=where, line=lineno))
            continue
        rows.append(_Row(lineno, len(rows) + 1, obj))
    return rows


def _json_list_rows(text: str, where: str, problems: list[EvalSetError]) -> list[_Row]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        problems.append(EvalSetError(f"not JSON: {exc}", path=where))
        return []
    if not isinstance(data, list):
        problems.append(EvalSetError("a Spider/BIRD file is a JSON list of items", path=where))
        return []
    rows: list[_Row] = []
    for i, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            problems.append(EvalSetError(f"item {i} is not a JSON object", path=where, line=i))
            continue
        rows.append(_Row(i, i, obj))
    return rows


def _text(v: object) -> str:
    return "" if v is None else str(v).strip()


def _transpile(sql: str, dialect: str | None) -> str:
    if dialect is None or dialect == "duckdb":
        return sql
    out = sqlglot.transpile(sql, read=dialect, write="duckdb")
    if len(out) != 1:
        raise ValueError(f"{len(out)} statements (one SELECT per gold)")
    return out[0]


def import_gold_sql(path: Path, opts: ImportOptions) -> list[JsonObject]:
    """The gold-SQL set's lines (as dicts, in the set's key order) read from ``path``; every problem of
    the source at once (:class:`~nlq2sql.errors.EvalSetProblems`, each with line and column)."""
    if opts.fmt not in FORMATS:
        raise EvalSetError(f"unknown format {opts.fmt!r} (known: {', '.join(FORMATS)})", field="--format")
    text = read_text(path, "question file")
    where = str(path)
    fmt = _detect(path, text) if opts.fmt == "auto" else opts.fmt
    dialect = opts.dialect if opts.dialect is not None else _DEFAULT_DIALECT.get(fmt)
    if dialect is not None:
        try:
            sqlglot.Dialect.get_or_raise(dialect)
        except ValueError:
            raise EvalSetError(f"unknown SQL dialect {dialect!r} (sqlglot's names: postgres, sqlite, mysql, "
                               "bigquery, snowflake, …)", field="--dialect") from None
    problems: list[EvalSetError] = []
    q_col, sql_col, db_col, cat_col = opts.question_col, opts.sql_col, None, opts.category_col
    if fmt == "csv":
        needed = [c for c in (q_col, sql_col, opts.id_col, cat_col) if c]
        rows = _csv_rows(text, where, needed, problems)
    elif fmt == "defog":
        q_col, sql_col, db_col, cat_col = "question", "query", "db_name", cat_col or "query_category"
        rows = _csv_rows(text, where, list(_DEFOG_COLUMNS), problems)
    elif fmt == "jsonl":
        rows = _jsonl_rows(text, where, problems)
    else:
        q_col, db_col = "question", "db_id"
        sql_col = "SQL" if fmt == "bird" else "query"
        rows = _json_list_rows(text, where, problems)
    lines: list[JsonObject] = []
    seen: dict[str, int] = {}
    for row in rows:
        v = row.values
        db = _text(v.get(db_col)) if db_col else ""
        if opts.db_id is not None and db != opts.db_id:
            continue
        before = len(problems)

        def bad(msg: str, col: str | None, row: _Row = row) -> None:
            problems.append(EvalSetError(msg, path=where, line=row.line, field=col))

        question = _text(v.get(q_col))
        if fmt == "bird" and _text(v.get("evidence")):
            question = f"{question}\nHint: {_text(v.get('evidence'))}"
        source = _text(v.get(sql_col))
        if not question:
            bad("no question", q_col)
        if not source:
            bad("no SQL", sql_col)
        rid = _text(v.get(opts.id_col)) if opts.id_col else ""
        if opts.id_col and not rid:
            bad("no id", opts.id_col)
        if not rid:
            rid = f"{db or path.stem}-{row.n:04d}"
            if fmt == "bird" and _text(v.get("question_id")):
                rid = f"{db or path.stem}-{_text(v.get('question_id'))}"
        if len(rid) > ID_MAX_LENGTH:
            bad(f"id longer than {ID_MAX_LENGTH} characters", opts.id_col or "id")
        category = _text(v.get(cat_col)) if cat_col else ""
        if category and not CATEGORY.match(category):
            bad(f"category {category!r} must be a short label (letters, digits, _ . -)", cat_col)
        sources = defog_alternatives(source) if fmt == "defog" and source else [source] if source else []
        if len(sources) > MAX_ALTERNATIVES:
            bad(f"{len(sources)} acceptable statements (at most {MAX_ALTERNATIVES})", sql_col)
        golds: list[str] = []
        for s in sources:
            try:
                golds.append(_transpile(s, dialect))
            except Exception as exc:  # noqa: BLE001 — sqlglot's parse and unsupported errors alike
                bad(f"cannot read as {dialect} SQL: {str(exc).splitlines()[0][:200]}", sql_col)
                break
        if rid in seen:
            bad(f"duplicate id {rid!r} (first on line {seen[rid]})", opts.id_col or "id")
        if len(problems) > before:
            continue
        seen[rid] = row.line
        line: JsonObject = {"id": rid, "question": question, "gold_sql": golds[0] if len(golds) == 1 else golds}
        if category:
            line["category"] = category
        if fmt == "bird" and _text(v.get("difficulty")):
            line["tags"] = [f"difficulty:{_text(v.get('difficulty'))}"]
        if dialect not in (None, "duckdb"):
            line["source_sql"] = source
            line["source_dialect"] = dialect
        try:
            GoldSqlLine.model_validate(line)
        except Exception as exc:  # noqa: BLE001 — pydantic's message names the field
            bad(str(exc).splitlines()[-1].strip()[:200], sql_col)
            continue
        lines.append(line)
    if not lines and not problems:
        problems.append(EvalSetError("no items" + (f" with db_id {opts.db_id!r}" if opts.db_id else ""), path=where))
    if problems:
        raise EvalSetProblems(problems, where)
    return lines


def render_lines(lines: list[JsonObject]) -> str:
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
