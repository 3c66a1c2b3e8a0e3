"""Unanswerable precision and recall at every confidence cut-off, from the records.

Records of a ``--abstain-below`` run hold each item's confidence (``intent_evidence``) and its
answer before abstention (``answer_correct``), so the whole curve is available: at cut-off ``t`` an
item abstains when it said "unanswerable" or its confidence is below ``t``. Pooling a held-out run
with an unanswerable run gives precision of declines, recall of the unanswerable, and what the
answerable lose (coverage, accuracy on answered)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nlq2sql.conditions.abstain import AbstainTrace
from nlq2sql.conditions.confidence import Evidence
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.summary_parts import Rate
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import rate

__all__ = ["MIN_RECALL", "CutPoint", "Decision", "best_at_recall", "cut", "decisions", "leave_one_out", "render",
           "sweep"]

#: Issue 22's bar: unanswerable precision >= 0.8 at recall >= 0.6.
MIN_RECALL, MIN_PRECISION = 0.6, 0.8


@dataclass(frozen=True)
class Decision:
    """What one record says about abstaining: the facts every cut-off is decided from."""

    id: str
    answerable: bool
    said_unanswerable: bool
    confidence: float | None
    answer_correct: bool


def decisions(records: Iterable[ItemRecord]) -> list[Decision]:
    """One :class:`Decision` per record (``records.item.iter_item_records``); the confidence and the
    answer before abstention are the abstain condition's trace keys."""
    out = []
    for rec in records:
        ev: Evidence | None = AbstainTrace.read(rec, "intent_evidence")
        conf = ev.confidence if ev is not None else None
        said = rec.answer.unanswerable is not None
        correct: bool | None = AbstainTrace.read(rec, "answer_correct")
        if correct is None:  # a run without --abstain: its final correctness is the answer's
            correct = rec.judgement.correct_final if rec.judgement is not None else None
        answerable = rec.judgement.answerable if rec.judgement is not None else None
        out.append(Decision(id=rec.id, answerable=answerable is not False, said_unanswerable=said,
                            confidence=None if conf is None else float(conf),
                            answer_correct=bool(correct) and not said))
    return out


@dataclass(frozen=True)
class CutPoint:
    """The pooled items decided at one cut-off."""

    threshold: float
    n: int
    unanswerable: int
    abstained: int
    abstained_right: int
    answered_answerable: int
    answered_right: int

    @property
    def precision(self) -> Rate:
        return rate(self.abstained_right, self.abstained)

    @property
    def recall(self) -> Rate:
        return rate(self.abstained_right, self.unanswerable)

    @property
    def accuracy(self) -> Rate:
        """Final accuracy over every item (a right abstention counts right, a wrong one wrong)."""
        return rate(self.answered_right + self.abstained_right, self.n)

    @property
    def meets_target(self) -> bool:
        """Issue 22's bar at this cut-off: precision >= 0.8 and recall >= 0.6."""
        return (self.abstained > 0 and self.abstained_right / self.abstained >= MIN_PRECISION
                and self.unanswerable > 0 and self.abstained_right / self.unanswerable >= MIN_RECALL)

    @property
    def coverage(self) -> Rate:
        """Share of the answerable items still answered."""
        return rate(self.answered_answerable, self.n - self.unanswerable)


def cut(items: list[Decision], threshold: float) -> CutPoint:
    """Abstain where the model said "unanswerable" or its confidence is below ``threshold``."""
    abstained = abstained_right = answered = right = 0
    for d in items:
        declines = d.said_unanswerable or (d.confidence is not None and d.confidence < threshold)
        if declines:
            abstained += 1
            abstained_right += not d.answerable
        elif d.answerable:
            answered += 1
            right += d.answer_correct
    return CutPoint(threshold=threshold, n=len(items), unanswerable=sum(not d.answerable for d in items),
                    abstained=abstained, abstained_right=abstained_right, answered_answerable=answered,
                    answered_right=right)


