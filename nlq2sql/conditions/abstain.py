"""Abstention (``--abstain``, ``--abstain-below P``) as a condition: decided over the scored record.

The decision itself (:func:`~nlq2sql.stages.abstention.apply_abstention`) reads only
recorded fields — the vote, the planner's choice, the intent-token evidence — so offline
re-scoring decides it again the same way; this module says when it runs and what a run
records: with ``--abstain-below`` every request asks for token logprobs and each record keeps
the evidence (``intent_evidence``) and the threshold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import Field

from nlq2sql.answers.kinds import answer_kind
from nlq2sql.conditions.confidence import TOP_LOGPROBS, Evidence, intent_evidence, query_evidence
from nlq2sql.conditions.registry import Condition, Settings, register
from nlq2sql.conditions.trace import Trace
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.manifest_parts import Part
from nlq2sql.stages.abstention import Selection, apply_abstention
from nlq2sql.transport.client import Sampling
from nlq2sql.transport.stream import Completion

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.semantic.binding import Warehouse

__all__ = ["Abstain", "AbstainSettings", "AbstainTrace"]


class AbstainSettings(Settings):
    abstain: bool = Field(False, description="Answer 'needs clarification' when the evidence is split (no majority "
                          "among --samples, or the planner's kind overruled by a guardrail); scored as selective "
                          "prediction.")
    abstain_below: float | None = Field(None, gt=0, lt=1, description="Also abstain when the model's probability "
                                        "of its intent kind, read from vLLM's token logprobs (asked for), is below "
                                        "this (0-1); implies --abstain.")


class AbstainTrace(Trace):
    """Per item, with ``--abstain-below``: the intent-token evidence (unless the planner's first stage
    recorded it) and the threshold.  On a scored item the decision follows
    (``stages.abstention.apply_abstention``): whether it abstained, why, and whether the answer was
    right all the same (``correct_final`` then says whether abstaining was)."""

    intent_evidence: Evidence | None = None
    abstain_below: float | None = None
    abstained: bool | None = None
    abstain_reason: str | None = None
    answer_correct: bool | None = None

    evidence_keys = ("intent_evidence", "abstain_below")

    @classmethod
    def reason_to_abstain(cls, rec: ItemRecord) -> str | None:
        below: float | None = cls.read(rec, "abstain_below")
        ev: Evidence | None = cls.read(rec, "intent_evidence")
        if below is not None and ev is not None:
            share = ev.share(_final_kind(rec))
            if share < below:
                return f"intent-token confidence {share:.2f} < {below:g}"
        return None

    @classmethod
    def confidence(cls, rec: ItemRecord) -> float | None:
        """The intent-token (v2: answer and metric token) confidence in the kind finally answered
        (a guardrail may have changed it), whichever condition recorded the evidence."""
        ev: Evidence | None = cls.read(rec, "intent_evidence")
        return round(ev.share(_final_kind(rec)), 2) if ev is not None else None

    @classmethod
    def selection(cls, rec: ItemRecord) -> Selection | None:
        if "abstained" not in rec.traces:
            return None
        return Selection(abstained=bool(cls.read(rec, "abstained")),
                         answer_correct=bool(cls.read(rec, "answer_correct")),
                         without_evidence=cls.read(rec, "abstain_below") is not None
                         and cls.read(rec, "intent_evidence") is None)

    @classmethod
    def decision(cls, reason: str | None, answer_correct: bool) -> AbstainTrace:
        return cls(abstained=reason is not None, abstain_reason=reason, answer_correct=answer_correct)


def _final_kind(rec: ItemRecord) -> str | None:
    """The kind finally answered (after guardrails; None: no valid answer)."""
    kind = (rec.answer.final_intent or {}).get("intent")
    return kind if isinstance(kind, str) else None


@register
class Abstain(Condition[AbstainSettings]):
    """Selective prediction: an item may answer "needs clarification" instead of guessing."""

    name = "abstain"
    settings_model = AbstainSettings
    manifest_keys = ("abstain", "abstain_below")
    manifest_types = {"abstain": bool, "abstain_below": float}
    answers = frozenset({"intent", "query"})  # on v2: the vote's split, or the answer/metric token's confidence
    label_rank = 50.0
    neutral = True
    metrics: tuple[str, ...] | None = None  # the v2 answer: its evidence is read over these names
    trace = AbstainTrace

    def load(self, wh: Warehouse, answer: str) -> None:
        if answer_kind(answer).form == "query":
            self.metrics = tuple(wh.catalog.metrics)

    def sampling(self, s: Sampling) -> Sampling:
        if self.settings.abstain_below is not None and s.top_logprobs is None:
            return dataclasses.replace(s, top_logprobs=TOP_LOGPROBS)
        return s

    def manifest(self) -> Part:
        return self.manifest_part().model_validate({"abstain": True if self.on else None,
                                                 "abstain_below": self.settings.abstain_below})

    @classmethod
    def label(cls, manifest: Mapping[str, JsonValue]) -> str | None:
        if manifest.get("abstain_below") is not None:
            return f"abstain below p {manifest['abstain_below']:g}"
        return "abstain" if manifest.get("abstain") else None

    def after(self, rec: ItemRecord, comp: Completion, scored: bool) -> None:
        below = self.settings.abstain_below
        if below is not None:
            trace = AbstainTrace(abstain_below=below)
            if "intent_evidence" not in rec.traces:  # (the planner records its first stage's: it chose the kind)
                trace.intent_evidence = (query_evidence(comp.token_logprobs, self.metrics)
                                         if self.metrics is not None else intent_evidence(comp.token_logprobs))
            rec.merge(trace)
        if scored:  # decided on the record, as offline re-scoring decides it (stages.abstention)
            apply_abstention(rec)
