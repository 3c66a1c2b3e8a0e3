"""Score one v2 answer (a MetricFlow query, or an abstention) against a v2 gold, by rows.

Correct: the rows equal the gold's (order compared only when the gold orders), or, for a question the
layer cannot answer, the model abstained. The record (:func:`query_record`) has a v1 record's keys,
so summary, viewer, ``compare`` and ``gate`` read it unchanged, plus per-part agreement (``parts``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nlq2sql.errors import ExecutionError, SqlBuildError
from nlq2sql.records.item import AnswerPart, ItemRecord, Judgement
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.contract import PARTS, parse_answer, part_matches
from nlq2sql.semantic.query import MetricQuery, Unanswerable
from nlq2sql.stages.execute import Executor, Row
from nlq2sql.stages.guardrail import Intervention, RuleSet
from nlq2sql.stages.query_guard import apply_query_guardrails, intervention_correct, query_scope
from nlq2sql.stages.queryset import QueryCase
from nlq2sql.stages.score import RESULT_HEAD_ROWS, parse_or_status

if TYPE_CHECKING:
    from nlq2sql.semantic.engine import Query

__all__ = ["ANSWER_KIND", "UNANSWERABLE", "query_record"]

ANSWER_KIND = "query"
UNANSWERABLE = "unanswerable"


def _dump(q: MetricQuery | Unanswerable | None) -> dict[str, Any] | None:
    if q is None:
        return None
    if isinstance(q, Unanswerable):
        return {"intent": UNANSWERABLE, "unanswerable": q.unanswerable}
    return {"intent": q.kind, **q.model_dump(mode="json")}


def _head(rows: list[Any], ordered: bool) -> list[list[Any]]:
    """The first rows shown: in the query's order, else sorted -- DuckDB returns an unordered
    query's rows in any order, and a record must not depend on the run (or worker) that made it."""
    return [list(r) for r in (rows if ordered else sorted(rows, key=repr))[:RESULT_HEAD_ROWS]]


def _error(status: str, pred: MetricQuery | Unanswerable | None, case: QueryCase, correct: bool,
           failed: str | None, parts: dict[str, bool] | None) -> str | None:
    if correct:
        return None
    if status != "ok":
        return status
    if case.gold is None:
        return "answered_unanswerable"
    if isinstance(pred, Unanswerable):
        return "false_abstention"
    if failed is not None:
        return failed
    wrong = [p for p in PARTS if parts is not None and not parts[p]]
    return f"wrong_{wrong[0]}" if wrong else "wrong_rows"


def _run(q: MetricQuery, executor: Executor, catalog: Catalog
         ) -> tuple[Query | None, list[Row] | None, str | None, str | None]:
    """A query compiled (MetricFlow) and executed: (compiled, rows, failure class, error)."""
    try:
        compiled = catalog.engine.compile(q)
    except SqlBuildError as exc:
        return None, None, "compile_error", str(exc)
    try:
        return compiled, executor.run(compiled), None, None
    except ExecutionError as exc:  # e.g. a value DuckDB cannot cast ("2025" for a date)
        return compiled, None, "exec_error", str(exc)