def sweep(items: list[Decision]) -> list[CutPoint]:
    """Every distinct way to cut the records, from "only explicit abstentions" (0) upward; each
    cut-off sits halfway between two neighbouring confidences (so a cut-off carried to other
    items is not fitted to the last item it kept), the last one above every confidence."""
    seen_conf = sorted({d.confidence for d in items if d.confidence is not None})
    levels = [0.0] + [(lo + hi) / 2 for lo, hi in zip(seen_conf, seen_conf[1:], strict=False)]
    if seen_conf:
        levels.append(max(seen_conf[-1], 1.0) + 1e-9)
    return [cut(items, t) for t in levels]


def best_at_recall(points: list[CutPoint], min_recall: float = MIN_RECALL) -> CutPoint | None:
    """The point of highest precision among those whose recall reaches ``min_recall``."""
    ok = [p for p in points if p.unanswerable and p.abstained_right / p.unanswerable >= min_recall]
    return max(ok, key=lambda p: (p.abstained_right / max(p.abstained, 1), -p.threshold)) if ok else None


def leave_one_out(groups: dict[str, list[Decision]]) -> dict[str, CutPoint | None]:
    """Each group at the cut-off chosen on the *other* groups pooled (best precision at recall >=
    0.6 there): the figure a team gets on a warehouse whose threshold it could not tune."""
    out: dict[str, CutPoint | None] = {}
    for name, items in groups.items():
        rest = [d for other, ds in groups.items() if other != name for d in ds]
        chosen = best_at_recall(sweep(rest)) if rest else None
        out[name] = cut(items, chosen.threshold) if chosen is not None else None
    return out


def _row(label: str, p: CutPoint) -> str:
    prec = pct(p.precision) if p.abstained else "—"
    return (f"| {label} | {p.threshold:.3g} | {p.abstained} | {prec} | {pct(p.recall)} | {pct(p.coverage)} | "
            f"{pct(p.accuracy)} |")


def render(groups: dict[str, list[Decision]], run_threshold: float | None,
           transferred: dict[str, CutPoint | None] | None = None) -> list[str]:
    """Markdown: per group, the run's own cut-off, the best precision at recall >= 0.6 (met or
    missed against precision 0.8), the explicit-abstention-only point and, when given, the cut-off
    transferred from the other groups (:func:`leave_one_out`)."""
    head = ["| group | cut-off | abstained | precision | recall | coverage (answerable) | final accuracy |",
            "|---|---|---|---|---|---|---|"]
    lines, verdicts = [*head], []
    for name, items in groups.items():
        points = sweep(items)
        lines.append(_row(f"{name} · said unanswerable only", cut(items, 0.0)))
        if run_threshold is not None:
            lines.append(_row(f"{name} · the run's cut-off", cut(items, run_threshold)))
        moved = (transferred or {}).get(name)
        if moved is not None:
            lines.append(_row(f"{name} · cut-off chosen on the other warehouses", moved))
        best = best_at_recall(points)
        if best is None:
            top = max(points, key=lambda p: p.abstained_right)
            verdicts.append(f"- {name}: recall never reaches {MIN_RECALL:.0%} (at most {top.abstained_right}/"
                            f"{top.unanswerable}, abstaining on {top.abstained} of {top.n}) — **missed**")
            continue
        lines.append(_row(f"{name} · best precision at recall ≥ {MIN_RECALL:.0%}", best))
        met = best.meets_target  # (best_at_recall already holds recall >= 0.6)
        verdicts.append(f"- {name}: precision {best.abstained_right}/{best.abstained} at recall "
                        f"{best.abstained_right}/{best.unanswerable} (cut-off {best.threshold:.3g}) — "
                        f"**{'met' if met else 'missed'}** (target precision ≥ {MIN_PRECISION:.0%})")
    return [*lines, "", *verdicts]
