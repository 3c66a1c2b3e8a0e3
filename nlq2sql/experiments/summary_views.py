"""What the quality report reads from a run beside its summary: cost per item, and views of the
summary's typed ``selective`` figures (where the run could abstain, the curve, a cut-off)."""

from __future__ import annotations

from dataclasses import dataclass

from nlq2sql.records.summary_parts import CurvePoint, Figures, Percentiles, Selective

__all__ = ["Cost", "curve_of", "cut", "selective_of"]


@dataclass(frozen=True)
class Cost:
    """What a condition spent per item: tokens (every sample's and the planner's), requests, latency."""

    tokens: Percentiles
    requests: float
    latency: Percentiles


def selective_of(summary: Figures) -> Selective | None:
    """A summary's ``selective`` figures where the run could abstain (``n`` items), else None."""
    sel = summary.selective
    return sel if sel is not None and sel.n else None


def curve_of(summary: Figures) -> list[CurvePoint]:
    """The coverage-accuracy curve whatever the rest holds (empty when the run could not abstain)."""
    return list(summary.selective.curve) if summary.selective is not None else []


def cut(point: CurvePoint) -> float:
    """A curve point's cut-off: the confidence, or self-consistency's vote share (older runs: only it)."""
    return point.min_confidence if point.min_confidence is not None else point.min_vote_share
