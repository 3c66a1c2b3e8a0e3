"""Concurrency sweep: throughput, goodput and tail latency per level; knee, saturation, SLO, cost.

Each level is an ordinary eval run (see :mod:`nlq2sql.load.levels`) with the eval set's
real prompts and the structured-output contract, so the workload is ours, not random
tokens.  The analysis is pure arithmetic on the measured levels and is unit-tested on
synthetic numbers, including seed 002's tables:

* scaling efficiency ``thr(N) / (N · thr(1))`` (baseline: the lowest level swept);
* marginal gain per added request ``Δthr / (Δc · thr(1))`` — 1.0 means each added
  request bought a whole single-request lane;
* the **knee**: the first level where efficiency or marginal gain falls below its stated
  threshold (the level before it is the last efficient one);
* the **saturation** point: the first level after which throughput is flat (gain below
  ``flat_pct``) while p95 climbs (by more than ``p95_rise_pct``);
* the SLO policy: for each p95 target, the level with the highest throughput meeting it;
* cost per 1,000 queries: ``hourly cost / (req/s · 3600) · 1000``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..inputs import MAX_REQUESTS, at_most
from ..live import EvalConfig, bound_endpoint
from ..records import write_json_atomic

Progress = Callable[[str], None]


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


@dataclass(frozen=True)
class SweepConfig:
    base: EvalConfig
    levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    requests: int = 64
    slo_p95: tuple[float, ...] = ()
    gpu_cost_per_hour: float | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    warmup: int = 2
    force: bool = False
    duration_s: float | None = None  # per level: stop sending after this long (requests = the cap)


# -- analysis (pure) ----------------------------------------------------------------------

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


# -- rendering --------------------------------------------------------------------------

def fmt_num(v: float | None, fmt: str = "{:.2f}", none: str = "n/a") -> str:
    """A number for a table cell, or ``none`` when it was not measured."""
    return none if v is None else fmt.format(v)


def fmt_lat(p: dict[str, Any] | None, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """p50 / p95 / p99 of a percentile block, or n/a when it holds no sample."""
    p = p or {}
    if not p.get("n"):
        return "n/a"
    return " / ".join(fmt_num(None if p.get(k) is None else p[k] * scale, fmt) for k in ("p50", "p95", "p99"))


def _gauge(g: dict[str, Any] | None) -> str:
    if not g or not g.get("n"):
        return "not observed"
    return f"{g['peak']:.0f} / {g['mean']:.1f} (n={g['n']})"


def level_table(levels: list[dict[str, Any]], analysis: dict[str, Any],
                cost_per_hour: float | None) -> list[str]:
    eff = {r["concurrency"]: r for r in analysis["scaling"]}
    md = ["| c | n (ok) | req/s | goodput/s | out tok/s | e2e p50 / p95 / p99 (s) | TTFT p50 / p95 / p99 (s) "
          "| ITL p50 / p95 / p99 (ms) | efficiency | marginal | errors | cost / 1k |",
          "|---:|---:|---:|---:|---:|---|---|---|---:|---:|---|---:|"]
    for s in levels:
        r = eff.get(s["concurrency"], {})
        errs = ", ".join(f"{k} {v}" for k, v in s["errors"].items()) or "none"
        cost = cost_per_1k(s.get("req_per_s"), cost_per_hour)
        md.append(f"| {s['concurrency']} | {s['n']} ({s['ok']}) | {fmt_num(s.get('req_per_s'))} "
                  f"| {fmt_num(s.get('goodput_per_s'))} | {fmt_num(s.get('output_tok_per_s'), '{:.1f}')} "
                  f"| {fmt_lat(s['latency_s'])} | {fmt_lat(s['ttft_s'], fmt='{:.3f}')} "
                  f"| {fmt_lat(s['itl_s'], 1000, '{:.1f}')} | {fmt_num(r.get('efficiency'), '{:.0%}')} "
                  f"| {fmt_num(r.get('marginal'))} | {errs} | {fmt_num(cost, '${:.4f}')} |")
    return md


def server_table(levels: list[dict[str, Any]]) -> list[str]:
    md = ["| c | client in flight peak / mean (n) | server running peak / mean (samples) "
          "| server waiting peak / mean (samples) | KV usage peak (samples) | prefix hit rate "
          "| harness CPU (share of a core, ms/request) |",
          "|---:|---|---|---|---|---:|---|"]
    for s in levels:
        c, sv = s.get("client") or {}, s["server"]
        kv = sv.get("kv_cache_usage") or {}
        kv_txt = f"{kv['peak']:.1%} (n={kv['n']})" if kv.get("n") else "not observed"
        cpu = (f"{c['cpu_share_of_core']:.0%}, {c['cpu_ms_per_request']:.1f} ms"
               if c.get("cpu_share_of_core") is not None else "not measured")
        infl = (f"{c['inflight_peak']} / {c['inflight_mean']:.1f} (n={c['inflight_n']})"
                if c.get("inflight_peak") is not None else "n/a")
        hit = sv.get("prefix_cache_hit_rate")
        md.append(f"| {s['concurrency']} | {infl} | {_gauge(sv.get('running'))} | {_gauge(sv.get('waiting'))} "
                  f"| {kv_txt} | {fmt_num(hit, '{:.1%}', 'not observed')} | {cpu} |")
    return md


def render_markdown(result: dict[str, Any]) -> str:
    a, levels, cfg = result["analysis"], result["levels"], result["config"]
    cost = cfg.get("gpu_cost_per_hour")
    md = [f"# Concurrency sweep · {result['model']} · {result['evalset']}", ""]
    md.append(f"Endpoint: {result['endpoint_label']}. Workload: the eval set's real prompts with the "
              f"structured-output contract ({cfg['structured']}), max_tokens {cfg['max_tokens']}, " +
              (f"at most {cfg['requests']} requests or {cfg['duration_s']:g} s per level" if cfg.get("duration_s")
               else f"{cfg['requests']} requests per level") + " (items cycled), closed loop.")
    if result.get("cpu_label"):
        md.append(f"\n**{result['cpu_label']}**")
    md += ["", "## Throughput and latency", "",
           "req/s and goodput count requests that completed (goodput: schema-valid *and* correct "
           "final answers) over the level's wall time; percentiles are over completed requests "
           "(n ok); ITL is each request's mean inter-token gap.", ""]
    md += level_table(levels, a, cost)
    md += ["", "## Server and client during each level", "",
           "Server gauges come from its own /metrics, sampled every "
           f"{levels[0]['server'].get('interval_s') or 'n/a'} s (peak / mean, sample count); "
           "client in-flight is reconstructed from the records' start and end times.", ""]
    md += server_table(levels)
    md += ["", "## Knee and saturation", "", f"Thresholds: {a['thresholds_text']}.", ""]
    if a.get("baseline_note"):
        md.append(f"Note: {a['baseline_note']}.\n")
    k = a["knee"]
    if k["level"] is not None:
        md.append(f"- **Knee: c={k['level']}** ({'; '.join(k['reasons'])}); last efficient level "
                  f"c={k['last_efficient']}.")
    else:
        md.append(f"- Knee: none found ({'; '.join(k['reasons'])}).")
    s = a["saturation"]
    if s["level"] is not None:
        md.append(f"- **Saturation: c={s['level']}** (c={s['next']} gained {s['throughput_gain']:+.0%} "
                  f"throughput while p95 rose {s['p95_rise']:+.0%}).")
    else:
        md.append(f"- Saturation: {s['note']}.")
    sig = a.get("serialized_signature")
    if sig and sig["present"]:
        md.append(f"- **Serialized signature**: throughput ×{sig['speedup']:.2f} over a ×"
                  f"{sig['concurrency_ratio']:.0f} concurrency range while p95 grew ×{sig['p95_ratio']:.1f}"
                  " — concurrent requests are not becoming batched work; run `nlq2sql probe serialization`.")
    if a["slo_policy"]:
        md += ["", "## SLO policy (best level meeting each p95 target)", "",
               "| p95 target | level | req/s | p95 | n | cost / 1k |", "|---:|---:|---:|---:|---:|---:|"]
        for p in a["slo_policy"]:
            if p["level"] is None:
                md.append(f"| ≤ {p['p95_target_s']:g} s | none | | | | {p['note']} |")
            else:
                md.append(f"| ≤ {p['p95_target_s']:g} s | c={p['level']} | {p['req_per_s']:.2f} "
                          f"| {p['p95_s']:.2f} s | {p['n']} | {fmt_num(p['cost_per_1k'], '${:.4f}')} |")
    if cost is not None:
        md += ["", f"Cost assumes ${cost:g} per GPU-hour: cost / 1k = hourly cost ÷ (req/s · 3600) × 1000"
               " (per 1k correct answers: the same with goodput)."]
        for c in a["cost"] or []:
            md.append(f"- c={c['concurrency']}: {fmt_num(c['per_1k_queries'], '${:.4f}')} per 1k queries, "
                      f"{fmt_num(c['per_1k_correct'], '${:.4f}')} per 1k correct answers")
    if result.get("notes"):
        md += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    if result.get("plots"):
        md += ["", "## Plots", ""] + [f"![{k}]({Path(v).name})" for k, v in result["plots"].items()]
    return "\n".join(md) + "\n"


def plot(result: dict[str, Any], out: Path) -> dict[str, str]:
    """throughput_vs_p95.png (knee and saturation marked) and efficiency.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels, a = result["levels"], result["analysis"]
    pts: list[tuple[int, float, float]] = [
        (s["concurrency"], s["latency_s"]["p95"], s["req_per_s"]) for s in levels
        if (s["latency_s"] or {}).get("p95") is not None and s.get("req_per_s") is not None]
    paths: dict[str, str] = {}
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    if pts:
        ax.plot([p[1] for p in pts], [p[2] for p in pts], "o-", color="tab:blue")
        for c, p95, thr in pts:
            ax.annotate(f"c={c}", (p95, thr), textcoords="offset points", xytext=(5, -10), fontsize=8)
        marks = (("knee", a["knee"].get("level"), "r*", 16),
                 ("saturation", a["saturation"].get("level"), "kX", 10))
        for label, lvl, style, size in marks:
            hit = [p for p in pts if p[0] == lvl]
            if hit:
                ax.plot(hit[0][1], hit[0][2], style, markersize=size, label=f"{label} (c={lvl})")
        for i, p in enumerate(a.get("slo_policy") or []):
            ax.axvline(p["p95_target_s"], color="tab:gray", ls=":", lw=1,
                       label="p95 target(s)" if i == 0 else None)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
    ax.set_xlabel("p95 end-to-end latency (s)")
    ax.set_ylabel("throughput (completed req/s)")
    ax.set_title(f"throughput vs p95 · {result['model']}", fontsize=10)
    ax.grid(alpha=0.3)
    p = out / "throughput_vs_p95.png"
    fig.savefig(p, dpi=100, bbox_inches="tight")
    plt.close(fig)
    paths["throughput_vs_p95"] = str(p)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    rows = [r for r in a["scaling"] if r["efficiency"] is not None]
    if rows:
        ax.plot([r["concurrency"] for r in rows], [r["efficiency"] for r in rows], "o-")
        ax.axhline(a["thresholds"]["efficiency"], color="tab:red", ls="--", lw=1,
                   label=f"threshold {a['thresholds']['efficiency']:.0%}")
        if a["knee"].get("level") is not None:
            ax.axvline(a["knee"]["level"], color="tab:red", ls=":", lw=1, label=f"knee c={a['knee']['level']}")
        ax.set_xscale("log", base=2)
        ax.set_xticks([r["concurrency"] for r in rows], [str(r["concurrency"]) for r in rows])
        ax.legend(fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_xlabel("concurrency")
    ax.set_ylabel(f"scaling efficiency thr(N) / (N·thr({a.get('baseline_level')}))")
    ax.grid(alpha=0.3)
    p = out / "efficiency.png"
    fig.savefig(p, dpi=100, bbox_inches="tight")
    plt.close(fig)
    paths["efficiency"] = str(p)
    return paths


# -- running ----------------------------------------------------------------------------

def prepare_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory", field="--out")
    if out.exists() and any(out.iterdir()) and not force:
        raise InputError(f"{out} exists and is not empty; pass --force to replace it", field="--out")
    if out.exists() and force:
        shutil.rmtree(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {out}: {exc.strerror}", field="--out") from None


@contextlib.contextmanager
def fresh_out(out: Path, force: bool) -> Iterator[None]:
    """:func:`prepare_out`; when the block then fails, ``out`` is left as it was found before
    anything was measured: absent, or (an existing directory) empty."""
    existed = out.is_dir()
    prepare_out(out, force)
    try:
        yield
    except BaseException:
        if not existed:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for p in out.iterdir():
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink()
        raise


def validate(cfg: SweepConfig) -> None:
    if not cfg.levels or any(c < 1 for c in cfg.levels):
        raise InputError("every level must be at least 1", field="--concurrency")
    if cfg.requests < 1:
        raise InputError(f"must be at least 1, got {cfg.requests}", field="--requests")
    if cfg.warmup < 0:
        raise InputError(f"must be at least 0, got {cfg.warmup}", field="--warmup")
    at_most(cfg.requests, MAX_REQUESTS, "--requests")
    at_most(cfg.warmup, MAX_REQUESTS, "--warmup")
    if cfg.duration_s is not None and not (cfg.duration_s > 0 and math.isfinite(cfg.duration_s)):
        raise InputError(f"must be positive and finite, got {cfg.duration_s}", field="--duration")
    if any(not (t > 0 and math.isfinite(t)) for t in cfg.slo_p95):
        raise InputError("p95 targets must be positive, finite seconds", field="--slo-p95")
    if cfg.gpu_cost_per_hour is not None and cfg.gpu_cost_per_hour < 0:
        raise InputError("must not be negative", field="--gpu-cost-per-hour")
    th = cfg.thresholds
    for name, v in (("--efficiency-threshold", th.efficiency), ("--marginal-threshold", th.marginal),
                    ("--flat-pct", th.flat_pct), ("--flat-pct", th.p95_rise_pct)):
        if not 0 <= v <= 1:  # also refuses NaN
            raise InputError(f"must be between 0 and 1, got {v}", field=name)


def begin_levels(base: EvalConfig, requests: int, warmup: int, force: bool, who: str) -> tuple[Path, list[str]]:
    """Common start of every multi-level load run: bound endpoint, fresh out dir, the expanded
    eval set and the uncounted warm-up; returns the eval set path and the notes so far.

    The options, key and endpoint are checked before the output directory is touched, and a
    failure before the first level (a bad eval set or prompt, the warm-up failing) leaves it
    as it was found: a command that measured nothing leaves nothing behind."""
    from ..live import preflight
    from .levels import expand_evalset, run_level

    if base.endpoint is None:
        raise InputError(f"{who} needs a bound endpoint (use bound_endpoint)", field="--endpoint")
    preflight(base)
    notes = []
    with fresh_out(base.out, force):
        path = expand_evalset(base.evalset, requests, base.out, base.semantic_model)
        if warmup:
            wpath = expand_evalset(base.evalset, warmup, base.out / "warmup", base.semantic_model)
            run_level(base, wpath, 1, base.out / "warmup" / "run")
            notes.append(f"{warmup} warm-up request(s) at c=1 ran first and are not counted.")
    return path, notes


def run_sweep(cfg: SweepConfig, server_info: dict[str, Any] | None = None,
              progress: Progress | None = None) -> dict[str, Any]:
    """Run every level against ``cfg.base.endpoint`` (must be set); write and return the result."""
    from .levels import run_level

    validate(cfg)
    out = cfg.base.out
    levels_sorted = tuple(sorted(set(cfg.levels)))
    evalset_path, notes = begin_levels(cfg.base, cfg.requests, cfg.warmup, cfg.force, "run_sweep")
    stats = []
    t0 = time.time()
    level_base = replace(cfg.base, load=replace(cfg.base.load, duration_s=cfg.duration_s))
    for c in levels_sorted:
        st = run_level(level_base, evalset_path, c, out / "levels" / f"c{c}")
        stats.append(st)
        if progress:
            progress(f"c={c}: {st['ok']}/{st['n']} ok, {fmt_num(st.get('req_per_s'))} req/s, "
                     f"p95 {fmt_num((st['latency_s'] or {}).get('p95'))} s")
    for st in stats:
        if st.get("not_sent"):
            notes.append(f"c={st['concurrency']}: the {cfg.duration_s:g} s duration ended the level; "
                         f"{st['n']} requests sent, {st['not_sent']} of the {cfg.requests}-request cap not sent.")
    for c in levels_sorted:
        if cfg.duration_s is None and cfg.requests < 4 * c:
            notes.append(f"c={c}: {cfg.requests} requests = {cfg.requests / c:.1f}× the concurrency, so "
                         "ramp-up and drain are a large part of the level (≥ 4× recommended).")
    loads = [v for s in stats for k, v in (s.get("machine") or {}).items() if k.startswith("loadavg")]
    if loads:
        notes.append(f"Machine load average (1 min) ranged {min(loads):.1f}–{max(loads):.1f} on "
                     f"{os.cpu_count()} CPUs at level starts and ends (it includes the harness and a local "
                     "server; more means other processes competed for the CPU).")
    errs = sum(sum(s["errors"].values()) for s in stats)
    if errs:
        notes.append(f"{errs} request(s) failed across levels; see the errors column.")
    if not stats[0]["server"]["observed"]:
        notes.append("The endpoint exposes no readable /metrics: server running/waiting, KV usage and "
                     "prefix hits are not observed (not zero).")
    result = assemble(cfg, stats, server_info or {"endpoint": cfg.base.endpoint}, notes)
    result["elapsed_s"] = time.time() - t0
    return write_result(out, result)


def assemble(cfg: SweepConfig, stats: list[dict[str, Any]], server_info: dict[str, Any],
             notes: list[str]) -> dict[str, Any]:
    base = cfg.base
    local = bool(server_info.get("started_by_us"))
    return {
        "kind": "sweep", "created": time.time(),
        "model": base.model, "evalset": base.evalset,
        "endpoint_label": ("local vLLM started for the sweep" + (
            f" (max-num-seqs {server_info.get('max_num_seqs')})" if server_info.get("max_num_seqs") else "")
                           if local else str(server_info.get("endpoint"))),
        "cpu_label": ("CPU-only vLLM on this machine: these timings rank configurations here; "
                      "they are not GPU numbers.") if local else None,
        "server": server_info,
        "config": {"levels": sorted(set(cfg.levels)), "requests": cfg.requests,
                   "slo_p95": list(cfg.slo_p95), "gpu_cost_per_hour": cfg.gpu_cost_per_hour,
                   "max_tokens": base.sampling.max_tokens, "structured": base.sampling.structured,
                   "prompt": base.prompt, "warmup": cfg.warmup, "duration_s": cfg.duration_s},
        "levels": stats,
        "analysis": analyse(stats, cfg.thresholds, cfg.slo_p95, cfg.gpu_cost_per_hour),
        "notes": notes,
    }


def write_result(out: Path, result: dict[str, Any]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    result["plots"] = plot(result, out)
    write_json_atomic(out / "sweep.json", result)
    (out / "sweep.md").write_text(render_markdown(result))
    return result


def rerender(out: Path, cfg: SweepConfig) -> dict[str, Any]:
    """Re-analyse a recorded sweep (new thresholds, SLOs or cost) without re-querying."""
    from .levels import load_level_dirs

    old = json.loads((out / "sweep.json").read_text())
    dirs = [Path(s["run_dir"]) for s in old["levels"]]
    stats = load_level_dirs(dirs)
    for s, o in zip(stats, sorted(old["levels"], key=lambda x: x["concurrency"]), strict=False):
        s["client"] = o.get("client") or s["client"]
        if o.get("machine"):
            s["machine"] = o["machine"]
    old["levels"] = stats
    old["config"].update({"slo_p95": list(cfg.slo_p95), "gpu_cost_per_hour": cfg.gpu_cost_per_hour})
    old["analysis"] = analyse(stats, cfg.thresholds, cfg.slo_p95, cfg.gpu_cost_per_hour)
    return write_result(out, old)


# -- server sweep -----------------------------------------------------------------------

SERVER_KNOBS = {"max-num-seqs": "max_num_seqs"}


def parse_server_sweep(text: str) -> tuple[str, tuple[int, ...]]:
    """``max-num-seqs=1,4,16`` → ("max_num_seqs", (1, 4, 16))."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or key not in SERVER_KNOBS:
        raise InputError(f"expected NAME=V1,V2,… with NAME one of {', '.join(SERVER_KNOBS)}; got {text!r}",
                         field="--server-sweep")
    try:
        vals = tuple(int(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise InputError(f"values must be integers, got {values!r}", field="--server-sweep") from None
    if not vals or any(v < 1 for v in vals):
        raise InputError("every value must be at least 1", field="--server-sweep")
    return SERVER_KNOBS[key], vals


def run_server_sweep(cfg: SweepConfig, knob: str, values: tuple[int, ...],
                     progress: Progress | None = None) -> dict[str, Any]:
    """Restart a local server per setting and sweep each; a combined table compares them."""
    if cfg.base.endpoint is not None:
        raise InputError("--server-sweep restarts a local server; it cannot be used with --endpoint",
                         field="--server-sweep")
    validate(cfg)
    prepare_out(cfg.base.out, cfg.force)
    runs = []
    for v in values:
        sub = cfg.base.out / f"{knob.replace('_', '-')}-{v}"
        if progress:
            progress(f"starting a local server with {knob.replace('_', '-')}={v}")
        setting: dict[str, Any] = {knob: v}
        with bound_endpoint(replace(cfg.base, server=replace(cfg.base.server, **setting))) as (bound, info):
            res = run_sweep(replace(cfg, base=replace(bound, out=sub), force=True), info, progress)
        runs.append({"value": v, "dir": str(sub), "result": res})
    combined = {"kind": "server-sweep", "knob": knob, "values": list(values),
                "settings": [summarise_setting(r) for r in runs]}
    write_json_atomic(cfg.base.out / "server-sweep.json", combined)
    (cfg.base.out / "server-sweep.md").write_text(render_server_sweep(combined, runs))
    return combined


def summarise_setting(run: dict[str, Any]) -> dict[str, Any]:
    res = run["result"]
    lv = [s for s in res["levels"] if s.get("req_per_s")]
    peak = max(lv, key=lambda s: s["req_per_s"]) if lv else None
    return {"value": run["value"], "dir": run["dir"],
            "peak_req_per_s": peak["req_per_s"] if peak else None,
            "peak_at": peak["concurrency"] if peak else None,
            "p95_at_peak": (peak["latency_s"] or {}).get("p95") if peak else None,
            "n_at_peak": peak["n"] if peak else None,
            "knee": res["analysis"]["knee"]["level"],
            "saturation": res["analysis"]["saturation"].get("level"),
            "running_peak": max((s["server"]["running"].get("peak") or 0 for s in res["levels"]), default=None),
            "waiting_peak": max((s["server"]["waiting"].get("peak") or 0 for s in res["levels"]), default=None),
            "levels": [(s["concurrency"], s.get("req_per_s"), (s["latency_s"] or {}).get("p95"))
                       for s in res["levels"]]}


def render_server_sweep(combined: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    knob = combined["knob"].replace("_", "-")
    md = [f"# Server sweep over {knob}", "",
          "Each setting restarted the local CPU vLLM and ran the full concurrency sweep "
          "(its own sweep.md in the sub-directory).", "",
          f"| {knob} | peak req/s (at c, n) | p95 at peak | knee | saturation | server running peak | "
          "server waiting peak |", "|---:|---|---:|---:|---:|---:|---:|"]
    for s in combined["settings"]:
        md.append(f"| {s['value']} | {fmt_num(s['peak_req_per_s'])} (c={s['peak_at']}, n={s['n_at_peak']}) "
                  f"| {fmt_num(s['p95_at_peak'])} s | {s['knee'] or 'none'} | {s['saturation'] or 'none'} "
                  f"| {s['running_peak']} | {s['waiting_peak']} |")
    levels = sorted({c for s in combined["settings"] for c, _, _ in s["levels"]})
    md += ["", "req/s by concurrency:", "", "| " + knob + " | " + " | ".join(f"c={c}" for c in levels) + " |",
           "|---:|" + "---:|" * len(levels)]
    for s in combined["settings"]:
        by = {c: r for c, r, _ in s["levels"]}
        md.append(f"| {s['value']} | " + " | ".join(fmt_num(by.get(c)) for c in levels) + " |")
    md.append("\nCPU-only vLLM: these timings rank settings on this machine; they are not GPU numbers.")
    return "\n".join(md) + "\n"
