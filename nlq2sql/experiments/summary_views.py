"""Typed views of what the quality report reads from a run: its cost per item, and the open figures of
its summary (``selective``, ``abstention``) that ``records.results.Summary`` keeps as JSON.

Split from :mod:`.quality` to keep that module under the size limit; the views are read once per
run, where the report needs them (pydantic models: the summary's own rates are ``records.results.Rate``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from nlq2sql.load.figures import Pct
from nlq2sql.records.results import Rate, Summary

__all__ = ["Abstention", "Cost", "CurvePoint", "Selective"]


@dataclass(frozen=True)
class Cost:
    """What a condition spent per item: tokens (every sample's and the planner's), requests, latency."""

    tokens: Pct
    requests: float
    latency: Pct


class CurvePoint(BaseModel):
    """One cut-off of a summary's coverage-accuracy curve (``selective.curve``)."""

    min_confidence: float | None = None
    min_vote_share: float | None = None  # self-consistency's (logprob runs: both, equal)
    coverage: Rate
    accuracy: Rate

    @property
    def cut(self) -> float:
        return self.min_confidence if self.min_confidence is not None else (self.min_vote_share or 0.0)


class Selective(BaseModel):
    """A summary's ``selective`` figures (``--abstain``): abstentions, accuracy answered, the curve."""

    n: int
    abstained: int
    accuracy_answered: Rate
    curve: list[CurvePoint] = []

    @classmethod
    def of(cls, summary: Summary) -> Selective | None:
        sel = summary.selective or {}
        return cls.model_validate(sel) if sel.get("n") else None

    @staticmethod
    def curve_of(summary: Summary) -> list[CurvePoint]:
        """The curve whatever the rest holds (empty when the run could not abstain)."""
        return [CurvePoint.model_validate(p) for p in (summary.selective or {}).get("curve") or []]


class Abstention(BaseModel):
    """A summary's ``abstention`` figures (v2 answers): unanswerable precision and recall."""

    abstained: int
    unanswerable_items: int
    precision: Rate
    recall: Rate

    @classmethod
    def of(cls, summary: Summary) -> Abstention | None:
        return cls.model_validate(summary.abstention) if summary.abstention else None
