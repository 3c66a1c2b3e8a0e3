"""Score one direct-SQL answer against a v2 gold by its rows: guarded, sandboxed, compared.

The model writes one DuckDB SELECT (bare or in a ```sql fence) or ``{"unanswerable": "reason"}``.
Rows are compared with the gold query's (normal executor) under :mod:`.equivalence`. The record has
:func:`nlq2sql.stages.query_score.query_record`'s keys plus ``answer: "sql"``, ``correct_lenient`` /
``error_lenient`` and the sandbox's facts."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import sqlglot

from nlq2sql.answers.sql.equivalence import compare, normalise_rows
from nlq2sql.answers.sql.guard import REFUSED, SQL_ERROR
from nlq2sql.answers.sql.sandbox import SQL_TIMEOUT, SQL_TOO_MANY_ROWS, Sandbox, SandboxResult
from nlq2sql.records.item import AnswerPart, ItemRecord, Judgement
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.contract import PARTS
from nlq2sql.semantic.query import MetricQuery
from nlq2sql.stages.execute import Executor, result_hash
from nlq2sql.stages.queryset import QueryCase
from nlq2sql.stages.score import RESULT_HEAD_ROWS

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["ANSWER_KIND", "ERROR_OF_STATUS", "SqlAnswer", "extract_sql", "gold_columns",
           "parse_sql_answer", "row_head", "run_sql_answer", "sql_answer_part", "sql_error_class",
           "sql_record"]

ANSWER_KIND = "sql"
UNANSWERABLE = "unanswerable"
HEAD_CELL_CHARS = 1000
#: error_final for a statement that did not give rows (the status itself for the others).
ERROR_OF_STATUS = {REFUSED: "refused", SQL_TIMEOUT: "timeout", SQL_ERROR: "exec_error",
                   SQL_TOO_MANY_ROWS: "too_many_rows"}
#: Words a SQL statement opens with: an answer opening otherwise is prose, not SQL (``unparsable``).
_STATEMENT_WORDS = frozenset((
    "select", "with", "from", "values", "table", "insert", "update", "delete", "merge", "truncate", "create",
    "drop", "alter", "attach", "detach", "copy", "install", "load", "pragma", "set", "reset", "call", "export",
    "import", "explain", "describe", "summarize", "show", "use", "begin", "start", "commit", "rollback", "abort",
    "checkpoint", "vacuum", "analyze", "prepare", "execute", "deallocate", "pivot", "unpivot"))
_FIRST_WORD = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*([^\W\d]\w*)?", re.S)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def extract_sql(text: str) -> str | None:
    """The statement in a model's text: the first ```sql (or ```duckdb, or plain ```) fenced block,
    else the whole text; trailing semicolons and whitespace dropped.  None when nothing is left."""
    t = text.strip()
    if "```" in t:
        blocks = _FENCE.findall(t)
        if not blocks:
            return None
        chosen = next((b for lang, b in blocks if lang.lower() in ("sql", "duckdb", "")), blocks[0][1])
        t = chosen.strip()
    while t.endswith(";"):
        t = t[:-1].rstrip()
    return t or None


def parse_sql_answer(text: str) -> tuple[str, str | None]:
    """(``"sql"``, statement) | (``"unanswerable"``, reason) | (``"unparsable"``, None)."""
    t = text.strip()
    if t.startswith("{"):
        try:
            obj = json.loads(t)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and set(obj) == {UNANSWERABLE} and isinstance(obj[UNANSWERABLE], str):
            return UNANSWERABLE, obj[UNANSWERABLE]
    sql = extract_sql(t)
    if sql is None:
        return "unparsable", None
    m = _FIRST_WORD.match(sql)
    word = (m.group(1) or "") if m else ""
    if word and word.isascii() and word.lower() not in _STATEMENT_WORDS:
        return "unparsable", None
    return "sql", sql


@lru_cache(maxsize=4096)
def gold_columns(sql: str) -> tuple[str, ...]:
    """The gold SQL's output column names (MetricFlow names them after metrics and group-bys)."""
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
        return tuple(str(n).lower() for n in getattr(tree, "named_selects", []))
    except Exception:  # noqa: BLE001 — unknown names only lose the tie rule, never the score
        return ()


