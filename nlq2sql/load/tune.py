"""``tune``: the load to deploy at — the most *correct answers per second within the SLO*.

Each probe is a scored eval run at one concurrency or Poisson rate (items repeated in seeded order
when short). It is **eligible** when every SLO percentile holds and accuracy is ≥ ``--min-accuracy``
and not significantly below the baseline's (c=1 or the lowest rate; one-sided exact McNemar at
``alpha``). The search bisects geometrically between the highest eligible and lowest ineligible
load from the baseline and ``--hi``; the **operating point** is the eligible probe with the most
correct goodput (ties: higher load). Choices depend only on measured probes, whose runs are kept,
so a resumed tune equals an uninterrupted one; the report re-renders from ``tune.json`` alone."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import field_validator, model_validator

from nlq2sql.errors import InputError
from nlq2sql.load.contract import endpoint_labels
from nlq2sql.load.driver import LevelContext, LoadMode, LoadSettings, option, register
from nlq2sql.load.levels import run_level
from nlq2sql.load.output import Plot
from nlq2sql.load.render import fmt_num
from nlq2sql.load.slo import Slo, is_correct, parse_slos, request_value
from nlq2sql.load.tune_results import OperatingPoint, ProbeCounts, ProbeRow, TuneConfig, TuneResult, TuneVerdict
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.rundir import RunDir
from nlq2sql.run.endpoint_facts import EndpointFacts
from nlq2sql.stages.score import mcnemar_exact, rate

__all__ = ["CI_METHOD", "Probe", "TuneMode", "TuneSettings", "assemble", "bisect_next", "judge", "plot_curve",
           "probe_from_records", "render_markdown", "tune_result"]


class TuneSettings(LoadSettings):
    by: Literal["concurrency", "rate"] = option("concurrency", "--by")
    slo: tuple[Slo, ...] = option((), "--slo", min_length=1)
    min_accuracy: float = option(0.0, "--min-accuracy", ge=0.0, le=1.0)
    alpha: float = option(0.05, "--alpha", gt=0.0, lt=1.0)
    lo: float = option(1.0, "--lo", gt=0.0)  # concurrency: the baseline is always c=1
    hi: float = option(16.0, "--hi", gt=0.0)
    probes: int = option(6, "--probes", ge=2, le=32)
    max_in_flight: int = option(32, "--max-in-flight", ge=1, le=4096)  # open loop only
    order_seed: int = option(0, "--seed")
    requests: int = option(32, "--requests", ge=4, le=100_000)

    _slos = field_validator("slo", mode="before")(parse_slos)

    @model_validator(mode="after")
    def _range(self) -> TuneSettings:
        # InputError is not a ValueError: pydantic lets it through, naming its option.
        if self.by == "concurrency" and (self.lo != 1 or self.hi != int(self.hi) or self.hi < 2):
            raise InputError(f"--by concurrency searches from c=1 to an integer ≥ 2, got lo {self.lo:g}, "
                             f"hi {self.hi:g}", field="--hi" if self.lo == 1 else "--lo")
        if self.by == "rate" and self.hi <= self.lo:
            raise InputError(f"must be above --lo ({self.lo:g}), got {self.hi:g}", field="--hi")
        return self


class Probe(ProbeCounts):
    """One measured load; ``items`` (id → correct) pairs it with the baseline (not written)."""

    items: dict[str, bool]


def probe_from_records(load: float, run_dir: Path, records: list[ItemRecord], wall_s: float | None,
                       slos: tuple[Slo, ...], open_loop: bool) -> Probe:
    """A probe's counts from its scored records (pure: used on fresh and on resumed probes alike)."""
    def value(r: ItemRecord, s: Slo) -> float | None:
        return request_value(r, s, open_loop)

    ok = [r for r in records if r.outcome == "ok"]
    correct = {r.id: is_correct(r) for r in records}
    within = [r for r in records if correct[r.id]
              and all((v := value(r, s)) is not None and v <= s.limit_s for s in slos)]
    observed: dict[str, float | None] = {}
    for s in slos:
        vals = [v for r in ok if (v := value(r, s)) is not None]
        observed[s.text] = float(np.percentile(vals, s.pct)) if vals else None
    met = all(v is not None and v <= s.limit_s for s, v in zip(slos, observed.values(), strict=True)) \
        and len(ok) == len(records)
    n, k = len(records), len(within)
    per_s = (n / wall_s) if wall_s else None
    ci = rate(k, n).ci95 if n else None
    acc = rate(sum(correct.values()), n) if n else None
    return Probe(load=load, run_dir=str(run_dir), n=n, ok=len(ok), correct=sum(correct.values()),
                 correct_in_slo=k, wall_s=wall_s, req_per_s=(len(ok) / wall_s) if wall_s else None,
                 goodput_per_s=(sum(correct.values()) / wall_s) if wall_s else None,
                 correct_goodput_per_s=(k / wall_s) if wall_s else None,
                 correct_goodput_ci95=[ci[0] * per_s, ci[1] * per_s] if ci and per_s else None,
                 accuracy=acc.value if acc else None, accuracy_ci95=acc.ci95 if acc else None,
                 slo_observed=observed, slo_met=met, items=correct)


