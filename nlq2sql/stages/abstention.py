"""Abstention, decided from a scored record: what ``--abstain`` and ``--abstain-below`` change.

The decision reads only recorded evidence (the samples' votes, the planner's choice, the
intent token's confidence), so scoring and re-scoring offline (``stages.pipeline``) take it
here, below the conditions that record that evidence (``conditions.selfcheck``,
``conditions.planner``, ``conditions.abstain``).  Each of those conditions reads its own trace
(its declared ``conditions.trace.Trace``): this module names no trace key.  It reaches them
through the conditions' one registry (``conditions.registry.REGISTRY``), which hands itself
down here when it loads (:func:`read_traces_with`) -- the conditions sit above the stages, so
the stages see it only as :class:`ConditionTraces`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol

from nlq2sql.records.item import ItemRecord
from nlq2sql.records.typed import Typed

__all__ = ["CONDITIONS_PACKAGE", "ConditionTraces", "Selection", "abstain_reason", "apply_abstention",
           "carry_evidence", "conditions", "decided", "read_traces_with"]


@dataclass(frozen=True)
class Selection:
    """An item's recorded abstention, as the summary's selective figures count it: whether it
    abstained, whether its answer was right all the same, and whether a confidence threshold was
    set that no recorded evidence could be held against (the endpoint streamed no logprobs)."""

    abstained: bool
    answer_correct: bool
    without_evidence: bool = False


class ConditionTraces(Protocol):
    """The conditions' traces as scoring reads a record through them, each condition from its
    own trace's keys (those present in the record), in registry order."""

    def abstain_reason(self, rec: ItemRecord) -> str | None:
        """Why the item abstains, by the first condition whose evidence says so (None: it answers)."""

    def confidence(self, rec: ItemRecord) -> float | None:
        """The item's confidence, from the first condition that measured one (None: none did)."""

    def selection(self, rec: ItemRecord) -> Selection | None:
        """The item's recorded abstention (None: no abstention was decided for it)."""

    def decision(self, reason: str | None, answer_correct: bool) -> Typed:
        """The trace keys that record an abstention decision."""

    def timing_keys(self) -> tuple[str, ...]:
        """The trace keys the summary's ``timing`` gives percentiles of (each condition's costs)."""

    def carry_evidence(self, old: ItemRecord, new: ItemRecord) -> None:
        """Copy into ``new`` the trace keys of ``old`` that the decision reads (each condition's own)."""


_SOURCE: list[ConditionTraces] = []


def read_traces_with(source: ConditionTraces) -> None:
    """Read conditions' traces through ``source`` (the conditions' registry, when it loads)."""
    _SOURCE[:] = [source]


#: The package whose import registers the conditions (and calls :func:`read_traces_with`): found by
#: name, as a plugin is, since it lives in a layer above this one.
CONDITIONS_PACKAGE = "nlq2sql.conditions"


def conditions() -> ConditionTraces:
    """The conditions' traces: the registry's, its package loaded on first use by name (so a library
    caller scoring records needs no import of its own), never silently none."""
    if not _SOURCE:
        importlib.import_module(CONDITIONS_PACKAGE)
    if not _SOURCE:
        raise RuntimeError(f"importing {CONDITIONS_PACKAGE} registered no condition traces")
    return _SOURCE[0]


def abstain_reason(rec: ItemRecord) -> str | None:
    """Why an item abstains, from its record (None: it answers)."""
    return conditions().abstain_reason(rec)


def decided(rec: ItemRecord) -> bool:
    """Whether the record holds an abstention decision (its run had ``--abstain``)."""
    return conditions().selection(rec) is not None


def carry_evidence(old: ItemRecord, new: ItemRecord) -> None:
    """Carry the recorded evidence abstention is decided from (the votes, the planner's choice, the
    intent-token evidence and its threshold: each condition says which of its keys) from ``old``
    into ``new``, a re-scored record, so :func:`apply_abstention` decides it again the same way."""
    conditions().carry_evidence(old, new)


def apply_abstention(rec: ItemRecord) -> ItemRecord:
    """Decide and record abstention on a scored record (in place; returns it): its decision
    (whether it abstained, why, the answer's own correctness) and, when it abstains, the
    correctness it overrules (``correct_final``, ``correct_exec``)."""
    reason = abstain_reason(rec)
    judged = rec.judgement
    correct = bool(judged.correct_final) if judged is not None else False
    rec.merge(conditions().decision(reason, correct))
    if reason is not None:
        # Declining a question the layer cannot answer (a v2 item marked unanswerable) is right.
        declined_rightly = judged is not None and judged.answerable is False
        rec.merge({"correct_final": declined_rightly, "correct_exec": declined_rightly})
    return rec