def _tie_keys(gold: MetricQuery, columns: tuple[str, ...]) -> tuple[int, ...]:
    keys = [o.field.lower() for o in gold.order_by or ()]
    if not keys or any(k not in columns for k in keys):
        return ()
    return tuple(columns.index(k) for k in keys)


def _jsonable(v: object) -> JsonValue:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, str) and len(v) > HEAD_CELL_CHARS:
        return v[:HEAD_CELL_CHARS] + "…"
    return v


def row_head(rows: list[tuple[Any, ...]], ordered: bool) -> list[list[Any]]:
    """The first rows shown: in the statement's order, else sorted -- an unordered result comes back
    from DuckDB in any order, and a record must not depend on the run (or worker) that made it."""
    shown = rows if ordered else sorted(rows, key=repr)
    return [[_jsonable(c) for c in r] for r in shown[:RESULT_HEAD_ROWS]]


def _dump(q: MetricQuery | None) -> dict[str, Any]:
    return {"intent": q.kind, **q.model_dump(mode="json")} if q is not None else {"intent": UNANSWERABLE}


@dataclass(frozen=True)
class SqlAnswer:
    """A model's SQL answer read and run: what it was (``sql``, ``unanswerable``, ``unparsable``),
    the statement or abstention reason, the status, and the sandbox's result when it ran."""

    kind: str
    payload: str | None
    status: str
    reason: str | None
    res: SandboxResult | None

    @property
    def sql(self) -> str | None:
        return self.payload if self.kind == "sql" else None

    @property
    def rows(self) -> list[tuple[Any, ...]] | None:
        return self.res.rows if self.res is not None and self.res.ok else None


def run_sql_answer(raw_text: str | None, sandbox: Sandbox | None, db_path: str, timeout_s: float, *,
                   finish_reason: str | None = None, request_error: str | None = None) -> SqlAnswer:
    """Extract the statement, guard it, run it in ``sandbox`` (a temporary one over ``db_path``
    when None)."""
    status, reason = "ok", None
    kind, payload = ("unparsable", None)
    if request_error is not None:
        status, reason = "request_error", request_error
    else:
        kind, payload = parse_sql_answer(raw_text or "")
        if kind == "unparsable":
            status = "truncated" if finish_reason == "length" else "unparsable"
            reason = "no SQL statement in the answer (prose, or nothing)"
    res: SandboxResult | None = None
    if kind == "sql" and payload is not None:
        own = sandbox is None
        box = sandbox if sandbox is not None else Sandbox(db_path, timeout_s=timeout_s)
        try:
            res = box.execute(payload)
        finally:
            if own:
                box.close()
        if not res.ok:
            status, reason = res.status, res.reason
    return SqlAnswer(kind, payload, status, reason, res)


def sql_answer_part(a: SqlAnswer, raw_text: str | None, *, finish_reason: str | None, answer: str,
                    gold_ordered: bool) -> AnswerPart:
    """The record's answer part of a SQL answer (its hash in order only when both the gold and the
    statement order)."""
    sql, res = a.sql, a.res
    rows = a.rows
    norm = normalise_rows(rows) if rows is not None else None
    head_rows = res.rows if res is not None and res.rows is not None else None
    own_order = res is not None and res.ordered  # the guard's reading: the statement orders its rows
    raw_intent = ({"intent": ANSWER_KIND, "sql": sql} if a.kind == "sql"
                  else {"intent": UNANSWERABLE, UNANSWERABLE: a.payload} if a.kind == UNANSWERABLE else None)
    return AnswerPart(
        answer=answer, raw_text=raw_text, finish_reason=finish_reason, status=a.status, status_reason=a.reason,
        final_status=a.status, final_status_reason=a.reason, raw_intent=raw_intent,
        final_intent=None if raw_intent is None else dict(raw_intent),
        unanswerable=a.payload if a.kind == UNANSWERABLE else None, interventions=[],
        sql=sql, params=[] if sql is not None else None,
        exec_error=a.reason if a.status in ERROR_OF_STATUS else None,
        result_hash=result_hash(norm, ordered=gold_ordered and own_order) if norm is not None else None,
        result_rows=len(head_rows) if head_rows is not None else None,
        result_head=row_head(normalise_rows(head_rows), own_order) if head_rows is not None else None,
        result_columns=list(res.columns) if res is not None and res.rows is not None else None,
        result_truncated=bool(res.truncated) if res is not None else False,
        sql_exec_s=round(res.elapsed_s, 6) if res is not None else None)


