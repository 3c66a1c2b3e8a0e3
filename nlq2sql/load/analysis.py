"""The sweep's analysis: pure arithmetic on measured levels (unit-tested on synthetic numbers).

What each figure means is in :mod:`nlq2sql.load.sweep`'s docstring.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Thresholds", "analyse", "cost_per_1k", "find_knee", "find_saturation", "scaling",
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



def cost_per_1k(req_per_s: float | None, cost_per_hour: float | None) -> float | None:
    """Hourly cost ÷ hourly completed requests × 1000; None when either is unknown or zero."""
    if not req_per_s or cost_per_hour is None:
        return None
    return cost_per_hour / (req_per_s * 3600.0) * 1000.0


def scaling(points: list[tuple[int, float | None]], baseline: tuple[int, float] | None = None
            ) -> list[dict[str, Any]]:
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
        out.append({"concurrency": c, "req_per_s": thr, "efficiency": eff, "marginal": marg})
        prev = (c, thr)
    return out


def find_knee(rows: list[dict[str, Any]], th: Thresholds) -> dict[str, Any]:
    """First level whose efficiency or marginal gain falls below its threshold."""
    for i, r in enumerate(rows):
        if i == 0:
            continue
        reasons = []
        if r["efficiency"] is not None and r["efficiency"] < th.efficiency:
            reasons.append(f"efficiency {r['efficiency']:.0%} < {th.efficiency:.0%}")
        if r["marginal"] is not None and r["marginal"] < th.marginal:
            reasons.append(f"marginal gain {r['marginal']:.2f} < {th.marginal:.2f} lane/request")
        if reasons:
            return {"level": r["concurrency"], "last_efficient": rows[i - 1]["concurrency"],
                    "reasons": reasons}
    if len(rows) < 2:
        return {"level": None, "last_efficient": None, "reasons": ["needs at least two levels"]}
    return {"level": None, "last_efficient": rows[-1]["concurrency"],
            "reasons": ["scaling stayed above both thresholds at every level swept"]}


def find_saturation(points: list[dict[str, Any]], th: Thresholds) -> dict[str, Any]:
    """First level L after which throughput is flat while p95 climbs.

    ``points``: dicts with concurrency, req_per_s and p95, sorted by concurrency.
    """
    pts = [p for p in points if p.get("req_per_s") and p.get("p95")]
    for a, b in zip(pts, pts[1:], strict=False):
        gain = b["req_per_s"] / a["req_per_s"] - 1
        rise = b["p95"] / a["p95"] - 1
        if gain < th.flat_pct and rise > th.p95_rise_pct:
            return {"level": a["concurrency"], "next": b["concurrency"], "throughput_gain": gain,
                    "p95_rise": rise}
    return {"level": None, "note": "not reached within the levels swept"}


def slo_policy(points: list[dict[str, Any]], targets: tuple[float, ...] | list[float],
               cost_per_hour: float | None = None) -> list[dict[str, Any]]:
    """For each p95 target: the level with the highest throughput whose p95 meets it."""
    out = []
    for t in targets:
        ok = [p for p in points if p.get("p95") is not None and p["p95"] <= t and p.get("req_per_s")]
        if not ok:
            measured = [p for p in points if p.get("p95") is not None]
            low = min(measured, key=lambda p: p["p95"]) if measured else None
            out.append({"p95_target_s": t, "level": None,
                        "note": (f"no level meets it (lowest p95 {low['p95']:.2f} s at "
                                 f"c={low['concurrency']})" if low else "no measured level")})
            continue
        best = max(ok, key=lambda p: (p["req_per_s"], -p["concurrency"]))
        out.append({"p95_target_s": t, "level": best["concurrency"], "req_per_s": best["req_per_s"],
                    "p95_s": best["p95"], "n": best.get("n"),
                    "cost_per_1k": cost_per_1k(best["req_per_s"], cost_per_hour)})
    return out


def serialized_signature(points: list[dict[str, Any]], th: Thresholds) -> dict[str, Any] | None:
    """Seed 002's lost-concurrency signature: flat throughput while p95 grows ~linearly in c."""
    pts = [p for p in points if p.get("req_per_s") and p.get("p95")]
    if len(pts) < 2:
        return None
    lo, hi = pts[0], pts[-1]
    speedup = hi["req_per_s"] / lo["req_per_s"]
    conc_ratio = hi["concurrency"] / lo["concurrency"]
    p95_ratio = hi["p95"] / lo["p95"]
    flat = speedup < 1 + 2 * th.flat_pct
    linear = p95_ratio >= 0.5 * conc_ratio
    return {"speedup": speedup, "concurrency_ratio": conc_ratio, "p95_ratio": p95_ratio,
            "present": bool(flat and linear and conc_ratio >= 2)}


def analyse(levels: list[dict[str, Any]], th: Thresholds, slo: tuple[float, ...] = (),
            cost_per_hour: float | None = None) -> dict[str, Any]:
    """Everything derived from the measured levels (sorted by concurrency)."""
    levels = sorted(levels, key=lambda s: s["concurrency"])
    rows = scaling([(s["concurrency"], s.get("req_per_s")) for s in levels])
    pts = [{"concurrency": s["concurrency"], "req_per_s": s.get("req_per_s"),
            "p95": (s.get("latency_s") or {}).get("p95"), "n": s.get("n")} for s in levels]
    base = rows[0]["concurrency"] if rows else None
    return {
        "baseline_level": base,
        "baseline_note": None if base == 1 else
        f"level 1 not swept: efficiency uses c={base} as the baseline (thr(N)·{base} / (N·thr({base})))",
        "scaling": rows,
        "knee": find_knee(rows, th),
        "saturation": find_saturation(pts, th),
        "slo_policy": slo_policy(pts, slo, cost_per_hour),
        "serialized_signature": serialized_signature(pts, th),
        "cost": [{"concurrency": s["concurrency"],
                  "per_1k_queries": cost_per_1k(s.get("req_per_s"), cost_per_hour),
                  "per_1k_correct": cost_per_1k(s.get("goodput_per_s"), cost_per_hour)}
                 for s in levels] if cost_per_hour is not None else None,
        "thresholds": asdict(th), "thresholds_text": th.describe(),
    }