def query_record(case: QueryCase, raw_text: str | None, executor: Executor, catalog: Catalog, *,
                 finish_reason: str | None = None, request_error: str | None = None,
                 rulesets: Sequence[RuleSet] = ()) -> ItemRecord:
    """One item's record: parse, guardrails (on the query: :mod:`.query_guard`), compile
    (MetricFlow), execute, compare rows with the gold's; the raw answer is judged too when a rule
    changed it."""
    rules = list(rulesets)
    pred: MetricQuery | Unanswerable | None
    pred, status, reason = parse_or_status(lambda t: parse_answer(t, catalog), raw_text, finish_reason,
                                           request_error)
    final: MetricQuery | Unanswerable | None = pred
    found: list[Intervention] = []
    if isinstance(pred, MetricQuery) and rules:
        final, found = apply_query_guardrails(rules, pred, case.question, catalog)
    gold_q = catalog.engine.compile(case.gold) if case.gold is not None else None
    gold_rows = executor.run(gold_q) if gold_q is not None else None
    ordered = case.gold.ordered if case.gold is not None else False
    q, sql, rows, failed, exec_error = None, None, None, None, None
    if isinstance(final, MetricQuery):
        sql, rows, failed, exec_error = _run(final, executor, catalog)
        q = sql if failed is None else None  # only a query that ran is compared, hashed and shown

    def right(query: Query | None) -> bool:
        if case.gold is None:
            return isinstance(pred, Unanswerable)
        return query is not None and gold_q is not None and executor.same_result(query, gold_q, ordered=ordered)

    correct = right(q)
    correct_raw, error_raw = correct, None
    if found:  # the model's own answer, before the rules: judged the same way
        assert isinstance(pred, MetricQuery)
        raw_sql, _, raw_failed, _ = _run(pred, executor, catalog)
        correct_raw = raw_failed is None and right(raw_sql)
        raw_parts = part_matches(pred, case.gold) if case.gold is not None else None
        error_raw = _error(status, pred, case, correct_raw, raw_failed, raw_parts)
    parts = part_matches(pred, case.gold) if isinstance(pred, MetricQuery) and case.gold is not None else None
    final_parts = (part_matches(final, case.gold) if found and isinstance(final, MetricQuery)
                   and case.gold is not None else parts)
    error = _error(status, final, case, correct, failed, final_parts)
    if not found:
        error_raw = error
    gold_dump = _dump(case.gold) or {"intent": UNANSWERABLE}
    pred_dump = _dump(pred)
    final_dump = _dump(final)
    ivs, scope = [], []
    if found or (isinstance(pred, MetricQuery) and rules and case.gold is not None):
        assert isinstance(pred, MetricQuery)
        for iv in found:
            ivs.append(iv.as_dict() | {"correct": case.gold is not None and intervention_correct(
                iv, final if isinstance(final, MetricQuery) and failed is None else None, case.gold, catalog, rules)})
        if case.gold is not None:
            scope = query_scope(rules, pred, case.gold, catalog)
    answer = AnswerPart(
        answer=ANSWER_KIND, raw_text=raw_text, finish_reason=finish_reason,
        status=status, status_reason=reason, final_status=status if failed is None else failed,
        final_status_reason=reason if failed is None else exec_error,
        raw_intent=pred_dump, final_intent=None if final_dump is None else dict(final_dump),
        unanswerable=pred.unanswerable if isinstance(pred, Unanswerable) else None, interventions=ivs,
        sql=sql.sql if sql is not None else None, params=list(sql.params) if sql is not None else None,
        exec_error=exec_error,
        result_hash=(executor.result_hash(q, ordered=ordered and isinstance(final, MetricQuery) and final.ordered)
                     if q is not None else None),  # an unordered answer's rows come in any order
        result_rows=len(rows) if rows is not None else None,
        result_head=_head(rows, isinstance(final, MetricQuery) and final.ordered) if rows is not None else None)
    judgement = Judgement(
        answerable=case.answerable, gold_intent=gold_dump, guardrail_scope=scope,
        gold_result_head=_head(gold_rows, ordered) if gold_rows is not None else None,
        gold_result_hash=executor.result_hash(gold_q, ordered=ordered) if gold_q is not None else None,
        gold_sql=gold_q.sql if gold_q is not None else None,  # (the viewer shows it beside the answer's)
        parts=parts, correct_raw=correct_raw, correct_final=correct, correct_exec=correct,
        error_raw=error_raw, error_final=error,
        wrong_fields_raw=[p for p in PARTS if parts is not None and not parts[p]] if parts is not None
        else (list(PARTS) if case.gold is not None and not correct_raw else []))
    return ItemRecord(id=case.id, question=case.question, category=case.category, pair_id=case.pair_id,
                      answer=answer, judgement=judgement)
