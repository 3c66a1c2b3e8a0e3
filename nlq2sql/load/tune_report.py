"""``tune``'s analysis and report: the operating point, the correct-goodput curve, where accuracy moved.

Kept apart from :mod:`.tune` (the search) so the report can be re-rendered from ``tune.json``
alone: everything here reads the typed result (:class:`TuneResult`), never the endpoint.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql.load.contract import endpoint_labels
from nlq2sql.load.render import fmt_num
from nlq2sql.load.tune_results import OperatingPoint, ProbeRow, TuneConfig, TuneResult, TuneVerdict
from nlq2sql.run.endpoint_facts import EndpointFacts

if TYPE_CHECKING:
    from nlq2sql.load.tune import Probe, TuneSettings

__all__ = ["CI_METHOD", "assemble", "plot_curve", "render_markdown"]

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
