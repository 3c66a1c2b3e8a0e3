"""Score any answer kind against gold SQL by its rows; check a gold-SQL set against its warehouse.

Golds run in the SQL arm's sandbox (guarded, read-only, same limits, ``search_path`` set to the
layer's schemas), each distinct statement once; every answer kind is scored against those rows (SQL
in the same sandbox, queries and intents through the harness's executor). **The column rule**
(:data:`COLUMN_RULE`, recorded in records, summary and manifest): right when every gold column
appears among the answer's (by values; names ignored, extras allowed) and the rows are the gold's,
in order only when ``ordered``. With alternatives ANY may match; ``gold_alternative`` names the first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nlq2sql.answers.sql.equivalence import compare, normalise_rows
from nlq2sql.answers.sql.guard import REFUSED
from nlq2sql.answers.sql.sandbox import SQL_TOO_MANY_ROWS, Sandbox, SandboxResult
from nlq2sql.answers.sql.score import (
    ERROR_OF_STATUS,
    UNANSWERABLE,
    row_head,
    run_sql_answer,
    sql_answer_part,
    sql_error_class,
)
from nlq2sql.errors import ExecutionError, SqlBuildError
from nlq2sql.records.item import AnswerPart, ItemRecord, Judgement
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.contract import parse_answer
from nlq2sql.semantic.query import MetricQuery, Unanswerable
from nlq2sql.stages.execute import Executor, result_hash
from nlq2sql.stages.goldsql import GoldSqlCase, GoldSqlSet, tie_columns
from nlq2sql.stages.guardrail import RuleSet, apply_all
from nlq2sql.stages.intent import STATUS_OK, Intent, canonicalise, parse_intent
from nlq2sql.stages.query_guard import apply_query_guardrails
from nlq2sql.stages.query_score import query_record
from nlq2sql.stages.queryset import QueryCase
from nlq2sql.stages.score import intent_record, parse_or_status, run_intent

__all__ = ["COLUMN_RULE", "COLUMN_RULE_TEXT", "GOLD_ERROR", "GoldAnswer", "GoldProblem", "GoldReader", "GoldRunner",
           "check_gold_sql_set", "gold_sql_record", "read_intent_answer", "read_query_answer", "read_sql_answer"]

#: The column rule's name, as records, summaries and manifests carry it.
COLUMN_RULE = "gold_columns_within_answer"
COLUMN_RULE_TEXT = ("every gold column appears among the answer's columns (matched by values, names ignored, "
                    "extra answer columns allowed); rows compared as a multiset unless the item is ordered")
#: error class of an item whose gold SQL failed when scored (``evalset check`` finds these first).
GOLD_ERROR = "gold_error"
Row = tuple[Any, ...]


class GoldRunner:
    """Runs gold SQL in one sandbox, each distinct statement once (its result kept)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._memo: dict[str, SandboxResult] = {}

    def result(self, sql: str) -> SandboxResult:
        hit = self._memo.get(sql)
        if hit is None:
            hit = self._memo[sql] = self.sandbox.execute(sql)
        return hit


@dataclass(frozen=True)
class GoldProblem:
    """One gold statement that cannot serve: which item, which alternative (0-based), why."""

    id: str
    alternative: int
    problem: str

    def __str__(self) -> str:
        which = f" (alternative {self.alternative + 1})" if self.alternative else ""
        return f"{self.id}{which}: {self.problem}"


def _problem(res: SandboxResult) -> str | None:
    if res.status == REFUSED:
        return f"not a single read-only SELECT over the warehouse: {res.reason}"
    if res.status == SQL_TOO_MANY_ROWS:
        return f"returns {res.reason} (the row cap): its rows would be cut"
    if not res.ok:
        return f"fails: {res.reason}"
    if not res.rows:
        return "returns no rows (an empty gold cannot tell a right answer from a wrong one)"
    return None


def check_gold_sql_set(gs: GoldSqlSet, golds: GoldRunner) -> list[GoldProblem]:
    """Every gold statement of the set run in the sandbox: those that are refused by the guard (not
    one read-only SELECT), fail (DuckDB's message), time out, pass the row cap or return no rows --
    all of them."""
    problems: list[GoldProblem] = []
    for case in gs.cases:
        for i, sql in enumerate(case.gold_sql or ()):
            problem = _problem(golds.result(sql))
            if problem is not None:
                problems.append(GoldProblem(case.id, i, problem))
    return problems