def judge(p: Probe, baseline: Probe, s: TuneSettings) -> TuneVerdict:
    """Eligibility of ``p`` against the bound and the baseline: McNemar on the items both answered."""
    shared = sorted(set(p.items) & set(baseline.items))
    b = sum(1 for i in shared if baseline.items[i] and not p.items[i])  # right at baseline, wrong here
    c = sum(1 for i in shared if p.items[i] and not baseline.items[i])
    # One-sided: is this probe worse?  Exact binomial on the discordant pairs, halved two-sided p when b > c.
    p_two = mcnemar_exact(b, c)
    p_one = min(1.0, p_two / 2) if b > c else 1.0
    worse = p is not baseline and p_one < s.alpha
    acc_ok = p.accuracy is not None and p.accuracy >= s.min_accuracy
    reasons = ([] if p.slo_met else ["SLO missed"]) + ([] if acc_ok else ["accuracy below the bound"]) + \
        (["accuracy significantly below the baseline"] if worse else [])
    return TuneVerdict(b_baseline_only=b, c_probe_only=c, p_one_sided=p_one, significantly_worse=worse,
                       accuracy_ok=acc_ok, eligible=not reasons, why_not=reasons)


def _mid(a: float, b: float, integer: bool) -> float | None:
    m = math.sqrt(a * b)
    if integer:
        mi = min(max(round(m), int(a) + 1), int(b) - 1)
        return float(mi) if a < mi < b else None
    return m if b / a > 1.1 else None


def bisect_next(s: TuneSettings, done: list[Probe]) -> float | None:
    """The next load: the baseline, then ``--hi``, then the geometric midpoint between the highest
    eligible and the lowest ineligible load above it; None when the bracket cannot shrink."""
    if not done:
        return s.lo
    if len(done) == 1:
        return s.hi if judge(done[0], done[0], s).eligible else None
    if len(done) >= s.probes:
        return None
    verdict = {p.load: judge(p, done[0], s).eligible for p in done}
    a = max((x for x, ok in verdict.items() if ok), default=None)
    if a is None:
        return None
    b = min((x for x, ok in verdict.items() if not ok and x > a), default=None)
    return None if b is None else _mid(a, b, s.by == "concurrency")


CI_METHOD = ("95 % Wilson interval on the share of requests that were correct within the SLO, times the "
             "probe's request rate n / wall (wall taken as fixed)")


def _pick(rows: list[ProbeRow]) -> ProbeRow | None:
    """The eligible probe with the highest correct goodput; ties go to the higher load."""
    ok = [(r.correct_goodput_per_s, r.load, r) for r in rows if r.eligible and r.correct_goodput_per_s is not None]
    return max(ok, key=lambda x: (x[0], x[1]))[2] if ok else None


