"""Streaming summary of records: accuracy, error classes, guardrail precision and recall,
selective prediction, timings -- or, for records without a gold (``batch --questions``), how the
answers came out.  One aggregator for both: status, finish reasons, timings and interventions are
counted by one code path; only what the summary reports differs (``scored``).

Kept apart from per-item scoring (:mod:`nlq2sql.stages.score`): a summary reads records, old
or new, and never scores one; scoring an item needs none of this.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from nlq2sql.records.item import UNSCORED, ItemRecord
from nlq2sql.records.summary_parts import (
    Abstention,
    AnswerFigures,
    CategoryFigures,
    ConfusionMatrix,
    CurvePoint,
    EmptyGolds,
    Figures,
    LabelledRate,
    RuleFigures,
    Selective,
)
from nlq2sql.stages.abstention import conditions
from nlq2sql.stages.guardrail import RuleSet
from nlq2sql.stages.intent import (
    FIELDS,
    INTENTS,
)
from nlq2sql.stages.score import TIMING_KEYS, rate, spread

__all__ = ["PENDING_MAX", "Summary", "confidence"]

#: Distinct records :meth:`Summary.add_shared` tallies before adding them (bounded).
PENDING_MAX = 4096


def confidence(rec: ItemRecord) -> float:
    """The item's confidence for the coverage-accuracy curve, as the conditions measured it (the
    vote share under self-consistency, else the intent-token confidence), else 1 (nothing said
    otherwise)."""
    measured = conditions().confidence(rec)
    return 1.0 if measured is None else measured


class Summary:
    """Streaming aggregation of records: memory grows with classes, not with items.
    ``scored=False``: a summary of answers without a gold (no accuracy), from the same counts."""

    def __init__(self, rulesets: list[RuleSet], fields: tuple[str, ...] = FIELDS, *, scored: bool = True) -> None:
        self.rule_ids = [r.id for rs in rulesets for r in rs.rules]
        self.fields = fields  # the answer's parts: the v1 intent's fields, or the v2 query's
        #: What ``timing`` gives percentiles of: the request's, then each condition's costs.
        self.timing_keys = TIMING_KEYS + conditions().timing_keys()
        self.scored = scored
        self.empty_gold_ids: list[str] = []
        self.n = 0
        self.c: Counter[str] = Counter()
        self.status: Counter[str] = Counter()
        self.final_status: Counter[str] = Counter()
        self.final_intents: Counter[str] = Counter()
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

    def add(self, rec: ItemRecord) -> None:
        """Count one record."""
        if self._pending:
            self._flush()
        self._add(rec, 1)

    def add_shared(self, rec: ItemRecord) -> None:
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
        if any(rec.get(key) is not None for key in self.timing_keys):
            self.add(rec)
            return
        if len(self._pending) >= PENDING_MAX:
            self._flush()
        self._pending[id(rec)] = [rec, 1]  # holds rec, so its id() is not reused meanwhile

    def _flush(self) -> None:
        for rec, times in self._pending.values():
            self._add(rec, times)
        self._pending.clear()

    def _add(self, rec: ItemRecord, times: int) -> None:
        ans, j = rec.answer, rec.judgement or UNSCORED
        self.n += times
        c = self.c
        correct_raw, correct_final = bool(j.correct_raw) * times, bool(j.correct_final) * times
        c["correct_raw"] += correct_raw
        c["correct_final"] += correct_final
        c["correct_exec"] += bool(j.correct_exec) * times
        raw_intent = ans.raw_intent
        c["schema_valid"] += (raw_intent is not None) * times
        ivs = ans.interventions or []
        if ivs:
            c["intervened"] += times
            c["intervened_correct"] += all(iv["correct"] for iv in ivs) * times
            for iv in ivs:
                self.rule_fired[iv["rule"]] += times
                self.rule_correct[iv["rule"]] += bool(iv["correct"]) * times
        self.status[ans.status or ""] += times
        self.final_status[ans.final_status or ""] += times
        final = ans.final_intent
        self.final_intents[final["intent"] if final is not None else "invalid"] += times
        c["executed"] += (ans.result_rows is not None) * times
        c["exec_error"] += (ans.exec_error is not None) * times
        self.errors_raw[j.error_raw or "correct"] += times
        self.errors_final[j.error_final or "correct"] += times
        self.finish[ans.finish_reason or "n/a"] += times
        gold = j.gold_intent
        gold_kind: str = gold["intent"] if gold is not None else "none"  # (a summary is of scored records)
        self.gold_intents[gold_kind] += times
        self.pairs[(gold_kind, raw_intent["intent"] if raw_intent else "invalid")] += times
        for f in set(j.wrong_fields_raw or ()):
            self.field_wrong[f] += times
        scope = j.guardrail_scope
        if scope:
            fired_ok = {iv["rule"] for iv in ivs if iv["correct"]}
            for rid in scope:
                self.rule_scope[rid] += times
                self.rule_scope_correct[rid] += (rid in fired_ok) * times
        answerable = j.answerable
        v2 = answerable is not None  # a v2 record: the model may answer "unanswerable"
        said_unanswerable = v2 and ans.unanswerable is not None
        sel = conditions().selection(rec)  # a condition's abstention decision (--abstain), if recorded
        if said_unanswerable:  # in the curve at every cut-off: never covered, or right when it is right
            c["sel_out" if answerable else "sel_right"] += times
        elif v2 and sel is not None and sel.abstained and not answerable:  # declined rightly: as said_unanswerable
            c["sel_right"] += times
        elif sel is not None:
            self.selective[(confidence(rec), not sel.abstained, sel.answer_correct)] += times
            if sel.without_evidence and raw_intent is not None:
                self.no_evidence += times
        elif v2:
            self.selective[(confidence(rec), True, bool(j.correct_final))] += times
        if v2 or sel is not None:  # unanswerable precision and recall, on every set that can abstain
            abstained = said_unanswerable or (sel is not None and sel.abstained)
            c["abstention_scope"] += times
            c["gold_unanswerable"] += (v2 and not answerable) * times
            c["abstained"] += abstained * times
            c["abstained_right"] += (abstained and v2 and not answerable) * times
        if j.gold_result_head == []:  # a gold with no rows cannot tell right from wrong
            c["empty_gold"] += times
            if len(self.empty_gold_ids) < 5:
                self.empty_gold_ids.append(rec.id)
        cat = self.cat[rec.category]  # type: ignore[index]
        cat["n"] += times
        cat["raw"] += correct_raw
        cat["final"] += correct_final
        for key in self.timing_keys:
            value = rec.get(key)
            if value is not None:
                self.timing[key].extend([float(value)] * times)

    @property
    def field_ok(self) -> dict[str, int]:
        """Per field: items whose raw intent had that field right."""
        self._flush()
        return {f: self.n - self.field_wrong[f] for f in self.fields}

    def result(self) -> Figures | AnswerFigures:
        """The figures: of scored records (:meth:`figures`), else of answers (:meth:`answers`)."""
        return self.figures() if self.scored else self.answers()

    def figures(self) -> Figures:
        """Accuracy, guardrail precision and recall, taxonomy, confusion matrix, timings."""
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
        rules = {rid: RuleFigures(interventions=self.rule_fired[rid],
                                  precision=rate(self.rule_correct[rid], self.rule_fired[rid]),
                                  recall=rate(self.rule_scope_correct[rid], self.rule_scope[rid]),
                                  scope=self.rule_scope[rid]) for rid in self.rule_ids}
        baseline = rate(majority[0][1] if majority else 0, n)
        figures = Figures(
            n=n,
            raw_accuracy=rate(c["correct_raw"], n),
            final_accuracy=rate(c["correct_final"], n),
            execution_accuracy=rate(c["correct_exec"], n),
            schema_valid_rate=rate(c["schema_valid"], n),
            interventions=c["intervened"],
            intervention_precision=rate(c["intervened_correct"], c["intervened"]),
            intervention_recall={rid: r.recall for rid, r in rules.items()},
            rules=rules,
            majority_baseline=LabelledRate(label=majority[0][0] if majority else None, value=baseline.value,
                                           k=baseline.k, n=baseline.n, ci95=baseline.ci95),
            field_accuracy={f: rate(ok, n) for f, ok in self.field_ok.items()},
            status_counts=dict(self.status),
            error_taxonomy_raw=dict(self.errors_raw.most_common()),
            error_taxonomy_final=dict(self.errors_final.most_common()),
            finish_reasons=dict(self.finish),
            confusion_matrix=ConfusionMatrix(labels=labels, rows_gold_cols_pred=cm),
            per_category={k: CategoryFigures(n=v["n"], raw_accuracy=rate(v["raw"], v["n"]),
                                             final_accuracy=rate(v["final"], v["n"]))
                          for k, v in sorted(self.cat.items())},
            timing={k: spread(v) for k, v in self.timing.items()},
        )
        if self.selective or c["sel_out"] or c["sel_right"]:
            figures.selective = self._selective()
        if c["abstention_scope"]:
            figures.abstention = Abstention(
                abstained=c["abstained"], unanswerable_items=c["gold_unanswerable"],
                precision=rate(c["abstained_right"], c["abstained"]),
                recall=rate(c["abstained_right"], c["gold_unanswerable"]))
        if c["empty_gold"]:  # flagged, never silent: `evalset check` refuses such golds; a set that has them is suspect
            figures.empty_golds = EmptyGolds(n=c["empty_gold"], first_ids=self.empty_gold_ids)
        return figures

    def answers(self) -> AnswerFigures:
        """The summary of records without a gold: how the answers came out, no accuracy."""
        self._flush()
        n, c = self.n, self.c
        return AnswerFigures(
            n=n, scored=False, schema_valid_rate=rate(c["schema_valid"], n), executed_rate=rate(c["executed"], n),
            exec_errors=c["exec_error"], interventions=c["intervened"],
            rules_fired={rid: self.rule_fired[rid] for rid in self.rule_ids},
            status_counts=dict(self.status), final_status_counts=dict(self.final_status),
            final_intents=dict(self.final_intents.most_common()), finish_reasons=dict(self.finish),
            timing={k: spread(v) for k, v in self.timing.items()})

    def _selective(self) -> Selective:
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
            curve.append(CurvePoint(min_confidence=t, min_vote_share=t, coverage=rate(m, n), accuracy=rate(k, m)))
        return Selective(n=n, abstained=n - answered + right_abstained, abstained_answerable=out,
                         abstained_unanswerable=right_abstained, coverage=rate(answered, n),
                         accuracy_answered=rate(right, answered), curve=curve,
                         # answered without a confidence read-out (the endpoint streamed no logprobs)
                         without_logprob_evidence=self.no_evidence)
