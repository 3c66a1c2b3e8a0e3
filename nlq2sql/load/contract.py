"""The parts every typed load result shares (:mod:`.results`, :mod:`.probe_results`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Pct"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Pct(_M):
    """Percentiles of one measured quantity, with the sample count (``score.percentiles``)."""

    n: int
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None  # capacity's token lengths


class _Result(_M):
    record_version: int | None = None  # absent: written before results were versioned
    created: float | None = None
    elapsed_s: float | None = None
