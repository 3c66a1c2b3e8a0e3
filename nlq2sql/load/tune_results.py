"""``tune.json``'s declaration, below :mod:`.tune` so :mod:`.results` registers it without importing the mode."""

from __future__ import annotations

from typing import Literal

from nlq2sql.load.contract import _Header
from nlq2sql.records.typed import Num, Typed

__all__ = ["OperatingPoint", "ProbeCounts", "ProbeRow", "TuneConfig", "TuneResult", "TuneVerdict"]


class ProbeCounts(Typed):
    """One probe's counts as measured (``tune.Probe`` adds the items that pair it with the baseline)."""

    load: float
    run_dir: str
    n: int
    ok: int
    correct: int
    correct_in_slo: int
    wall_s: float | None
    req_per_s: float | None
    goodput_per_s: float | None  # correct answers per second (any latency)
    correct_goodput_per_s: float | None  # correct answers per second that met every SLO
    correct_goodput_ci95: list[float] | None
    accuracy: float | None
    accuracy_ci95: list[float] | None
    slo_observed: dict[str, float | None]
    slo_met: bool


class TuneVerdict(Typed):
    """A probe judged against the baseline: McNemar on the items both answered, and the bounds."""

    b_baseline_only: int  # right at the baseline, wrong here
    c_probe_only: int
    p_one_sided: Num
    significantly_worse: bool
    accuracy_ok: bool
    eligible: bool
    why_not: list[str]


class _Ordered(ProbeCounts):
    order: int  # when it ran (1: the baseline)


class ProbeRow(TuneVerdict, _Ordered):
    """One probe as written: its counts, when it ran, then its verdict (pydantic puts the last base's
    fields first, so the row is counts, order, verdict)."""


class OperatingPoint(Typed):
    load: Num
    correct_goodput_per_s: Num | None
    correct_goodput_ci95: list[Num] | None
    accuracy: Num | None
    accuracy_ci95: list[Num] | None
    req_per_s: Num | None
    n: int


class TuneConfig(Typed):
    """``tune.json``'s ``config``: what the search was asked."""

    by: str
    slo: list[str]
    min_accuracy: Num
    alpha: Num
    lo: Num
    hi: Num
    probes: int
    requests: int
    order_seed: int
    max_in_flight: int | None  # open loop only
    warmup: int
    max_tokens: int
    structured: str
    prompt: str


class TuneResult(_Header):
    kind: Literal["tune"]
    config: TuneConfig
    ci_method: str
    probes: list[ProbeRow]
    operating_point: OperatingPoint | None
    accuracy_moved_at: Num | None
    accuracy_below_bound_at: Num | None
    slo_missed_at: Num | None
    notes: list[str]
    plot: str | None = None
