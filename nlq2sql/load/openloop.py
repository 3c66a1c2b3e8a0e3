"""Open-loop rate sweep: Poisson arrivals at offered rates, and the rate the endpoint sustains.

A closed loop hides queueing; an open loop sends on a seeded schedule whatever the server does. A
full in-flight cap delays an arrival (never drops it), recorded as ``queued_s``, so latency from
arrival counts every second a user waits. A level is **sustained** when the median latency of the
last third of arrivals is ≤ ``growth`` × the first third's and nothing failed; it is judged only
in steady state (at most a third of arrivals in flight at once), else "too short". Achieved ÷
offered is shown but not used: a short level's drain lowers it without queueing."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pydantic import field_validator, model_validator

from nlq2sql.errors import InputError
from nlq2sql.load.analysis import cost_per_1k
from nlq2sql.load.contract import Arrivals, LevelStats, endpoint_labels
from nlq2sql.load.driver import LevelContext, LoadMode, LoadSettings, next_in, option, register
from nlq2sql.load.levels import run_level, stats_from_run
from nlq2sql.load.render import fmt_lat, fmt_num
from nlq2sql.load.results import RateAnalysis, RateRow, RateSettings, RateSlo, RateSweepResult
from nlq2sql.load.slo import Slo, correct_goodput, parse_slos
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.rundir import RunDir

if TYPE_CHECKING:
    from nlq2sql.load.output import Plot


class RateSweepConfig(LoadSettings):
    """An open-loop rate sweep's settings (the one declaration)."""

    rates: tuple[float, ...] = option((), "--rate", min_length=1)
    requests: int = option(64, "--requests", ge=3, le=100_000)  # per level: the schedule's length (or the cap)
    max_in_flight: int = option(32, "--concurrency", ge=1)
    duration_s: float | None = option(None, "--duration", gt=0, allow_inf_nan=False)
    slo_p95: tuple[float, ...] = option((), "--slo-p95")
    gpu_cost_per_hour: float | None = option(None, "--gpu-cost-per-hour", ge=0)
    growth: float = option(1.5, "--growth", gt=1, allow_inf_nan=False)  # sustained: late ≤ growth × early median
    slo: tuple[Slo, ...] = option((), "--slo")  # per-request SLO of correct goodput

    _slos = field_validator("slo", mode="before")(parse_slos)

    @model_validator(mode="after")
    def _checks(self) -> RateSweepConfig:
        if any(not (r > 0 and math.isfinite(r)) for r in self.rates):
            raise InputError("every rate must be positive and finite (requests per second)", field="--rate")
        return self


@register
class RateSweepMode(LoadMode[RateSweepConfig, RateSweepResult, float, LevelStats]):
    """Open loop: one level per offered rate, lowest first, at most ``max_in_flight`` in flight."""

    name: ClassVar[str] = "rate-sweep"
    stem: ClassVar[str] = "rate-sweep"
    settings_model: ClassVar[type[LoadSettings]] = RateSweepConfig

    @property
    def plot(self) -> Plot[RateSweepResult]:  # type: ignore[override]
        return ("plot", plot)

    def who(self) -> str:
        return "run_rate_sweep"  # what job.json said before the driver: older sweeps still resume

    def next_level(self, settings: RateSweepConfig, done: list[LevelStats]) -> float | None:
        return next_in(sorted(set(settings.rates)), done)

    def run_level(self, ctx: LevelContext[RateSweepConfig], level: float) -> LevelStats:
        s = ctx.settings
        base = replace(s.base, load=replace(s.base.load, duration_s=s.duration_s))
        d = ctx.out / "levels" / f"r{level:g}"
        run_level(base, ctx.evalset_path, s.max_in_flight, d, rate=level, reuse=s.resume)
        st = rate_level(d)
        if s.slo:
            st.correct_goodput_per_s = correct_goodput(list(RunDir(d).records()), st.wall_s, s.slo,
                                                       open_loop=True)
        if st.not_sent:
            ctx.notes.append(f"rate {level:g}: the {s.duration_s:g} s duration ended the schedule after "
                             f"{st.n} arrivals ({st.not_sent} of the cap not sent).")
        return st

    def describe(self, level: float, stats: LevelStats) -> str:
        arrival = stats.latency_from_arrival_s
        return (f"rate {level:g}/s: {stats.ok}/{stats.n} ok, achieved "
                f"{fmt_num(stats.req_per_s, '{:.3f}')} req/s, p95 from arrival "
                f"{fmt_num(arrival.p95 if arrival else None)} s")

    def analyse(self, ctx: LevelContext[RateSweepConfig], done: list[LevelStats]) -> RateSweepResult:
        cfg, info = ctx.settings, ctx.server_info
        label, cpu = endpoint_labels("local vLLM started for the sweep" if info.started_by_us else None,
                                     info.endpoint)
        return RateSweepResult(
            kind="rate-sweep", created=time.time(), elapsed_s=time.time() - ctx.started,
            model=cfg.base.model, evalset=cfg.base.evalset, server=info, endpoint_label=label, cpu_label=cpu,
            config=RateSettings(
                rates=sorted(set(cfg.rates)), requests=cfg.requests, max_in_flight=cfg.max_in_flight,
                duration_s=cfg.duration_s, arrival_seed=cfg.base.load.arrival_seed, slo_p95=list(cfg.slo_p95),
                gpu_cost_per_hour=cfg.gpu_cost_per_hour, max_tokens=cfg.base.sampling.max_tokens,
                structured=cfg.base.sampling.structured, growth=cfg.growth,
                **({"slo": [x.text for x in cfg.slo]} if cfg.slo else {})),
            levels=done,
            analysis=analyse_rates(done, cfg.growth, cfg.slo_p95, cfg.gpu_cost_per_hour),
            notes=ctx.notes,
        )

    def render(self, result: RateSweepResult) -> str:
        return render_markdown(result)

    def wrote(self, out: Path) -> str:
        return f"{out / 'rate-sweep.json'}, {out / 'rate-sweep.md'} and a plot"