def assemble(s: TuneSettings, done: list[Probe], verdicts: list[TuneVerdict], server_info: EndpointFacts,
             notes: list[str]) -> TuneResult:
    """The result: each probe (in the order run) with its verdict against the baseline, then the picks."""
    base = done[0] if done else None
    rows = [ProbeRow(**p.model_dump(mode="json", exclude={"items"}), order=i + 1, **v.model_dump())
            for i, (p, v) in enumerate(zip(done, verdicts, strict=True))]
    rows.sort(key=lambda r: r.load)
    op = _pick(rows)
    moved = next((r.load for r in rows if r.significantly_worse), None)
    below = next((r.load for r in rows if not r.accuracy_ok), None)
    slo_broke = next((r.load for r in rows if not r.slo_met), None)
    if base is not None and not rows[0].eligible:
        notes.append(f"The baseline itself is not eligible ({', '.join(rows[0].why_not)}): no load meets "
                     "these bounds on this endpoint; the search stopped there.")
    if op is not None and op.load == max(r.load for r in rows):
        notes.append("The highest load tried is the operating point: raise --hi to search further.")
    if any(r.n < 30 for r in rows):
        notes.append("Fewer than 30 requests per probe: the McNemar test has little power; a drop in "
                     "accuracy may go undetected (raise --requests).")
    label, cpu = endpoint_labels("local vLLM started for the tune" if server_info.started_by_us else None,
                                 server_info.endpoint)
    return TuneResult(
        kind="tune", created=time.time(), model=s.base.model, evalset=s.base.evalset, endpoint_label=label,
        cpu_label=cpu, server=server_info,
        config=TuneConfig(by=s.by, slo=[x.text for x in s.slo], min_accuracy=s.min_accuracy, alpha=s.alpha,
                          lo=s.lo, hi=s.hi, probes=s.probes, requests=s.requests, order_seed=s.order_seed,
                          max_in_flight=s.max_in_flight if s.by == "rate" else None, warmup=s.warmup,
                          max_tokens=s.base.sampling.max_tokens, structured=s.base.sampling.structured,
                          prompt=s.base.prompt),
        ci_method=CI_METHOD,
        probes=rows,
        operating_point=None if op is None else OperatingPoint(
            load=op.load, correct_goodput_per_s=op.correct_goodput_per_s, correct_goodput_ci95=op.correct_goodput_ci95,
            accuracy=op.accuracy, accuracy_ci95=op.accuracy_ci95, req_per_s=op.req_per_s, n=op.n),
        accuracy_moved_at=moved, accuracy_below_bound_at=below, slo_missed_at=slo_broke,
        notes=notes,
    )


def _unit(by: str) -> str:
    return "c" if by == "concurrency" else "rate (req/s)"


def _at(v: float | None, none: str = "none") -> str:
    return none if v is None else f"{v:g}"


def render_markdown(r: TuneResult) -> str:
    cfg, by = r.config, r.config.by
    loop = "closed loop" if by == "concurrency" else f"Poisson open loop, ≤ {cfg.max_in_flight} in flight"
    md = [f"# Operating point · {r.model} · {r.evalset}", "",
          f"Endpoint: {r.endpoint_label}. Search by {by} ({loop}), "
          f"{cfg.requests} scored requests per probe (items repeated in seeded order, seed "
          f"{cfg.order_seed}), SLO {' and '.join(cfg.slo)}, accuracy ≥ {cfg.min_accuracy:g} and not "
          f"significantly below the baseline (one-sided exact McNemar, α = {cfg.alpha:g}).", ""]
    if r.cpu_label:
        md += [f"**{r.cpu_label}**", ""]
    op = r.operating_point
    if op:
        ci = op.correct_goodput_ci95
        md.append(f"**Operating point: {_unit(by)} = {op.load:g}** — "
                  f"{fmt_num(op.correct_goodput_per_s, '{:.3f}')} correct answers/s within the SLO"
                  + (f" (95 % CI {ci[0]:.3f}–{ci[1]:.3f})" if ci else "")
                  + f", accuracy {fmt_num(op.accuracy, '{:.0%}')} (n={op.n}).")
    else:
        md.append("**No operating point**: no probe met every bound.")
    md.append(f"Accuracy first moved (significantly below the baseline) at: "
              f"{_at(r.accuracy_moved_at, 'none of the loads tried')}; below the bound at: "
              f"{_at(r.accuracy_below_bound_at)}; SLO first missed at: {_at(r.slo_missed_at)}.")
    slos = cfg.slo
    md += ["", f"| {_unit(by)} | probe # | n (ok) | accuracy (95 % CI) | req/s | correct/s | **correct goodput/s** "
           "(95 % CI) | " + " | ".join(slos) + " | McNemar vs baseline (b/c, p) | eligible |",
           "|---:|---:|---|---|---:|---:|---|" + "---:|" * len(slos) + "---|---|"]
    for p in r.probes:
        ci, aci = p.correct_goodput_ci95, p.accuracy_ci95
        md.append(f"| {p.load:g} | {p.order} | {p.n} ({p.ok}) | {fmt_num(p.accuracy, '{:.0%}')}"
                  + (f" ({aci[0]:.0%}–{aci[1]:.0%})" if aci else "")
                  + f" | {fmt_num(p.req_per_s, '{:.3f}')} | {fmt_num(p.goodput_per_s, '{:.3f}')} "
                  f"| **{fmt_num(p.correct_goodput_per_s, '{:.3f}')}**"
                  + (f" ({ci[0]:.3f}–{ci[1]:.3f})" if ci else "") + " | "
                  + " | ".join(fmt_num(p.slo_observed.get(x)) for x in slos)
                  + f" | {p.b_baseline_only}/{p.c_probe_only}, {p.p_one_sided:.3g} "
                  f"| {'yes' if p.eligible else 'no: ' + '; '.join(p.why_not)} |")
    md += ["", "Correct goodput counts a request when its final answer is correct *and* it met every SLO "
           "threshold on its own (e.g. e2e ≤ the p95 limit); the SLO columns are the probe's observed "
           f"percentiles. CI: {r.ci_method}. McNemar pairs each item with itself at the baseline "
           "(b: right there, wrong here; c: the reverse)."]
    md += [f"\n- {n}" for n in r.notes]
    return "\n".join(md) + "\n"


