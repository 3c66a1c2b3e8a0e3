"""Per-item scoring, and the statistics summaries and reports share (the summary: :mod:`.summary`).

Raw accuracy: canonical raw intent == canonical gold (unparseable, invalid or failed count wrong);
final accuracy: the same after guardrails. Intervention precision: interventions whose changed
fields all equal gold ÷ interventions; recall per rule: correct interventions ÷ items in the rule's
scope class. Execution accuracy: the final intent's rows == the gold's (Spider-style)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from nlq2sql.errors import ExecutionError, IntentError, SqlBuildError
from nlq2sql.records.item import AnswerPart, ItemRecord, Judgement
from nlq2sql.records.summary_parts import Percentiles, Rate
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.engine import Query
from nlq2sql.stages.evalset import EvalCase
from nlq2sql.stages.execute import Executor, Row
from nlq2sql.stages.guardrail import Intervention, RuleSet, apply_all
from nlq2sql.stages.intent import (
    FIELDS,
    STATUS_INCONSISTENT,
    STATUS_OK,
    Intent,
    canonicalise,
    consistency_problem,
    is_ordered,
    parse_intent,
)
from nlq2sql.stages.sqlbuild import build_sql

if TYPE_CHECKING:
    from nlq2sql.semantic.query import Value

__all__ = ["RESULT_HEAD_ROWS", "TAXONOMY", "TIMING_KEYS", "case_record", "error_class", "mcnemar_exact",
           "parse_or_status", "intent_record", "rate", "run_intent", "spread", "wrong_fields"]

T = TypeVar("T")

#: Primary error classes, most basic first.
TAXONOMY = ("request_error", "truncated", "invalid_json", "schema_invalid", "inconsistent",
            "false_ranking", "false_breakdown", "wrong_intent", "wrong_metric", "wrong_dimension",
            "wrong_time_grain", "wrong_filters", "wrong_limit", "wrong_order")


def _diff(p: dict[str, Any], g: dict[str, Any]) -> list[str]:
    return [f for f in FIELDS if p[f] != g[f]]


def wrong_fields(pred: Intent, gold: Intent) -> list[str]:
    """Fields of two canonical intents that differ."""
    return _diff(pred.model_dump(mode="json"), gold.model_dump(mode="json"))


def _classify(status: str, pred: dict[str, Any] | None, gold: dict[str, Any]) -> str | None:
    """:func:`error_class` on dumped intents."""
    if status != STATUS_OK or pred is None:
        return status
    diff = _diff(pred, gold)
    if not diff:
        return None
    if "intent" in diff:
        if pred["intent"] == "top_n_by_metric" and gold["intent"] == "breakdown":
            return "false_ranking"
        if pred["intent"] == "breakdown" and gold["intent"] == "top_n_by_metric":
            return "false_breakdown"
        return "wrong_intent"
    return f"wrong_{diff[0]}"


def error_class(status: str, pred: Intent | None, gold: Intent) -> str | None:
    """Primary taxonomy label of one answer; None when correct."""
    if status != STATUS_OK or pred is None:
        return status
    return _classify(status, pred.model_dump(mode="json"), gold.model_dump(mode="json"))


def _copy_dump(dump: dict[str, Any] | None) -> dict[str, Any] | None:
    """An independent copy of an intent dump (records never share nested objects)."""
    return None if dump is None else {**dump, "filters": [dict(f) for f in dump["filters"]]}


def _status_of(intent: Intent | None, status: str) -> tuple[str, str | None]:
    if intent is None:
        return status, None
    problem = consistency_problem(intent)
    return (STATUS_INCONSISTENT, problem) if problem else (STATUS_OK, None)


def parse_or_status(parse: Callable[[str], T], raw_text: str | None, finish_reason: str | None,
                    request_error: str | None) -> tuple[T | None, str, str | None]:
    """The answer parsed, or why not: ``request_error`` when the request failed, the parser's
    status otherwise (``truncated`` when the reply was cut at max_tokens).  Every scorer starts here."""
    if request_error is not None:
        return None, "request_error", request_error
    try:
        return parse(raw_text or ""), STATUS_OK, None
    except IntentError as exc:
        return None, ("truncated" if finish_reason == "length" else exc.status), exc.reason


def run_intent(intent: Intent | None, catalog: Catalog, executor: Executor
               ) -> tuple[str | None, list[Value] | None, Query | None, list[Row] | None, str | None]:
    """A canonical intent compiled and executed: (sql, params, query, rows, error).  A build failure
    leaves everything but the error None; an execution failure keeps the SQL that failed (the record
    shows it) but not the query; no intent, nothing."""
    if intent is None:
        return None, None, None, None, None
    sql, params = None, None
    try:
        q = build_sql(intent, catalog)
        sql, params = q.sql, list(q.params)
        return sql, params, q, executor.run(q), None
    except (SqlBuildError, ExecutionError) as exc:
        return sql, params, None, None, str(exc)


def case_record(case: EvalCase, raw_text: str | None, rulesets: list[RuleSet], executor: Executor,
                *, catalog: Catalog, finish_reason: str | None = None,
                request_error: str | None = None) -> ItemRecord:
    """Score one raw model answer to an eval-set case (parse, guardrail, build, execute, compare):
    :func:`intent_record` with the case's id, question, gold, category and pair."""
    return intent_record(case.id, case.question, raw_text, rulesets, executor, gold=case.gold,
                         category=case.category, pair_id=case.pair_id, finish_reason=finish_reason,
                         request_error=request_error, catalog=catalog)


