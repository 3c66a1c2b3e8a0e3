"""The sweep's rendering (table cells, Markdown, plots), read from the typed
:class:`.results.SweepResult` only, so it cannot show a key the contract does not declare."""

from __future__ import annotations

from pathlib import Path

from nlq2sql.load.analysis import SweepAnalysis, cost_per_1k
from nlq2sql.load.contract import Gauge, LevelStats
from nlq2sql.load.results import SweepResult
from nlq2sql.records.summary_parts import Percentiles

__all__ = ["fmt_lat", "fmt_num", "level_table", "plot", "render_markdown", "server_table"]


def fmt_num(v: float | None, fmt: str = "{:.2f}", none: str = "n/a") -> str:
    """A number for a table cell, or ``none`` when it was not measured."""
    return none if v is None else fmt.format(v)


def fmt_lat(p: Percentiles | None, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """p50 / p95 / p99 of a percentile block, or n/a when it holds no sample."""
    if p is None or not p.n:
        return "n/a"
    return " / ".join(fmt_num(None if v is None else v * scale, fmt) for v in (p.p50, p.p95, p.p99))


def _gauge(g: Gauge) -> str:
    if not g.n or g.peak is None or g.mean is None:
        return "not observed"
    return f"{g.peak:.0f} / {g.mean:.1f} (n={g.n})"


def level_table(levels: list[LevelStats], analysis: SweepAnalysis, cost_per_hour: float | None,
                slo: list[str] | None = None) -> list[str]:
    """The per-level table; with per-request SLOs, a correct-goodput column beside goodput."""
    eff = {r.concurrency: r for r in analysis.scaling}
    cg = f" correct goodput/s ({' & '.join(slo)}) |" if slo else ""
    md = [f"| c | n (ok) | req/s | goodput/s |{cg} out tok/s | e2e p50 / p95 / p99 (s) | TTFT p50 / p95 / p99 (s) "
          "| ITL p50 / p95 / p99 (ms) | efficiency | marginal | errors | cost / 1k |",
          "|---:|---:|---:|---:|" + ("---:|" if slo else "") + "---:|---|---|---|---:|---:|---|---:|"]
    for s in levels:
        r = eff.get(s.concurrency)
        errs = ", ".join(f"{k} {v}" for k, v in s.errors.items()) or "none"
        cost = cost_per_1k(s.req_per_s, cost_per_hour)
        md.append(f"| {s.concurrency} | {s.n} ({s.ok}) | {fmt_num(s.req_per_s)} "
                  f"| {fmt_num(s.goodput_per_s)} | "
                  + (f"{fmt_num(s.correct_goodput_per_s)} | " if slo else "")
                  + f"{fmt_num(s.output_tok_per_s, '{:.1f}')} "
                  f"| {fmt_lat(s.latency_s)} | {fmt_lat(s.ttft_s, fmt='{:.3f}')} "
                  f"| {fmt_lat(s.itl_s, 1000, '{:.1f}')} | {fmt_num(r.efficiency if r else None, '{:.0%}')} "
                  f"| {fmt_num(r.marginal if r else None)} | {errs} | {fmt_num(cost, '${:.4f}')} |")
    return md


def server_table(levels: list[LevelStats]) -> list[str]:
    md = ["| c | client in flight peak / mean (n) | server running peak / mean (samples) "
          "| server waiting peak / mean (samples) | KV usage peak (samples) | prefix hit rate "
          "| harness CPU (share of a core, ms/request) |",
          "|---:|---|---|---|---|---:|---|"]
    for s in levels:
        c, sv = s.client, s.server
        kv = sv.kv_cache_usage
        kv_txt = f"{kv.peak:.1%} (n={kv.n})" if kv.n and kv.peak is not None else "not observed"
        cpu = (f"{c.cpu_share_of_core:.0%}, {c.cpu_ms_per_request:.1f} ms"
               if c.cpu_share_of_core is not None and c.cpu_ms_per_request is not None else "not measured")
        infl = (f"{c.inflight_peak} / {c.inflight_mean:.1f} (n={c.inflight_n})"
                if c.inflight_peak is not None and c.inflight_mean is not None else "n/a")
        md.append(f"| {s.concurrency} | {infl} | {_gauge(sv.running)} | {_gauge(sv.waiting)} "
                  f"| {kv_txt} | {fmt_num(sv.prefix_cache_hit_rate, '{:.1%}', 'not observed')} | {cpu} |")
    return md


def render_markdown(r: SweepResult) -> str:
    a, levels, cfg = r.analysis, r.levels, r.config
    cost = cfg.gpu_cost_per_hour
    md = [f"# Concurrency sweep · {r.model} · {r.evalset}", ""]
    md.append(f"Endpoint: {r.endpoint_label}. Workload: the eval set's real prompts with the "
              f"structured-output contract ({cfg.structured}), max_tokens {cfg.max_tokens}, " +
              (f"at most {cfg.requests} requests or {cfg.duration_s:g} s per level" if cfg.duration_s
               else f"{cfg.requests} requests per level") + " (items cycled), closed loop.")
    if r.cpu_label:
        md.append(f"\n**{r.cpu_label}**")
    md += ["", "## Throughput and latency", "",
           "req/s and goodput count requests that completed (goodput: schema-valid *and* correct "
           "final answers) over the level's wall time; percentiles are over completed requests "
           "(n ok); ITL is each request's mean inter-token gap."
           + (" Correct goodput counts a correct final answer only when its request also met every "
              "per-request SLO (each limit applied to the request itself)." if cfg.slo else ""), ""]
    md += level_table(levels, a, cost, cfg.slo)
    md += ["", "## Server and client during each level", "",
           "Server gauges come from its own /metrics, sampled every "
           f"{levels[0].server.interval_s or 'n/a'} s (peak / mean, sample count); "
           "client in-flight is reconstructed from the records' start and end times.", ""]
    md += server_table(levels)
    md += ["", "## Knee and saturation", "", f"Thresholds: {a.thresholds_text}.", ""]
    if a.baseline_note:
        md.append(f"Note: {a.baseline_note}.\n")
    k = a.knee
    if k.level is not None:
        md.append(f"- **Knee: c={k.level}** ({'; '.join(k.reasons)}); last efficient level "
                  f"c={k.last_efficient}.")
    else:
        md.append(f"- Knee: none found ({'; '.join(k.reasons)}).")
    s = a.saturation
    if s.level is not None and s.throughput_gain is not None and s.p95_rise is not None:
        md.append(f"- **Saturation: c={s.level}** (c={s.next} gained {s.throughput_gain:+.0%} "
                  f"throughput while p95 rose {s.p95_rise:+.0%}).")
    else:
        md.append(f"- Saturation: {s.note}.")
    sig = a.serialized_signature
    if sig and sig.present:
        md.append(f"- **Serialized signature**: throughput ×{sig.speedup:.2f} over a ×"
                  f"{sig.concurrency_ratio:.0f} concurrency range while p95 grew ×{sig.p95_ratio:.1f}"
                  " — concurrent requests are not becoming batched work; run `nlq2sql probe serialization`.")
    if a.slo_policy:
        md += ["", "## SLO policy (best level meeting each p95 target)", "",
               "| p95 target | level | req/s | p95 | n | cost / 1k |", "|---:|---:|---:|---:|---:|---:|"]
        for p in a.slo_policy:
            if p.level is None or p.req_per_s is None or p.p95_s is None:
                md.append(f"| ≤ {p.p95_target_s:g} s | none | | | | {p.note} |")
            else:
                md.append(f"| ≤ {p.p95_target_s:g} s | c={p.level} | {p.req_per_s:.2f} "
                          f"| {p.p95_s:.2f} s | {p.n} | {fmt_num(p.cost_per_1k, '${:.4f}')} |")
    if cost is not None:
        md += ["", f"Cost assumes ${cost:g} per GPU-hour: cost / 1k = hourly cost ÷ (req/s · 3600) × 1000"
               " (per 1k correct answers: the same with goodput)."]
        for c in a.cost or []:
            md.append(f"- c={c.concurrency}: {fmt_num(c.per_1k_queries, '${:.4f}')} per 1k queries, "
                      f"{fmt_num(c.per_1k_correct, '${:.4f}')} per 1k correct answers")
    if r.notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in r.notes]
    if r.plots:
        md += ["", "## Plots", ""] + [f"![{k}]({Path(v).name})" for k, v in r.plots.items()]
    return "\n".join(md) + "\n"


