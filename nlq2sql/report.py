"""Records and summaries → readable tables (rich) and Markdown; never recomputed by hand."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def pct(p: dict[str, Any] | None) -> str:
    """"63.3 % [50.7–74.4] (38/60)": value, 95 % CI and the counts behind it."""
    if not p or p.get("value") is None:
        return "n/a (0 samples)" if p is not None else "n/a"
    lo, hi = p["ci95"]
    return f"{100 * p['value']:.1f} % [{100 * lo:.1f}–{100 * hi:.1f}] ({p['k']}/{p['n']})"


def secs(p: dict[str, Any] | None, key: str) -> str:
    if not p or not p.get("n"):
        return "not observed"
    return f"{p[key]:.3f} s (n={p['n']})"


def summary_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        ("items", str(s["n"])),
        ("raw intent accuracy", pct(s["raw_accuracy"])),
        ("final accuracy (after guardrails)", pct(s["final_accuracy"])),
        ("execution accuracy", pct(s["execution_accuracy"])),
        ("schema-valid rate", pct(s["schema_valid_rate"])),
        ("interventions", str(s["interventions"])),
        ("intervention precision", pct(s["intervention_precision"])),
    ]
    for rid, r in s.get("intervention_recall", {}).items():
        rows.append((f"recall of rule {rid}", pct(r)))
    mb = s["majority_baseline"]
    rows.append((f"majority baseline ({mb['label']})", pct(mb)))
    rows.append(("error taxonomy (raw)", ", ".join(f"{k} {v}" for k, v in s["error_taxonomy_raw"].items())))
    rows.append(("error taxonomy (final)",
                 ", ".join(f"{k} {v}" for k, v in s["error_taxonomy_final"].items())))
    rows.append(("finish reasons", ", ".join(f"{k} {v}" for k, v in s["finish_reasons"].items())))
    t = s.get("timing", {})
    if t.get("latency_s"):
        rows.append(("latency p50 / p95 / p99", f"{secs(t['latency_s'], 'p50')} / "
                     f"{secs(t['latency_s'], 'p95')} / {secs(t['latency_s'], 'p99')}"))
    if t.get("ttft_s"):
        rows.append(("TTFT p50 / p95", f"{secs(t['ttft_s'], 'p50')} / {secs(t['ttft_s'], 'p95')}"))
    if t.get("completion_tokens"):
        ct = t["completion_tokens"]
        rows.append(("completion tokens mean / p50", f"{ct['mean']:.1f} / {ct['p50']:.0f} (n={ct['n']})"))
    thr = s.get("throughput")
    if thr and thr.get("req_per_s") is not None:
        rows.append(("throughput (this session)", f"{thr['req_per_s']:.2f} req/s "
                     f"({thr['items_this_session']} items in {thr['wall_s']:.1f} s)"))
    if s.get("errors_by_class") is not None:
        rows.append(("request errors by class", ", ".join(f"{k} {v}" for k, v in
                                                         s["errors_by_class"].items()) or "none"))
    comp = s.get("compactness")
    if comp and comp.get("n"):
        rows.append(("outputs with no whitespace (measured)",
                     f"{comp['outputs_without_whitespace']}/{comp['n']}"))
    sm = s.get("server_metrics")
    if sm is not None:
        if sm.get("observed"):
            run = sm["running"]
            rows.append(("server running requests (peak / mean)",
                         f"{run.get('peak', 'n/a')} / {run.get('mean', 0):.2f} (n={run.get('n', 0)} samples)"))
            wait = sm["waiting"]
            rows.append(("server waiting requests (peak)", f"{wait.get('peak', 'n/a')} (n={wait.get('n', 0)})"))
        else:
            rows.append(("server /metrics", "not observed"))
    return rows


def render_summary(s: dict[str, Any], title: str = "nlq2sql summary", console: Console | None = None
                   ) -> None:
    table = Table(title=title, show_header=True)
    table.add_column("measure")
    table.add_column("value (95 % CI, k/n)")
    for k, v in summary_rows(s):
        table.add_row(k, v)
    cats = Table(title="per category", show_header=True)
    for col in ("category", "n", "raw", "final"):
        cats.add_column(col)
    for name, c in s.get("per_category", {}).items():
        cats.add_row(name, str(c["n"]), pct(c["raw_accuracy"]), pct(c["final_accuracy"]))
    console = console or Console()
    console.print(table)
    console.print(cats)


def summary_markdown(s: dict[str, Any], title: str) -> str:
    lines = [f"### {title}", "", "| measure | value (95 % CI, k/n) |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in summary_rows(s)]
    return "\n".join(lines) + "\n"