def intent_record(item_id: str, question: str, raw_text: str | None, rulesets: list[RuleSet],
                  executor: Executor, *, gold: Intent | None, catalog: Catalog, category: str | None = None,
                  pair_id: str | None = None, finish_reason: str | None = None,
                  request_error: str | None = None) -> ItemRecord:
    """One v1 item's record, scored or not: parse, guardrail, build, execute -- and, when the item
    has a ``gold``, compare (its :class:`Judgement`; without one the record carries
    :data:`~nlq2sql.records.item.UNSCORED`).  ``catalog`` is the warehouse's semantic model
    (required: there is no default warehouse); ``executor`` runs on its database."""
    raw, status, reason = parse_or_status(lambda t: parse_intent(t, catalog), raw_text, finish_reason, request_error)
    if raw is not None:
        status, reason = _status_of(raw, status)

    final: Intent | None = raw
    interventions: list[Intervention] = []
    if raw is not None:
        final, interventions = apply_all(rulesets, raw, question)
    final_status, final_reason = _status_of(final, status) if raw is not None else (status, reason)

    raw_c = canonicalise(raw) if raw is not None and status == STATUS_OK else None
    final_c = canonicalise(final) if final is not None and final_status == STATUS_OK else None

    gold_c = canonicalise(gold) if gold is not None else None
    gold_q = build_sql(gold_c, catalog) if gold_c is not None else None
    if gold_q is not None:
        executor.run(gold_q)  # (the gold first, as always: its rows are then the executor's to reuse)
    sql, params, q, rows, exec_error = run_intent(final_c, catalog, executor)
    ordered = is_ordered(gold_c) if gold_c is not None else final_c is not None and is_ordered(final_c)

    # Each intent is dumped once; canonicalise returns an already canonical intent itself.
    raw_dump = raw.model_dump(mode="json") if raw is not None else None
    final_dump = raw_dump if final is raw else final.model_dump(mode="json") if final is not None else None
    answer = AnswerPart(
        raw_text=raw_text, finish_reason=finish_reason, status=status, status_reason=reason,
        final_status=final_status, final_status_reason=final_reason, raw_intent=raw_dump,
        final_intent=_copy_dump(final_dump) if final_dump is raw_dump else final_dump,
        interventions=[iv.as_dict() for iv in interventions], sql=sql, params=params, exec_error=exec_error,
        result_hash=executor.result_hash(q, ordered=ordered) if q is not None else None,
        result_rows=len(rows) if rows is not None else None,
        # The first rows of both results, so a reader (or `nlq2sql view`) sees *how* they differ.
        result_head=[list(r) for r in rows[:RESULT_HEAD_ROWS]] if rows is not None else None)
    judgement: Judgement | None = None
    if gold_c is not None and gold_q is not None:
        gold_dump = gold_c.model_dump(mode="json")
        raw_c_dump = None if raw_c is None else raw_dump if raw_c is raw else raw_c.model_dump(mode="json")
        final_c_dump = (None if final_c is None else final_dump if final_c is final
                        else final_c.model_dump(mode="json"))
        # Which rules could have helped this item (for recall), and were their changes right?
        scope: list[str] = []
        if raw_dump is not None:
            for rs in rulesets:
                scope += rs.scope(raw_dump, gold_dump)
        for iv, d in zip(interventions, answer.interventions or [], strict=True):
            d["correct"] = final_c_dump is not None and all(final_c_dump[f] == gold_dump[f] for f in iv.fields)
        judgement = Judgement(
            gold_intent=gold_dump, guardrail_scope=scope,
            gold_result_head=[list(r) for r in executor.run(gold_q)[:RESULT_HEAD_ROWS]],
            gold_result_hash=executor.result_hash(gold_q, ordered=ordered),
            # Dumps of two intents are equal exactly when the intents are (all values are plain).
            correct_raw=raw_c_dump is not None and raw_c_dump == gold_dump,
            correct_final=final_c_dump is not None and final_c_dump == gold_dump,
            correct_exec=q is not None and executor.same_result(q, gold_q, ordered=ordered),
            error_raw=_classify(status, raw_c_dump, gold_dump),
            error_final=_classify(final_status, final_c_dump, gold_dump),
            wrong_fields_raw=_diff(raw_c_dump, gold_dump) if raw_c_dump is not None else list(FIELDS))
    else:
        for d in answer.interventions or []:
            d["correct"] = None
    return ItemRecord(id=item_id, question=question, category=category, pair_id=pair_id, answer=answer,
                      judgement=judgement)


def rate(k: int, n: int) -> Rate:
    """Proportion with its 95 % Wilson interval and the counts behind it."""
    if n == 0:
        return Rate(value=None, k=0, n=0, ci95=None)
    from scipy.stats import binomtest  # (imported when a summary is made: scoring an item needs none)

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return Rate(value=k / n, k=k, n=n, ci95=[round(ci.low, 4), round(ci.high, 4)])


def mcnemar_exact(b: int, c: int) -> float:
    """Exact McNemar p-value from the two discordant counts (b: A right/B wrong, c: reverse)."""
    from scipy.stats import binomtest

    return 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5).pvalue)


def spread(values: list[float]) -> Percentiles:
    """p50/p95/p99/mean with the sample count; empty → not observed (never zero)."""
    if not values:
        return Percentiles(n=0, mean=None, p50=None, p95=None, p99=None)
    arr = np.asarray(values, dtype=float)
    p50, p95, p99 = (float(np.percentile(arr, q)) for q in (50, 95, 99))
    return Percentiles(n=int(arr.size), mean=float(arr.mean()), p50=p50, p95=p95, p99=p99)


#: Rows of the result and of the gold result kept in each record.
RESULT_HEAD_ROWS = 5

#: The request's timings and tokens the summary gives percentiles of (the conditions add their own
#: costs: ``stages.abstention.ConditionTraces.timing_keys``).
TIMING_KEYS = ("latency_s", "ttft_s", "completion_tokens", "prompt_tokens", "itl_mean_s")