def plot_curve(r: TuneResult, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [p for p in r.probes if p.correct_goodput_per_s is not None]
    xs = [p.load for p in rows]
    ys = [p.correct_goodput_per_s or 0.0 for p in rows]
    lo = [y - (p.correct_goodput_ci95 or [y, y])[0] for p, y in zip(rows, ys, strict=True)]
    hi = [(p.correct_goodput_ci95 or [y, y])[1] - y for p, y in zip(rows, ys, strict=True)]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", capsize=3, label="correct goodput/s (95 % CI)")
    ax.plot(xs, [p.req_per_s or 0.0 for p in rows], ":", color="tab:gray", label="req/s")
    for p, y in zip(rows, ys, strict=True):
        if not p.eligible:
            ax.plot([p.load], [y], "x", color="tab:red", markersize=10)
    op = r.operating_point
    if op:
        ax.axvline(op.load, color="tab:green", linestyle="--", label=f"operating point {op.load:g}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("concurrency" if r.config.by == "concurrency" else "offered rate (req/s)")
    ax.set_ylabel("per second")
    ax2 = ax.twinx()
    acc = [float("nan") if p.accuracy is None else p.accuracy for p in rows]
    ax2.plot(xs, acc, "s--", color="tab:orange", label="accuracy")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("accuracy")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="lower right")
    ax.set_title(f"{r.model}: correct goodput under {' & '.join(r.config.slo)} (x: not eligible)",
                 fontsize=9)
    fig.tight_layout()
    path = out / "tune.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def tune_result(s: TuneSettings, done: list[Probe], server_info: EndpointFacts, notes: list[str]) -> TuneResult:
    """The result from the probes (in the order run): each judged against the first, then the picks."""
    return assemble(s, done, [judge(p, done[0], s) for p in done], server_info, notes)


@register
class TuneMode(LoadMode[TuneSettings, TuneResult, float, Probe]):
    name: ClassVar[str] = "tune"
    stem: ClassVar[str] = "tune"
    settings_model: ClassVar[type[LoadSettings]] = TuneSettings

    plot: ClassVar[Plot[Any] | None] = ("plot", plot_curve)

    def order_seed(self, settings: TuneSettings) -> int | None:
        return settings.order_seed

    def next_level(self, settings: TuneSettings, done: list[Probe]) -> float | None:
        return bisect_next(settings, done)

    def run_level(self, ctx: LevelContext[TuneSettings], level: float) -> Probe:
        s, load = ctx.settings, float(level)
        if s.by == "concurrency":
            d = ctx.out / "probes" / f"c{load:g}"
            st = run_level(s.base, ctx.evalset_path, int(load), d, reuse=s.resume)
        else:
            d = ctx.out / "probes" / f"r{load:g}"
            st = run_level(s.base, ctx.evalset_path, s.max_in_flight, d, rate=load, reuse=s.resume)
        return probe_from_records(load, d.relative_to(ctx.out), list(RunDir(d).records()), st.wall_s,
                                  s.slo, s.by == "rate")

    def describe(self, level: float, stats: Probe) -> str:
        p: Probe = stats
        return (f"probe {level:g}: accuracy {p.correct}/{p.n}, correct within SLO {p.correct_in_slo}, "
                f"correct goodput {p.correct_goodput_per_s or 0:.3f}/s, SLO {'met' if p.slo_met else 'missed'}")

    def analyse(self, ctx: LevelContext[TuneSettings], done: list[Probe]) -> TuneResult:
        return tune_result(ctx.settings, done, ctx.server_info, ctx.notes)

    def render(self, result: TuneResult) -> str:
        return render_markdown(result)