def arrival_stats(records: list[ItemRecord]) -> Arrivals:
    """Realised arrival rate and queue growth (late vs early arrivals) from one level's records."""
    arr = sorted((at, r.load.latency_from_arrival_s) for r in records if (at := r.load.scheduled))
    rate = (len(arr) - 1) / (arr[-1][0] - arr[0][0]) if len(arr) >= 2 and arr[-1][0] > arr[0][0] else None
    third = len(arr) // 3
    early = [v for _, v in arr[:third] if v is not None]
    late = [v for _, v in arr[len(arr) - third:] if v is not None] if third else []
    if not (early and late):
        return Arrivals(n=len(arr), realised_rate=rate, early_median_s=None, late_median_s=None, growth=None)
    e, la = statistics.median(early), statistics.median(late)
    return Arrivals(n=len(arr), realised_rate=rate, early_median_s=e, late_median_s=la, growth=la / e if e else None)


def rate_level(run_dir: Path) -> LevelStats:
    """A level's stats (as ``level.json`` holds them) with its arrivals."""
    st = stats_from_run(run_dir)
    st.arrivals = arrival_stats(list(RunDir(run_dir).records()))
    return st


def _p95_from_arrival(s: LevelStats) -> float | None:
    return s.latency_from_arrival_s.p95 if s.latency_from_arrival_s else None


def analyse_rates(levels: list[LevelStats], growth: float, slo: tuple[float, ...] = (),
                  cost_per_hour: float | None = None) -> RateAnalysis:
    rows = []
    for s in levels:
        a, offered = s.arrivals, s.offered_rate
        g = a.growth if a else None
        failed = s.n - s.ok
        peak = s.client.inflight_peak
        steady = peak is not None and peak * 3 <= s.n
        verdict: bool | None = None
        if failed or (steady and g is not None):
            verdict = failed == 0 and g is not None and g <= growth
        rows.append(RateRow(offered=offered,  # type: ignore[arg-type]  # a rate level has one
                               achieved=s.req_per_s,
                               achieved_ratio=(s.req_per_s / offered) if s.req_per_s and offered else None,
                               growth=g, failed=failed, inflight_peak=peak, steady=steady, sustained=verdict))
    sustained = [r for r in rows if r.sustained is True]
    best = max(sustained, key=lambda r: r.offered) if sustained else None
    first_bad = next((r for r in sorted(rows, key=lambda r: r.offered) if r.sustained is False), None)
    policy = []
    judged = {r.offered for r in rows if r.sustained is True}  # a growing queue's p95 only grows
    for t in slo:
        ok = [(s, p) for s in levels if (p := _p95_from_arrival(s)) is not None and p <= t
              and s.offered_rate in judged]
        pick = max(ok, key=lambda x: x[0].offered_rate) if ok else None  # type: ignore[arg-type,return-value]
        policy.append(RateSlo(p95_target_s=t, rate=pick[0].offered_rate if pick else None,
                                 p95_s=pick[1] if pick else None))
    return RateAnalysis(
        rows=rows, max_sustained_rate=best.offered if best else None,
        first_unsustained_rate=first_bad.offered if first_bad else None,
        cost_per_1k_at_max_sustained=cost_per_1k(best.achieved, cost_per_hour) if best else None,
        too_short=[r.offered for r in rows if r.sustained is None],
        rule=(f"sustained = median latency from arrival of the last third of arrivals ≤ {growth:g}× "
              "that of the first third, and no failed request; judged only when at most a third of "
              "the level's arrivals were in flight at once (else: too short)"),
        slo_policy=policy)


_VERDICT = {True: "yes", False: "no", None: "too short"}