def sql_record(case: QueryCase, raw_text: str | None, executor: Executor, catalog: Catalog, *,
               sandbox: Sandbox | None = None, finish_reason: str | None = None,
               request_error: str | None = None, answer: str = ANSWER_KIND) -> ItemRecord:
    """One item's record: extract the statement, guard it, run it in ``sandbox`` (a temporary one
    over ``executor``'s warehouse when None), compare its rows with the gold's.  ``answer`` is the
    arm recorded (``sql``, or ``sql-grammar`` when the grammar constrained the text)."""
    gold_q = catalog.engine.compile(case.gold) if case.gold is not None else None
    gold_rows = executor.run(gold_q) if gold_q is not None else None
    ordered = case.gold.ordered if case.gold is not None else False
    a = run_sql_answer(raw_text, sandbox, str(executor.path), executor.timeout_s, finish_reason=finish_reason,
                       request_error=request_error)
    res, rows, kind, status = a.res, a.rows, a.kind, a.status
    strict = lenient = False
    eq_error: str | None = None
    if case.gold is None:
        strict = lenient = kind == UNANSWERABLE
    elif rows is not None and gold_q is not None and gold_rows is not None:
        cols = gold_columns(gold_q.sql)
        eq = compare(rows, gold_rows, ordered=ordered, tie_keys=_tie_keys(case.gold, cols),
                     pred_width=len(res.columns) if res is not None else None,
                     gold_width=len(gold_rows[0]) if gold_rows else len(cols))
        strict, lenient, eq_error = eq.strict, eq.lenient, eq.error
    error = sql_error_class(status, case.gold is None, kind, strict, eq_error)
    error_lenient = None if lenient else error
    part = sql_answer_part(a, raw_text, finish_reason=finish_reason, answer=answer, gold_ordered=ordered)
    judgement = Judgement(
        answerable=case.answerable, gold_intent=_dump(case.gold), guardrail_scope=[],
        gold_result_head=row_head(gold_rows, ordered) if gold_rows is not None else None,
        gold_result_hash=executor.result_hash(gold_q, ordered=ordered) if gold_q is not None else None,
        gold_sql=gold_q.sql if gold_q is not None else None,
        gold_params=list(gold_q.params) if gold_q is not None else None, parts=None,
        correct_raw=strict, correct_final=strict, correct_exec=strict, correct_lenient=lenient,
        error_raw=error, error_final=error, error_lenient=error_lenient,
        wrong_fields_raw=list(PARTS) if case.gold is not None and not strict else [])
    return ItemRecord(id=case.id, question=case.question, category=case.category, pair_id=case.pair_id,
                      answer=part, judgement=judgement)


def sql_error_class(status: str, unanswerable: bool, kind: str, correct: bool, eq_error: str | None) -> str | None:
    """The error class of a SQL answer (None when correct)."""
    if correct:
        return None
    if status != "ok":
        return ERROR_OF_STATUS.get(status, status)
    if unanswerable:
        return "answered_unanswerable"
    if kind == UNANSWERABLE:
        return "false_abstention"
    return eq_error or "wrong_rows"