@dataclass
class GoldAnswer:
    """An answer of any kind reduced to what its judgement needs."""

    part: AnswerPart
    kind: str  # "rows" (ran), "unanswerable" (abstained), "none" (nothing ran)
    status: str
    rows: list[Row] | None
    width: int | None
    raw_rows: list[Row] | None  # the answer before guardrails (the same when none changed it)
    raw_width: int | None
    changed: bool  # a guardrail changed the answer


class GoldReader(Protocol):
    """An answer kind's reading of its answer to a gold-SQL item (``AnswerKind.gold_read``)."""

    def __call__(self, case: GoldSqlCase, raw_text: str | None, *, golds: GoldRunner, executor: Executor,
                 catalog: Catalog, rulesets: Sequence[RuleSet], finish_reason: str | None,
                 request_error: str | None) -> GoldAnswer: ...


def read_sql_answer(raw_text: str | None, golds: GoldRunner, answer: str, ordered: bool, finish_reason: str | None,
                request_error: str | None) -> GoldAnswer:
    box = golds.sandbox
    a = run_sql_answer(raw_text, box, box.path, box.timeout_s, finish_reason=finish_reason,
                       request_error=request_error)
    part = sql_answer_part(a, raw_text, finish_reason=finish_reason, answer=answer, gold_ordered=ordered)
    width = len(a.res.columns) if a.res is not None and a.rows is not None else None
    kind = UNANSWERABLE if a.kind == UNANSWERABLE else "rows" if a.rows is not None else "none"
    return GoldAnswer(part, kind, a.status, a.rows, width, a.rows, width, False)


def _width(rows: list[Row] | None) -> int | None:
    return len(rows[0]) if rows else None


def read_query_answer(case: GoldSqlCase, raw_text: str | None, executor: Executor, catalog: Catalog,
                  rulesets: Sequence[RuleSet], finish_reason: str | None, request_error: str | None) -> GoldAnswer:
    shell = QueryCase(id=case.id, question=case.question, gold=None, answerable=False, category=case.category,
                      pair_id=case.pair_id)
    part = query_record(shell, raw_text, executor, catalog, finish_reason=finish_reason, request_error=request_error,
                        rulesets=rulesets).answer
    pred: MetricQuery | Unanswerable | None
    pred, status, _ = parse_or_status(lambda t: parse_answer(t, catalog), raw_text, finish_reason, request_error)
    final = pred
    changed = False
    if isinstance(pred, MetricQuery) and rulesets:
        final, found = apply_query_guardrails(list(rulesets), pred, case.question, catalog)
        changed = bool(found)

    def rows_of(q: object) -> list[Row] | None:
        if not isinstance(q, MetricQuery):
            return None
        try:
            return executor.run(catalog.engine.compile(q))
        except (SqlBuildError, ExecutionError):
            return None

    rows = rows_of(final)
    raw_rows = rows_of(pred) if changed else rows
    kind = UNANSWERABLE if isinstance(final, Unanswerable) else "rows" if rows is not None else "none"
    if kind == "none" and status == STATUS_OK and isinstance(final, MetricQuery):
        status = str(part.final_status or "exec_error")
    return GoldAnswer(part, kind, status, rows, _width(rows), raw_rows, _width(raw_rows), changed)


def read_intent_answer(case: GoldSqlCase, raw_text: str | None, executor: Executor, catalog: Catalog,
                   rulesets: Sequence[RuleSet], finish_reason: str | None, request_error: str | None) -> GoldAnswer:
    rec = intent_record(case.id, case.question, raw_text, list(rulesets), executor, gold=None, catalog=catalog,
                        category=case.category, pair_id=case.pair_id, finish_reason=finish_reason,
                        request_error=request_error)
    part = rec.answer
    raw, status, _ = parse_or_status(lambda t: parse_intent(t, catalog), raw_text, finish_reason, request_error)
    final = raw
    changed = False
    if raw is not None:
        final, found = apply_all(list(rulesets), raw, case.question)
        changed = bool(found)

    def rows_of(intent: Intent | None) -> list[Row] | None:
        if intent is None:
            return None
        try:
            return run_intent(canonicalise(intent), catalog, executor)[3]
        except Exception:  # noqa: BLE001 — an intent that cannot be built is a wrong answer, recorded as such
            return None

    final_status = str(part.final_status) if part.final_status is not None else status
    rows = rows_of(final) if final_status == STATUS_OK else None
    raw_rows = (rows_of(raw) if status == STATUS_OK else None) if changed else rows
    kind = "rows" if rows is not None else "none"
    if kind == "none" and final_status == STATUS_OK:
        final_status = "exec_error"
    return GoldAnswer(part, kind, final_status, rows, _width(rows), raw_rows, _width(raw_rows), changed)


