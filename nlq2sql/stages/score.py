"""Per-item scoring and streaming summary metrics.

Definitions (also in the README):
- raw accuracy: canonical raw intent == canonical gold (unparseable, schema-invalid,
  inconsistent or failed requests count as wrong); final accuracy: the same after guardrails.
- interventions: items a guardrail changed; precision = interventions after which every
  changed field equals gold ÷ interventions; recall per rule = correct interventions ÷ items
  in the rule's scope class (raw value in its from-values, gold value equal to its to-value).
- execution accuracy: the final intent's result rows == the gold result rows (Spider-style).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np

from nlq2sql.errors import ExecutionError, IntentError, SqlBuildError
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.stages.abstention import kind_share
from nlq2sql.stages.evalset import EvalCase
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.guardrail import Intervention, RuleSet, apply_all
from nlq2sql.stages.intent import (
    FIELDS,
    INTENTS,
    STATUS_INCONSISTENT,
    STATUS_OK,
    Intent,
    canonicalise,
    consistency_problem,
    is_ordered,
    parse_intent,
)
from nlq2sql.stages.sqlbuild import build_sql

__all__ = ["PENDING_MAX", "RESULT_HEAD_ROWS", "TAXONOMY", "TIMING_KEYS", "Summary", "confidence", "error_class",
           "mcnemar_exact", "percentiles", "score_item", "wilson", "wrong_fields"]

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


def score_item(case: EvalCase, raw_text: str | None, rulesets: list[RuleSet], executor: Executor,
               *, finish_reason: str | None = None, request_error: str | None = None,
               catalog: Catalog | None = None) -> dict[str, Any]:
    """Score one raw model answer: parse, guardrail, build, execute, compare.

    ``catalog`` is the warehouse's semantic model (default ``retail``); ``executor`` runs on
    its database.
    """
    gold = canonicalise(case.gold)
    raw: Intent | None = None
    status, reason = STATUS_OK, None
    if request_error is not None:
        status, reason = "request_error", request_error
    else:
        try:
            raw = parse_intent(raw_text or "", catalog)
        except IntentError as exc:
            status, reason = exc.status, exc.reason
            if finish_reason == "length":
                status = "truncated"
    if raw is not None:
        status, reason = _status_of(raw, status)

    final: Intent | None = raw
    interventions: list[Intervention] = []
    if raw is not None:
        final, interventions = apply_all(rulesets, raw, case.question)
    final_status, final_reason = _status_of(final, status) if raw is not None else (status, reason)

    raw_c = canonicalise(raw) if raw is not None and status == STATUS_OK else None
    final_c = canonicalise(final) if final is not None and final_status == STATUS_OK else None

    gold_q = build_sql(gold, catalog)
    executor.run(gold_q)
    ordered = is_ordered(gold)
    sql, params, q, rows, exec_error = None, None, None, None, None
    if final_c is not None:
        try:
            q = build_sql(final_c, catalog)
            sql, params = q.sql, list(q.params)
            rows = executor.run(q)
        except (SqlBuildError, ExecutionError) as exc:
            q, exec_error = None, str(exc)

    # Each intent is dumped once; canonicalise returns an already canonical intent itself.
    gold_dump = gold.model_dump(mode="json")
    raw_dump = raw.model_dump(mode="json") if raw is not None else None
    final_dump = raw_dump if final is raw else final.model_dump(mode="json") if final is not None else None
    raw_c_dump = None if raw_c is None else raw_dump if raw_c is raw else raw_c.model_dump(mode="json")
    final_c_dump = (None if final_c is None else final_dump if final_c is final
                    else final_c.model_dump(mode="json"))

    # Which rules could have helped this item (for recall), and were their changes right?
    scope: list[str] = []
    if raw_dump is not None:
        for rs in rulesets:
            scope += rs.scope(raw_dump, gold_dump)
    ivs = []
    for iv in interventions:
        d = iv.as_dict()
        d["correct"] = final_c_dump is not None and all(final_c_dump[f] == gold_dump[f] for f in iv.fields)
        ivs.append(d)

    return {
        "id": case.id, "question": case.question, "category": case.category,
        "pair_id": case.pair_id, "gold_intent": gold_dump,
        "raw_text": raw_text, "finish_reason": finish_reason,
        "status": status, "status_reason": reason,
        "final_status": final_status, "final_status_reason": final_reason,
        "raw_intent": raw_dump,
        "final_intent": _copy_dump(final_dump) if final_dump is raw_dump else final_dump,
        "interventions": ivs, "guardrail_scope": scope,
        "sql": sql, "params": params, "exec_error": exec_error,
        "result_hash": executor.result_hash(q, ordered=ordered) if q is not None else None,
        "result_rows": len(rows) if rows is not None else None,
        # The first rows of both results, so a reader (or `nlq2sql view`) sees *how* they differ.
        "result_head": [list(r) for r in rows[:RESULT_HEAD_ROWS]] if rows is not None else None,
        "gold_result_head": [list(r) for r in executor.run(gold_q)[:RESULT_HEAD_ROWS]],
        "gold_result_hash": executor.result_hash(gold_q, ordered=ordered),
        # Dumps of two intents are equal exactly when the intents are (all values are plain).
        "correct_raw": raw_c_dump is not None and raw_c_dump == gold_dump,
        "correct_final": final_c_dump is not None and final_c_dump == gold_dump,
        "correct_exec": q is not None and executor.same_result(q, gold_q, ordered=ordered),
        "error_raw": _classify(status, raw_c_dump, gold_dump),
        "error_final": _classify(final_status, final_c_dump, gold_dump),
        "wrong_fields_raw": _diff(raw_c_dump, gold_dump) if raw_c_dump is not None else list(FIELDS),
    }


def wilson(k: int, n: int) -> dict[str, Any]:
    """Proportion with its 95 % Wilson interval and the counts behind it."""
    if n == 0:
        return {"value": None, "k": 0, "n": 0, "ci95": None}
    from scipy.stats import binomtest  # (imported when a summary is made: scoring an item needs none)

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return {"value": k / n, "k": k, "n": n, "ci95": [round(ci.low, 4), round(ci.high, 4)]}


def mcnemar_exact(b: int, c: int) -> float:
    """Exact McNemar p-value from the two discordant counts (b: A right/B wrong, c: reverse)."""
    from scipy.stats import binomtest

    return 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5).pvalue)


def percentiles(values: list[float]) -> dict[str, Any]:
    """p50/p95/p99/mean with the sample count; empty → not observed (never zero)."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "mean": None}
    arr = np.asarray(values, dtype=float)
    return {"n": int(arr.size), "mean": float(arr.mean()),
            **{f"p{q}": float(np.percentile(arr, q)) for q in (50, 95, 99)}}


