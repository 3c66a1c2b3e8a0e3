"""``tune``: the load to deploy at — the most *correct answers per second within the SLO*.

Peers report goodput as requests within a latency SLO and accuracy elsewhere; a team deploys
on the join.  Each probe here is a real scored eval run (the eval set's items, repeated in a
seeded order when the set is shorter than ``requests``) at one closed-loop concurrency or one
open-loop Poisson rate, and counts a request as *correct goodput* only when its final answer
is correct **and** it met every per-request SLO threshold (``e2e_p95<=8s`` contributes
"e2e ≤ 8 s" per request; the p95 itself is the level's check).

A probe is **eligible** when every SLO percentile holds, accuracy is at least
``--min-accuracy`` and not significantly below the baseline's (one-sided at ``alpha`` via
the exact McNemar test on the same items; the baseline is c=1, or the lowest rate).  The
search bisects (geometric midpoints) between the highest eligible and the lowest ineligible
load, starting from the baseline and ``--hi``.  The **operating point** is the eligible
probe with the highest correct goodput (ties: the higher load).  Every choice depends only on
measured probes, and each probe's run directory is kept, so a resumed tune replays the same
decisions and equals an uninterrupted one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import field_validator, model_validator

from nlq2sql.errors import InputError
from nlq2sql.load.driver import LevelContext, LoadMode, LoadSettings, option, register
from nlq2sql.load.levels import run_level
from nlq2sql.load.output import Plot
from nlq2sql.load.slo import Slo, is_correct, parse_slos, request_value
from nlq2sql.load.tune_report import assemble, plot_curve, render_markdown
from nlq2sql.load.tune_results import ProbeCounts, TuneResult, TuneVerdict
from nlq2sql.records.item import ItemRecord, iter_item_records
from nlq2sql.records.store import RECORDS
from nlq2sql.run.endpoint_facts import EndpointFacts
from nlq2sql.stages.score import mcnemar_exact, rate

__all__ = ["Probe", "TuneMode", "TuneSettings", "bisect_next", "judge", "probe_from_records", "tune_result"]

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


def _label(s: TuneSettings, load: float) -> str:
    return f"c={load:g}" if s.by == "concurrency" else f"rate {load:g}/s"


@register
class TuneMode(LoadMode[TuneSettings, TuneResult]):
    name: ClassVar[str] = "tune"
    stem: ClassVar[str] = "tune"
    settings_model: ClassVar[type[LoadSettings]] = TuneSettings

    plot: ClassVar[Plot[Any] | None] = ("plot", plot_curve)

    def order_seed(self, settings: TuneSettings) -> int | None:
        return settings.order_seed

    def next_level(self, settings: TuneSettings, done: list[Any]) -> float | None:
        return bisect_next(settings, done)

    def run_level(self, ctx: LevelContext[TuneSettings], level: Any) -> Probe:
        s, load = ctx.settings, float(level)
        if s.by == "concurrency":
            d = ctx.out / "probes" / f"c{load:g}"
            st = run_level(s.base, ctx.evalset_path, int(load), d, reuse=s.resume)
        else:
            d = ctx.out / "probes" / f"r{load:g}"
            st = run_level(s.base, ctx.evalset_path, s.max_in_flight, d, rate=load, reuse=s.resume)
        return probe_from_records(load, d.relative_to(ctx.out), list(iter_item_records(d / RECORDS)), st.wall_s,
                                  s.slo, s.by == "rate")

    def describe(self, level: Any, stats: Any) -> str:
        p: Probe = stats
        return (f"probe {level:g}: accuracy {p.correct}/{p.n}, correct within SLO {p.correct_in_slo}, "
                f"correct goodput {p.correct_goodput_per_s or 0:.3f}/s, SLO {'met' if p.slo_met else 'missed'}")

    def analyse(self, ctx: LevelContext[TuneSettings], done: list[Any]) -> TuneResult:
        return tune_result(ctx.settings, done, ctx.server_info, ctx.notes)

    def render(self, result: TuneResult) -> str:
        return render_markdown(result)


def tune_result(s: TuneSettings, done: list[Probe], server_info: EndpointFacts, notes: list[str]) -> TuneResult:
    """The result from the probes (in the order run): each judged against the first, then the picks."""
    return assemble(s, done, [judge(p, done[0], s) for p in done], server_info, notes)