def render_markdown(res: RateSweepResult) -> str:
    """The report, from the typed result (a dict is validated into it first)."""
    a, cfg = res.analysis, res.config
    bound = (f"at most {cfg.requests} arrivals or {cfg.duration_s:g} s per level" if cfg.duration_s
             else f"{cfg.requests} arrivals per level")
    md = [f"# Open-loop rate sweep · {res.model} · {res.evalset}", "",
          f"Endpoint: {res.endpoint_label}. Poisson arrivals (seed {cfg.arrival_seed}), {bound}, "
          f"at most {cfg.max_in_flight} in flight (a full cap delays an arrival; the wait counts in "
          f"latency from arrival). Real eval prompts, structured outputs ({cfg.structured}), "
          f"max_tokens {cfg.max_tokens}."]
    if res.cpu_label:
        md.append(f"\n**{res.cpu_label}**")
    cg = f"| correct goodput/s ({' & '.join(cfg.slo)}) " if cfg.slo else ""
    md += ["", "| offered req/s | realised arrivals/s | n (ok) | achieved req/s | goodput/s " + cg +
           "| from arrival p50 / p95 / p99 (s) | client queue p50 / p95 / p99 (s) | TTFT p50 / p95 / p99 (s) "
           "| late ÷ early median | client in flight peak | server waiting peak (samples) | sustained |",
           "|---:|---:|---:|---:|---:|" + ("---:|" if cfg.slo else "") + "---|---|---|---:|---:|---|---|"]
    for s, r in zip(res.levels, a.rows, strict=True):
        w = s.server.waiting
        wait = f"{w.peak:.0f} (n={w.n})" if w.n and w.peak is not None else "not observed"
        md.append(f"| {fmt_num(s.offered_rate, '{:g}')} "
                  f"| {fmt_num(s.arrivals.realised_rate if s.arrivals else None, '{:.3f}')} "
                  f"| {s.n} ({s.ok}) | {fmt_num(s.req_per_s, '{:.3f}')} "
                  f"| {fmt_num(s.goodput_per_s, '{:.3f}')} "
                  + (f"| {fmt_num(s.correct_goodput_per_s, '{:.3f}')} " if cfg.slo else "")
                  + f"| {fmt_lat(s.latency_from_arrival_s)} | {fmt_lat(s.queued_s)} "
                  f"| {fmt_lat(s.ttft_s, fmt='{:.3f}')} "
                  f"| {fmt_num(r.growth)} | {r.inflight_peak if r.inflight_peak is not None else 'n/a'} "
                  f"| {wait} | {_VERDICT[r.sustained]} |")
    md += ["", f"Rule: {a.rule}.", "",
           "**Highest sustained offered rate: "
           f"{fmt_num(a.max_sustained_rate, '{:g}', 'none of those tried')} req/s**"
           + (f"; first unsustained: {a.first_unsustained_rate:g} req/s." if a.first_unsustained_rate else ".")]
    if a.too_short:
        md.append(f"Too short to judge at {', '.join(f'{r:g}' for r in a.too_short)} req/s: more than a third "
                  "of the arrivals were in flight at once, so all may have shared one batch; raise --requests "
                  "or --duration.")
    if a.cost_per_1k_at_max_sustained is not None and cfg.gpu_cost_per_hour is not None:
        md.append(f"Cost per 1,000 queries at that rate: ${a.cost_per_1k_at_max_sustained:.4f} "
                  f"(at ${cfg.gpu_cost_per_hour:g}/h).")
    if a.slo_policy:
        md += ["", "| p95 target (s), from arrival | highest sustained offered rate meeting it | its p95 (s) |",
               "|---:|---:|---:|"]
        md += [f"| {p.p95_target_s:g} | {fmt_num(p.rate, '{:g}', 'none')} | {fmt_num(p.p95_s)} |"
               for p in a.slo_policy]
    md += [f"\n- {n}" for n in res.notes]
    return "\n".join(md) + "\n"


def plot(res: RateSweepResult, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lv = [s for s in res.levels if s.req_per_s is not None and s.offered_rate is not None]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    xs = [s.offered_rate or 0.0 for s in lv]
    ax.plot(xs, [s.req_per_s or 0.0 for s in lv], "o-", label="achieved req/s")
    ax.plot(xs, xs, ":", color="tab:gray", label="offered = achieved")
    ax.set_xlabel("offered rate (req/s, Poisson)")
    ax.set_ylabel("req/s")
    ax2 = ax.twinx()
    ax2.plot(xs, [(s.latency_from_arrival_s.p95 if s.latency_from_arrival_s else None) or float("nan")
                  for s in lv], "s--", color="tab:red", label="p95 from arrival (s)")
    ax2.set_ylabel("p95 latency from arrival (s)")
    fig.legend(fontsize=8, loc="upper left")
    ax.set_title(f"{res.model}: open loop")
    fig.tight_layout()
    path = out / "rate_vs_latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


__all__ = ["RateSweepConfig", "RateSweepMode", "analyse_rates", "arrival_stats", "render_markdown"]