#: Rows of the result and of the gold result kept in each record.
RESULT_HEAD_ROWS = 5

#: Distinct records :meth:`Summary.add_shared` tallies before adding them (bounded).
PENDING_MAX = 4096

TIMING_KEYS = ("latency_s", "ttft_s", "completion_tokens", "prompt_tokens", "itl_mean_s",
               # the two-stage planner's first request, and both stages together (when recorded)
               "planner_latency_s", "planner_completion_tokens", "planner_prompt_tokens", "latency_total_s",
               "requests", "samples_completion_tokens")


def confidence(rec: dict[str, Any]) -> float:
    """The item's confidence for the coverage-accuracy curve: its vote share under
    self-consistency, else its intent-token confidence, else 1 (nothing said otherwise)."""
    votes = rec.get("votes")
    if votes:
        return round(float(votes["share"]), 4)
    ev = rec.get("intent_evidence")
    if ev:  # the model's share on the kind answered (a guardrail may have changed it)
        return round(kind_share(ev, (rec.get("final_intent") or {}).get("intent")), 2)
    return 1.0


class Summary:
    """Streaming aggregation of records: memory grows with classes, not with items."""

    def __init__(self, rulesets: list[RuleSet], fields: tuple[str, ...] = FIELDS) -> None:
        self.rule_ids = [r.id for rs in rulesets for r in rs.rules]
        self.fields = fields  # the answer's parts: the v1 intent's fields, or the v2 query's
        self.empty_gold_ids: list[str] = []
        self.n = 0
        self.c: Counter[str] = Counter()
        self.status: Counter[str] = Counter()
        self.errors_raw: Counter[str] = Counter()
        self.errors_final: Counter[str] = Counter()
        self.finish: Counter[str] = Counter()
        self.gold_intents: Counter[str] = Counter()
        self.pairs: Counter[tuple[str, str]] = Counter()
        self.field_wrong: Counter[str] = Counter()
        self.rule_fired: Counter[str] = Counter()
        self.rule_correct: Counter[str] = Counter()
        self.rule_scope: Counter[str] = Counter()
        self.rule_scope_correct: Counter[str] = Counter()
        self.cat: dict[str, Counter[str]] = defaultdict(Counter)
        self.timing: dict[str, list[float]] = defaultdict(list)
        # selective prediction (``--abstain``): (confidence, answered, answer correct) → items
        self.selective: Counter[tuple[float, bool, bool]] = Counter()
        # --abstain-below items whose request succeeded but carried no logprobs: not judged
        self.no_evidence = 0
        # add_shared's tally, id(rec) → [rec, times], first seen first: counted in (n and every
        # table) when flushed -- by add, field_ok and result.
        self._pending: dict[int, list[Any]] = {}

    def add(self, rec: dict[str, Any]) -> None:
        """Count one record."""
        if self._pending:
            self._flush()
        self._add(rec, 1)

    def add_shared(self, rec: dict[str, Any]) -> None:
        """Count one record that may be passed again as the same object (re-scoring's
        remembered records, :class:`nlq2sql.stages.rescore.RecordMemo`): the same figures as :meth:`add`.

        Each distinct object is added once, with its count, in the order first seen -- which
        also keeps the order of keys in every table (first seen first).  A record with
        timings is added at once: timing samples keep their order.
        """
        entry = self._pending.get(id(rec))
        if entry is not None:
            entry[1] += 1
            return
        if any(key in rec for key in TIMING_KEYS):
            self.add(rec)
            return
        if len(self._pending) >= PENDING_MAX:
            self._flush()
        self._pending[id(rec)] = [rec, 1]  # holds rec, so its id() is not reused meanwhile

    def _flush(self) -> None:
        for rec, times in self._pending.values():
            self._add(rec, times)
        self._pending.clear()

    def _add(self, rec: dict[str, Any], times: int) -> None:
        self.n += times
        c = self.c
        correct_raw, correct_final = bool(rec["correct_raw"]) * times, bool(rec["correct_final"]) * times
        c["correct_raw"] += correct_raw
        c["correct_final"] += correct_final
        c["correct_exec"] += bool(rec["correct_exec"]) * times
        raw_intent = rec["raw_intent"]
        c["schema_valid"] += (raw_intent is not None) * times
        ivs = rec["interventions"]
        if ivs:
            c["intervened"] += times
            c["intervened_correct"] += all(iv["correct"] for iv in ivs) * times
            for iv in ivs:
                self.rule_fired[iv["rule"]] += times
                self.rule_correct[iv["rule"]] += bool(iv["correct"]) * times
        self.status[rec["status"]] += times
        self.errors_raw[rec["error_raw"] or "correct"] += times
        self.errors_final[rec["error_final"] or "correct"] += times
        self.finish[rec.get("finish_reason") or "n/a"] += times
        gold_kind = rec["gold_intent"]["intent"]
        self.gold_intents[gold_kind] += times
        self.pairs[(gold_kind, raw_intent["intent"] if raw_intent else "invalid")] += times
        for f in set(rec["wrong_fields_raw"]):
            self.field_wrong[f] += times
        scope = rec["guardrail_scope"]
        if scope:
            fired_ok = {iv["rule"] for iv in ivs if iv["correct"]}
            for rid in scope:
                self.rule_scope[rid] += times
                self.rule_scope_correct[rid] += (rid in fired_ok) * times
        v2 = "answerable" in rec  # a v2 record: the model may answer "unanswerable"
        said_unanswerable = v2 and rec["unanswerable"] is not None
        if said_unanswerable:  # in the curve at every cut-off: never covered, or right when it is right
            c["sel_out" if rec["answerable"] else "sel_right"] += times
        elif "abstained" in rec:
            self.selective[(confidence(rec), not rec["abstained"], bool(rec["answer_correct"]))] += times
            if rec.get("abstain_below") is not None and rec.get("intent_evidence") is None \
                    and rec.get("raw_intent") is not None:
                self.no_evidence += times
        elif v2:
            self.selective[(confidence(rec), True, bool(rec["correct_final"]))] += times
        if v2 or "abstained" in rec:  # unanswerable precision and recall, on every set that can abstain
            abstained = said_unanswerable or bool(rec.get("abstained"))
            c["abstention_scope"] += times
            c["gold_unanswerable"] += (v2 and not rec["answerable"]) * times
            c["abstained"] += abstained * times
            c["abstained_right"] += (abstained and v2 and not rec["answerable"]) * times
        if rec.get("gold_result_head") == []:  # a gold with no rows cannot tell right from wrong
            c["empty_gold"] += times
            if len(self.empty_gold_ids) < 5:
                self.empty_gold_ids.append(rec["id"])
        cat = self.cat[rec["category"]]
        cat["n"] += times
        cat["raw"] += correct_raw
        cat["final"] += correct_final
        for key in TIMING_KEYS:
            value = rec.get(key)
            if value is not None:
                self.timing[key].extend([float(value)] * times)

    @property
    def field_ok(self) -> dict[str, int]:
        """Per field: items whose raw intent had that field right."""
        self._flush()
        return {f: self.n - self.field_wrong[f] for f in self.fields}

    def result(self) -> dict[str, Any]:
        self._flush()
        n, c = self.n, self.c
        seen = {k for pair in self.pairs for k in pair} - {*INTENTS, "invalid"}
        labels = list(INTENTS) + sorted(seen) + ["invalid"]  # v2 adds "unanswerable"
        cm = None
        if self.pairs:
            ys, ps = zip(*self.pairs.keys(), strict=True)
            from sklearn.metrics import confusion_matrix

            cm = confusion_matrix(ys, ps, labels=labels,
                                  sample_weight=list(self.pairs.values())).astype(int).tolist()
        majority = self.gold_intents.most_common(1)
        rules = {rid: {"interventions": self.rule_fired[rid],
                       "precision": wilson(self.rule_correct[rid], self.rule_fired[rid]),
                       "recall": wilson(self.rule_scope_correct[rid], self.rule_scope[rid]),
                       "scope": self.rule_scope[rid]} for rid in self.rule_ids}
        return {
            "n": n,
            "raw_accuracy": wilson(c["correct_raw"], n),
            "final_accuracy": wilson(c["correct_final"], n),
            "execution_accuracy": wilson(c["correct_exec"], n),
            "schema_valid_rate": wilson(c["schema_valid"], n),
            "interventions": c["intervened"],
            "intervention_precision": wilson(c["intervened_correct"], c["intervened"]),
            "intervention_recall": {rid: r["recall"] for rid, r in rules.items()},
            "rules": rules,
            "majority_baseline": {"label": majority[0][0] if majority else None,
                                  **wilson(majority[0][1] if majority else 0, n)},
            "field_accuracy": {f: wilson(ok, n) for f, ok in self.field_ok.items()},
            "status_counts": dict(self.status),
            "error_taxonomy_raw": dict(self.errors_raw.most_common()),
            "error_taxonomy_final": dict(self.errors_final.most_common()),
            "finish_reasons": dict(self.finish),
            "confusion_matrix": {"labels": labels, "rows_gold_cols_pred": cm},
            "per_category": {k: {"n": v["n"], "raw_accuracy": wilson(v["raw"], v["n"]),
                                 "final_accuracy": wilson(v["final"], v["n"])}
                             for k, v in sorted(self.cat.items())},
            "timing": {k: percentiles(v) for k, v in self.timing.items()},
            **({"selective": self._selective()} if self.selective or c["sel_out"] or c["sel_right"] else {}),
            **({"abstention": {
                "abstained": c["abstained"], "unanswerable_items": c["gold_unanswerable"],
                "precision": wilson(c["abstained_right"], c["abstained"]),
                "recall": wilson(c["abstained_right"], c["gold_unanswerable"])}} if c["abstention_scope"] else {}),
            # Flagged, never silent: `evalset check` refuses such golds; a set that has them is suspect.
            **({"empty_golds": {"n": c["empty_gold"], "first_ids": self.empty_gold_ids}} if c["empty_gold"] else {}),
        }

    def _selective(self) -> dict[str, Any]:
        """Coverage, accuracy on answered items, and the coverage-accuracy curve: answering only
        items whose confidence (vote share, else intent-token confidence) is at least each observed
        value (an abstention is never correct).  ``min_vote_share`` is the old name of
        ``min_confidence``, kept so readers of older summaries need no second path.

        A v2 answer of "unanswerable" is in the curve at every cut-off: on an answerable item it
        covers nothing (``abstained_answerable``), on an unanswerable one it is a covered, correct
        answer (``abstained_unanswerable``) — a model that abstains where it should gains accuracy,
        one that abstains everywhere loses coverage.  v2 answers carry confidence 1 unless a
        condition measured one, so their curve is one point: coverage and accuracy as answered."""
        sel = self.selective
        out, right_abstained = self.c["sel_out"], self.c["sel_right"]
        n = sum(sel.values()) + out + right_abstained
        answered = sum(v for (_, a, _), v in sel.items() if a) + right_abstained
        right = sum(v for (_, a, ok), v in sel.items() if a and ok) + right_abstained
        curve = []
        for t in sorted({share for share, _, _ in sel}, reverse=True) or [1.0]:
            m = sum(v for (share, _, _), v in sel.items() if share >= t) + right_abstained
            k = sum(v for (share, _, ok), v in sel.items() if share >= t and ok) + right_abstained
            curve.append({"min_confidence": t, "min_vote_share": t, "coverage": wilson(m, n),
                          "accuracy": wilson(k, m)})
        return {"n": n, "abstained": n - answered + right_abstained, "abstained_answerable": out,
                "abstained_unanswerable": right_abstained, "coverage": wilson(answered, n),
                "accuracy_answered": wilson(right, answered), "curve": curve,
                # answered without a confidence read-out (the endpoint streamed no logprobs)
                "without_logprob_evidence": self.no_evidence}
