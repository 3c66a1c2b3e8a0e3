"""Records and summaries → readable tables (rich) and Markdown; never recomputed by hand."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from nlq2sql.records.results import Summary
from nlq2sql.records.run_parts import Fleet
from nlq2sql.records.summary_parts import LabelledRate, Percentiles, Rate

__all__ = ["fleet_table", "pct", "render_summary", "secs", "summary_rows"]


def pct(p: Rate | LabelledRate | dict[str, Any] | None) -> str:
    """"63.3 % [50.7–74.4] (38/60)": value, 95 % CI and the counts behind it (a rate, or one read
    from a report's JSON)."""
    if isinstance(p, Rate | LabelledRate):
        p = p.to_json()
    if not p or p.get("value") is None:
        return "n/a (0 samples)" if p is not None else "n/a"
    lo, hi = p["ci95"]
    return f"{100 * p['value']:.1f} % [{100 * lo:.1f}–{100 * hi:.1f}] ({p['k']}/{p['n']})"


def secs(p: Percentiles | None, key: str) -> str:
    value = getattr(p, key) if p is not None else None
    if p is None or not p.n or value is None:
        return "not observed"
    return f"{value:.3f} s (n={p.n})"


def _or_na(value: float | None) -> str:
    return "n/a" if value is None else str(value)


def summary_rows(s: Summary) -> list[tuple[str, str]]:
    rows = [
        ("items", str(s.n)),
        ("raw intent accuracy", pct(s.raw_accuracy)),
        ("final accuracy (after guardrails)", pct(s.final_accuracy)),
        ("execution accuracy", pct(s.execution_accuracy)),
        ("schema-valid rate", pct(s.schema_valid_rate)),
        ("interventions", str(s.interventions)),
        ("intervention precision", pct(s.intervention_precision)),
    ]
    for rid, r in s.intervention_recall.items():
        rows.append((f"recall of rule {rid}", pct(r)))
    mb = s.majority_baseline
    rows.append((f"majority baseline ({mb.label})", pct(mb)))
    rows.append(("error taxonomy (raw)", ", ".join(f"{k} {v}" for k, v in s.error_taxonomy_raw.items())))
    rows.append(("error taxonomy (final)",
                 ", ".join(f"{k} {v}" for k, v in s.error_taxonomy_final.items())))
    rows.append(("finish reasons", ", ".join(f"{k} {v}" for k, v in s.finish_reasons.items())))
    t = s.timing
    if t.get("latency_s"):
        rows.append(("latency p50 / p95 / p99", f"{secs(t['latency_s'], 'p50')} / "
                     f"{secs(t['latency_s'], 'p95')} / {secs(t['latency_s'], 'p99')}"))
    if t.get("ttft_s"):
        rows.append(("TTFT p50 / p95", f"{secs(t['ttft_s'], 'p50')} / {secs(t['ttft_s'], 'p95')}"))
    ct = t.get("completion_tokens")
    if ct:
        rows.append(("completion tokens mean / p50", f"{ct.mean:.1f} / {ct.p50:.0f} (n={ct.n})"))
    thr = s.throughput
    if thr and thr.req_per_s is not None:
        rows.append(("throughput (this session)", f"{thr.req_per_s:.2f} req/s "
                     f"({thr.items_this_session} items in {thr.wall_s:.1f} s)"))
    if s.errors_by_class is not None:
        rows.append(("request errors by class", ", ".join(f"{k} {v}" for k, v in
                                                         s.errors_by_class.items()) or "none"))
    sel = s.selective
    if sel:
        rows.append(("answered (coverage) · abstained", f"{pct(sel.coverage)} · {sel.abstained}"))
        rows.append(("accuracy on answered items", pct(sel.accuracy_answered)))
        if sel.without_logprob_evidence:
            rows.append(("answered without logprobs (not judged by --abstain-below)",
                         f"{sel.without_logprob_evidence} of {sel.n}"))
    comp = s.compactness
    if comp and comp.n:
        rows.append(("outputs with no whitespace (measured)",
                     f"{comp.outputs_without_whitespace}/{comp.n}"))
    sm = s.server_metrics
    if sm is not None:
        if sm.observed and sm.running is not None and sm.waiting is not None:
            run, wait = sm.running, sm.waiting
            rows.append(("server running requests (peak / mean)",
                         f"{_or_na(run.peak)} / {run.mean or 0:.2f} (n={run.n} samples)"))
            rows.append(("server waiting requests (peak)", f"{_or_na(wait.peak)} (n={wait.n})"))
        else:
            rows.append(("server /metrics", "not observed"))
    return rows


def render_summary(s: Summary, title: str = "nlq2sql summary", console: Console | None = None
                   ) -> None:
    table = Table(title=title, show_header=True)
    table.add_column("measure")
    table.add_column("value (95 % CI, k/n)")
    for k, v in summary_rows(s):
        table.add_row(k, v)
    cats = Table(title="per category", show_header=True)
    for col in ("category", "n", "raw", "final"):
        cats.add_column(col)
    for name, c in s.per_category.items():
        cats.add_row(name, str(c.n), pct(c.raw_accuracy), pct(c.final_accuracy))
    console = console or Console()
    console.print(table)
    console.print(cats)
    eg = s.empty_golds
    if eg:
        console.print(f"[yellow]warning: {eg.n} items' gold returns no rows (first: {', '.join(eg.first_ids)}): "
                      "an empty gold cannot tell a right answer from a wrong one; `nlq2sql evalset check` refuses "
                      "them[/yellow]")
    ab = s.abstention
    if ab:  # v2 answers: the model may say a question is unanswerable
        console.print(f"unanswerable: {ab.abstained} abstentions, {ab.unanswerable_items} unanswerable items; "
                      f"precision {pct(ab.precision)}, recall {pct(ab.recall)}"
                      + (f"; {s.compiles} MetricFlow compiles" if s.compiles is not None else ""),
                      highlight=False)
    if s.fleet:
        console.print(fleet_table(s.fleet))
    sel = s.selective
    if sel and sel.without_logprob_evidence:
        console.print(f"[yellow]warning: {sel.without_logprob_evidence} of {sel.n} items came back without "
                      "logprobs, so --abstain-below could not judge them and they were answered (does the "
                      "endpoint stream logprobs? vLLM does; some gateways strip them)[/yellow]")
    h = s.harness
    if h is not None and h.saturated:
        console.print(f"[yellow]warning: the client was saturated ({'; '.join(h.why)}): throughput and "
                      "latency figures are bounded by the harness, not the server; try --workers (and "
                      "--client aiohttp where the SDK client was used)[/yellow]")
    elif h is not None and h.starved:
        console.print(f"[yellow]note: the client waited for CPU ({'; '.join(h.starved_why or [])}): other "
                      "processes on this machine (a local CPU server?) held the cores, so latencies include "
                      "that wait; more client capacity would not help[/yellow]")


def fleet_table(fleet: Fleet) -> Table:
    """Per replica: who answered how much, how fast, and when it was out of rotation."""
    t = Table(title=f"per replica (routing {fleet.routing}, failovers this session "
                    f"{fleet.failovers_this_session})", show_header=True)
    for col in ("replica", "url", "answered", "ok", "errors", "failed, re-sent", "p50 / p95 (s)",
                "out of rotation"):
        t.add_column(col)
    for r in fleet.replicas:
        lat = r.latency_s
        lat_s = f"{lat.p50:.2f} / {lat.p95:.2f}" if lat.p50 is not None and lat.p95 is not None else "n/a"
        out = (f"{r.out_of_rotation_s or 0.0:.1f} s (first at +{r.first_out_after_s:.1f} s)"
               if r.first_out_after_s is not None else "never" if "out_of_rotation_s" in r.model_fields_set else "n/a")
        errs = ", ".join(f"{k} {v}" for k, v in sorted(r.errors.items())) or "none"
        t.add_row(r.label, r.url, str(r.answered), str(r.ok), errs, str(r.failed_then_resent), lat_s, out)
    return t
