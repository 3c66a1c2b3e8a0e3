"""Abstention, decided from a scored record: what ``--abstain`` and ``--abstain-below`` change.

The decision reads only recorded evidence (the samples' votes, the planner's choice, the
intent token's confidence), so scoring and re-scoring offline (``stages.pipeline``) take it
here, below the conditions that record that evidence (``conditions.selfcheck``,
``conditions.planner``, ``conditions.confidence``, ``conditions.abstain``).  It works on the
typed record (:class:`~nlq2sql.records.item.ItemRecord`): the evidence is the conditions'
traces (JSON values, each condition's own), the decision is merged where the flat record had it.
"""

from __future__ import annotations

from typing import Any

from nlq2sql.records.item import ItemRecord

__all__ = ["ABSTENTION_KEYS", "abstain_reason", "apply_abstention", "kind_share"]


def kind_share(evidence: dict[str, Any], kind: str | None) -> float:
    """The share of the model's offered mass on ``kind`` — the kind actually answered, which a
    guardrail may have changed (the model's own share of its raw kind when None).  ``evidence`` is
    the ``intent_evidence`` trace as recorded (a JSON edge: ``conditions.confidence`` writes it)."""
    if kind is None or kind == evidence["kind"] or evidence.get("over", "intent") != "intent":
        return float(evidence["confidence"])  # (a v2 answer's: over answering and its metric, no kind)
    total = sum(evidence["kinds"].values())
    return float(evidence["kinds"].get(kind, 0.0)) / total if total > 0 else 0.0


def abstain_reason(rec: ItemRecord) -> str | None:
    """Why an item abstains, from its record (None: it answers)."""
    votes = rec.traces.get("votes")
    if votes is not None and (votes["winner"] is None or votes["tie"]):
        return "no majority among samples"
    choice = rec.traces.get("planner_choice")
    final = rec.answer.final_intent
    if choice is not None and final is not None and final.get("intent") not in (choice, "unanswerable"):
        return f"planner chose {choice}, guardrail made it {final.get('intent')}"
    below, ev = rec.traces.get("abstain_below"), rec.traces.get("intent_evidence")
    if below is not None and ev is not None:
        share = kind_share(ev, (final or {}).get("intent"))
        if share < below:
            return f"intent-token confidence {share:.2f} < {below:g}"
    return None


#: What :func:`apply_abstention` sets: its decision, and the correctness it may overrule.
ABSTENTION_KEYS = ("abstained", "abstain_reason", "answer_correct", "correct_final", "correct_exec")


def apply_abstention(rec: ItemRecord) -> ItemRecord:
    """Decide and record abstention on a scored record (in place; returns it): the keys of
    :data:`ABSTENTION_KEYS`."""
    reason = abstain_reason(rec)
    judged = rec.judgement
    correct = bool(judged.correct_final) if judged is not None else False
    rec.merge({"abstained": reason is not None, "abstain_reason": reason, "answer_correct": correct})
    if reason is not None:
        # Declining a question the layer cannot answer (a v2 item marked unanswerable) is right.
        declined_rightly = judged is not None and judged.answerable is False
        rec.merge({"correct_final": declined_rightly, "correct_exec": declined_rightly})
    return rec
