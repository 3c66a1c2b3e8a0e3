"""The sweep's analysis: pure arithmetic on measured levels (figures defined in :mod:`nlq2sql.load.sweep`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from nlq2sql.load.contract import LevelStats
from nlq2sql.records.typed import Num, Typed

__all__ = ["Knee", "LevelCost", "Point", "Saturation", "ScalingRow", "Signature", "SloPick", "SweepAnalysis",
           "Thresholds", "analyse", "cost_per_1k", "find_knee", "find_saturation", "points", "scaling",
           "serialized_signature", "slo_policy"]


@dataclass(frozen=True)
class Thresholds:
    """The stated thresholds behind the knee and saturation calls."""

    efficiency: float = 0.80  # knee: scaling efficiency below this
    marginal: float = 0.50  # knee: marginal gain per added request below this (lanes)
    flat_pct: float = 0.10  # saturation: next level's throughput gain below this…
    p95_rise_pct: float = 0.10  # …while its p95 rises by more than this

    def describe(self) -> str:
        return (f"knee = first level where scaling efficiency < {self.efficiency:.0%} or the "
                f"marginal gain per added request < {self.marginal:.0%} of a single-request lane; "
                f"saturation = first level after which throughput grows < {self.flat_pct:.0%} "
                f"while p95 rises > {self.p95_rise_pct:.0%}")


# The analysis as ``sweep.json`` holds it (the one declaration: built here, read by the renderers).

class ScalingRow(Typed):
    concurrency: int
    req_per_s: Num | None
    efficiency: Num | None
    marginal: Num | None


class Knee(Typed):
    level: int | None
    last_efficient: int | None
    reasons: list[str]


class Saturation(Typed):
    level: int | None
    next: int | None = None
    throughput_gain: Num | None = None
    p95_rise: Num | None = None
    note: str | None = None  # not reached


class SloPick(Typed):
    p95_target_s: Num
    level: int | None
    req_per_s: Num | None = None
    p95_s: Num | None = None
    n: int | None = None
    cost_per_1k: Num | None = None
    note: str | None = None  # no level meets the target


class Signature(Typed):
    speedup: Num
    concurrency_ratio: Num
    p95_ratio: Num
    present: bool


class LevelCost(Typed):
    concurrency: int
    per_1k_queries: Num | None
    per_1k_correct: Num | None


class SweepAnalysis(Typed):
    baseline_level: int | None
    baseline_note: str | None
    scaling: list[ScalingRow]
    knee: Knee
    saturation: Saturation
    slo_policy: list[SloPick]
    serialized_signature: Signature | None
    cost: list[LevelCost] | None
    thresholds: dict[str, float]
    thresholds_text: str


@dataclass(frozen=True)
class Point:
    """One level as the analysis reads it (not written)."""

    concurrency: int
    req_per_s: float | None
    p95: float | None
    n: int | None = None


def points(levels: list[LevelStats]) -> list[Point]:
    return [Point(concurrency=s.concurrency, req_per_s=s.req_per_s, p95=s.p95(), n=s.n) for s in levels]



def cost_per_1k(req_per_s: float | None, cost_per_hour: float | None) -> float | None:
    """Hourly cost ÷ hourly completed requests × 1000; None when either is unknown or zero."""
    if not req_per_s or cost_per_hour is None:
        return None
    return cost_per_hour / (req_per_s * 3600.0) * 1000.0


def scaling(points: list[tuple[int, float | None]], baseline: tuple[int, float] | None = None
            ) -> list[ScalingRow]:
    """Efficiency and marginal gain per level from (concurrency, req/s), sorted by concurrency.

    The baseline is (1, thr(1)) when level 1 was swept; otherwise the lowest level L, with
    efficiency ``thr(N)·L / (N·thr(L))``.  An explicit ``baseline`` overrides both.
    """
    pts = sorted(points)
    if not pts:
        return []
    b_c, b_thr = baseline if baseline is not None else pts[0]
    lane = b_thr / b_c if b_thr else None  # single-request throughput
    out = []
    prev: tuple[int, float | None] | None = None
    for c, thr in pts:
        eff = thr / (c * lane) if lane and thr is not None else None
        marg = None
        if prev is not None and lane and thr is not None and prev[1] is not None and c > prev[0]:
            marg = (thr - prev[1]) / ((c - prev[0]) * lane)
        out.append(ScalingRow(concurrency=c, req_per_s=thr, efficiency=eff, marginal=marg))
        prev = (c, thr)
    return out


def find_knee(rows: list[ScalingRow], th: Thresholds) -> Knee:
    """First level whose efficiency or marginal gain falls below its threshold."""
    for i, r in enumerate(rows):
        if i == 0:
            continue
        reasons = []
        if r.efficiency is not None and r.efficiency < th.efficiency:
            reasons.append(f"efficiency {r.efficiency:.0%} < {th.efficiency:.0%}")
        if r.marginal is not None and r.marginal < th.marginal:
            reasons.append(f"marginal gain {r.marginal:.2f} < {th.marginal:.2f} lane/request")
        if reasons:
            return Knee(level=r.concurrency, last_efficient=rows[i - 1].concurrency, reasons=reasons)
    if len(rows) < 2:
        return Knee(level=None, last_efficient=None, reasons=["needs at least two levels"])
    return Knee(level=None, last_efficient=rows[-1].concurrency,
                reasons=["scaling stayed above both thresholds at every level swept"])


def _measured(points: list[Point]) -> list[tuple[Point, float, float]]:
    return [(p, p.req_per_s, p.p95) for p in points if p.req_per_s and p.p95]


def find_saturation(points: list[Point], th: Thresholds) -> Saturation:
    """First level L after which throughput is flat while p95 climbs (``points`` sorted by concurrency)."""
    pts = _measured(points)
    for (a, a_thr, a_p95), (b, b_thr, b_p95) in zip(pts, pts[1:], strict=False):
        gain = b_thr / a_thr - 1
        rise = b_p95 / a_p95 - 1
        if gain < th.flat_pct and rise > th.p95_rise_pct:
            return Saturation(level=a.concurrency, next=b.concurrency, throughput_gain=gain, p95_rise=rise)
    return Saturation(level=None, note="not reached within the levels swept")


def slo_policy(points: list[Point], targets: tuple[float, ...] | list[float],
               cost_per_hour: float | None = None) -> list[SloPick]:
    """For each p95 target: the level with the highest throughput whose p95 meets it."""
    out = []
    for t in targets:
        ok = [(p, p.req_per_s, p.p95) for p in points if p.p95 is not None and p.p95 <= t and p.req_per_s]
        if not ok:
            measured = [(p, p.p95) for p in points if p.p95 is not None]
            low = min(measured, key=lambda x: x[1]) if measured else None
            out.append(SloPick(p95_target_s=t, level=None,
                               note=(f"no level meets it (lowest p95 {low[1]:.2f} s at "
                                     f"c={low[0].concurrency})" if low else "no measured level")))
            continue
        best, thr, p95 = max(ok, key=lambda x: (x[1], -x[0].concurrency))
        out.append(SloPick(p95_target_s=t, level=best.concurrency, req_per_s=thr, p95_s=p95, n=best.n,
                           cost_per_1k=cost_per_1k(thr, cost_per_hour)))
    return out


def serialized_signature(points: list[Point], th: Thresholds) -> Signature | None:
    """Seed 002's lost-concurrency signature: flat throughput while p95 grows ~linearly in c."""
    pts = _measured(points)
    if len(pts) < 2:
        return None
    (lo, lo_thr, lo_p95), (hi, hi_thr, hi_p95) = pts[0], pts[-1]
    speedup = hi_thr / lo_thr
    conc_ratio = hi.concurrency / lo.concurrency
    p95_ratio = hi_p95 / lo_p95
    flat = speedup < 1 + 2 * th.flat_pct
    linear = p95_ratio >= 0.5 * conc_ratio
    return Signature(speedup=speedup, concurrency_ratio=conc_ratio, p95_ratio=p95_ratio,
                     present=bool(flat and linear and conc_ratio >= 2))


def analyse(levels: list[LevelStats], th: Thresholds, slo: tuple[float, ...] = (),
            cost_per_hour: float | None = None) -> SweepAnalysis:
    """Everything derived from the measured levels (sorted by concurrency)."""
    levels = sorted(levels, key=lambda s: s.concurrency)
    rows = scaling([(s.concurrency, s.req_per_s) for s in levels])
    pts = points(levels)
    base = rows[0].concurrency if rows else None
    return SweepAnalysis(
        baseline_level=base,
        baseline_note=None if base == 1 else
        f"level 1 not swept: efficiency uses c={base} as the baseline (thr(N)·{base} / (N·thr({base})))",
        scaling=rows,
        knee=find_knee(rows, th),
        saturation=find_saturation(pts, th),
        slo_policy=slo_policy(pts, slo, cost_per_hour),
        serialized_signature=serialized_signature(pts, th),
        cost=[LevelCost(concurrency=s.concurrency, per_1k_queries=cost_per_1k(s.req_per_s, cost_per_hour),
                        per_1k_correct=cost_per_1k(s.goodput_per_s, cost_per_hour))
              for s in levels] if cost_per_hour is not None else None,
        thresholds=asdict(th), thresholds_text=th.describe(),
    )