def plot(r: SweepResult, out: Path) -> dict[str, str]:
    """throughput_vs_p95.png (knee and saturation marked) and efficiency.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = r.analysis
    pts: list[tuple[int, float, float]] = [
        (s.concurrency, s.latency_s.p95, s.req_per_s) for s in r.levels
        if s.latency_s.p95 is not None and s.req_per_s is not None]
    paths: dict[str, str] = {}
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    if pts:
        ax.plot([p[1] for p in pts], [p[2] for p in pts], "o-", color="tab:blue")
        for c, p95, thr in pts:
            ax.annotate(f"c={c}", (p95, thr), textcoords="offset points", xytext=(5, -10), fontsize=8)
        marks = (("knee", a.knee.level, "r*", 16), ("saturation", a.saturation.level, "kX", 10))
        for label, lvl, style, size in marks:
            hit = [p for p in pts if p[0] == lvl]
            if hit:
                ax.plot(hit[0][1], hit[0][2], style, markersize=size, label=f"{label} (c={lvl})")
        for i, pick in enumerate(a.slo_policy):
            ax.axvline(pick.p95_target_s, color="tab:gray", ls=":", lw=1,
                       label="p95 target(s)" if i == 0 else None)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="lower right")
    ax.set_xlabel("p95 end-to-end latency (s)")
    ax.set_ylabel("throughput (completed req/s)")
    ax.set_title(f"throughput vs p95 · {r.model}", fontsize=10)
    ax.grid(alpha=0.3)
    p = out / "throughput_vs_p95.png"
    fig.savefig(p, dpi=100, bbox_inches="tight")
    plt.close(fig)
    paths["throughput_vs_p95"] = str(p)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    rows = [(x.concurrency, x.efficiency) for x in a.scaling if x.efficiency is not None]
    if rows:
        ax.plot([c for c, _ in rows], [e for _, e in rows], "o-")
        ax.axhline(a.thresholds["efficiency"], color="tab:red", ls="--", lw=1,
                   label=f"threshold {a.thresholds['efficiency']:.0%}")
        if a.knee.level is not None:
            ax.axvline(a.knee.level, color="tab:red", ls=":", lw=1, label=f"knee c={a.knee.level}")
        ax.set_xscale("log", base=2)
        ax.set_xticks([c for c, _ in rows], [str(c) for c, _ in rows])
        ax.legend(fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_xlabel("concurrency")
    ax.set_ylabel(f"scaling efficiency thr(N) / (N·thr({a.baseline_level}))")
    ax.grid(alpha=0.3)
    p = out / "efficiency.png"
    fig.savefig(p, dpi=100, bbox_inches="tight")
    plt.close(fig)
    paths["efficiency"] = str(p)
    return paths