def _match(rows: list[Row] | None, width: int | None, golds: list[tuple[str, SandboxResult]], ordered: bool
           ) -> tuple[int | None, str | None]:
    """(the first alternative the rows match under the column rule, else None; why not, for the first)."""
    if rows is None:
        return None, None
    why: str | None = None
    for i, (sql, g) in enumerate(golds):
        if not g.ok or g.rows is None:
            continue
        eq = compare(rows, g.rows, ordered=ordered, tie_keys=tie_columns(sql) if ordered else (),
                     pred_width=width, gold_width=len(g.columns))
        if eq.lenient:
            return i, None
        why = why or eq.error
    return None, why or "wrong_rows"


def _error(a: GoldAnswer, unanswerable: bool, correct: bool, why: str | None, gold_ok: bool) -> str | None:
    if correct:
        return None
    if a.status != STATUS_OK:
        return ERROR_OF_STATUS.get(a.status, a.status)
    if unanswerable:
        return "answered_unanswerable"
    if a.kind == UNANSWERABLE:
        return "false_abstention"
    if not gold_ok:
        return GOLD_ERROR
    return sql_error_class(a.status, False, "sql", False, why)


def gold_sql_record(case: GoldSqlCase, raw_text: str | None, *, answer: str, read: GoldReader, executor: Executor,
                    catalog: Catalog, golds: GoldRunner, rulesets: Sequence[RuleSet] = (),
                    finish_reason: str | None = None, request_error: str | None = None) -> ItemRecord:
    """One item's record: the answer (of kind ``answer``, reduced to rows by ``read``: the kind's
    ``gold_read``, ``answers.kinds``) matched against the gold SQL's rows under :data:`COLUMN_RULE`;
    an unanswerable item is right when the model abstained."""
    a = read(case, raw_text, golds=golds, executor=executor, catalog=catalog, rulesets=rulesets,
             finish_reason=finish_reason, request_error=request_error)
    gold_runs = [(sql, golds.result(sql)) for sql in case.gold_sql or ()]
    gold_ok = any(g.ok and g.rows is not None for _, g in gold_runs)
    if case.gold_sql is None:
        match, why = None, None
        correct = a.kind == UNANSWERABLE
        correct_raw = correct
    else:
        match, why = _match(a.rows, a.width, gold_runs, case.ordered)
        correct = match is not None
        correct_raw = (_match(a.raw_rows, a.raw_width, gold_runs, case.ordered)[0] is not None) if a.changed \
            else correct
    error = _error(a, case.gold_sql is None, correct, why, gold_ok)
    error_raw = error if not a.changed else (None if correct_raw else error or "wrong_rows")
    for d in a.part.interventions or []:
        d["correct"] = correct
    shown_i = match if match is not None else 0
    shown = gold_runs[shown_i] if gold_runs else None
    g_rows = normalise_rows(shown[1].rows) if shown is not None and shown[1].rows is not None else None
    judgement = Judgement(
        answerable=case.answerable,
        gold_intent=({"intent": "gold_sql", "gold_sql": list(case.gold_sql), "ordered": case.ordered}
                     if case.gold_sql is not None else {"intent": UNANSWERABLE}),
        guardrail_scope=[],
        gold_result_head=row_head(g_rows, case.ordered) if g_rows is not None else None,
        gold_result_hash=result_hash(g_rows, ordered=case.ordered) if g_rows is not None else None,
        gold_sql=shown[0] if shown is not None else None, gold_params=[] if shown is not None else None,
        parts=None, correct_raw=correct_raw, correct_final=correct, correct_exec=correct, correct_lenient=correct,
        error_raw=error_raw, error_final=error, error_lenient=error, wrong_fields_raw=[],
        column_rule=COLUMN_RULE, gold_alternative=match)
    return ItemRecord(id=case.id, question=case.question, category=case.category, pair_id=case.pair_id,
                      answer=a.part, judgement=judgement)
