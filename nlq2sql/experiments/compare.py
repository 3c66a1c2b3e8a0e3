"""Side-by-side comparison of recorded runs → Markdown + one self-contained HTML file.

Rendered only from run records (manifest + summary, re-derived from records where the
guardrails differ), so a report can be rebuilt offline at any time.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import matplotlib

__all__ = ["COLUMNS", "ComparedRun", "accuracy_figure", "cost_per_1k", "load_runs", "plots", "png_base64",
           "rate_text", "render", "rows"]

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from nlq2sql.experiments.common import read_run  # noqa: E402
from nlq2sql.records.results import Manifest, Summary  # noqa: E402
from nlq2sql.records.store import output_dir  # noqa: E402
from nlq2sql.records.summary_parts import Figures, Rate  # noqa: E402
from nlq2sql.stages.report import pct  # noqa: E402


@dataclass(frozen=True)
class ComparedRun:
    """One finished run as the comparison reads it: its manifest and summary through their models."""

    dir: str
    manifest: Manifest
    summary: Summary
    label: str


def _key(m: Manifest, name: str) -> str:
    """A manifest key as the label shows it: "?" where the run did not record it."""
    return str(getattr(m, name)) if name in m.model_fields_set else "?"


def load_runs(dirs: list[Path]) -> list[ComparedRun]:
    runs = []
    for d in dirs:
        m, s = read_run(d)  # refuses records that no longer match the summary
        runs.append(ComparedRun(str(d), m, s,
                                f"{_key(m, 'model')} · {_key(m, 'prompt')}"
                                f"{' + ' + '+'.join(m.guardrails) if m.guardrails else ''}"
                                f" · c={_key(m, 'concurrency')} · {m.evalset}"))
    return runs


def rate_text(rate: Rate) -> str:
    """``stages.report.pct`` of a summary's rate."""
    return pct(rate.model_dump())


def cost_per_1k(req_per_s: float | None, gpu_cost_per_hour: float | None) -> float | None:
    """hourly cost ÷ hourly completed requests × 1000."""
    if not req_per_s or gpu_cost_per_hour is None:
        return None
    return gpu_cost_per_hour / (req_per_s * 3600) * 1000


def rows(runs: list[ComparedRun], gpu_cost_per_hour: float | None) -> list[dict[str, str]]:
    """The table's cells, by column key (:data:`COLUMNS`)."""
    out = []
    for r in runs:
        s = r.summary
        t = s.timing
        lat, ct = t.get("latency_s"), t.get("completion_tokens")
        rps = s.throughput.req_per_s if s.throughput is not None else None
        out.append({
            "run": r.label, "n": str(s.n), "raw": rate_text(s.raw_accuracy), "final": rate_text(s.final_accuracy),
            "precision": rate_text(s.intervention_precision),
            "recall": "; ".join(rate_text(v) for v in s.intervention_recall.values()) or "n/a",
            "schema_valid": rate_text(s.schema_valid_rate),
            "p50": f"{lat.p50:.2f} s" if lat is not None and lat.p50 is not None else "n/a",
            "p95": f"{lat.p95:.2f} s" if lat is not None and lat.p95 is not None else "n/a",
            "tokens": f"{ct.mean:.1f}" if ct is not None and ct.mean is not None else "n/a",
            "req_per_s": f"{rps:.2f}" if rps else "n/a",
            "cost_per_1k": (f"${c:.4f}" if (c := cost_per_1k(rps, gpu_cost_per_hour)) is not None else "n/a"),
            "errors": ", ".join(f"{k} {v}" for k, v in s.error_taxonomy_final.items()),
        })
    return out


COLUMNS = [("run", "run"), ("n", "n"), ("raw", "raw intent"), ("final", "final"),
           ("precision", "intervention precision"), ("recall", "recall"),
           ("schema_valid", "schema-valid"), ("p50", "p50"), ("p95", "p95"),
           ("tokens", "output tokens (mean)"), ("req_per_s", "req/s"), ("cost_per_1k", "cost / 1k"),
           ("errors", "error taxonomy (final)")]


def png_base64(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def accuracy_figure(rows: list[tuple[str, Figures]], *, size: tuple[float, float, float], fontsize: int,
                    xlabel: str, legend: Callable[[str], str] = str, majority: float | None = None) -> str:
    """Raw and final accuracy with their 95 % CIs, one row per (label, summary): the comparison
    and quality reports' figure.  ``size``: width, base height, height per row; ``fontsize``: the row labels'."""
    width, base, per_row = size
    fig, ax = plt.subplots(figsize=(width, base + per_row * len(rows)))
    for i, (_, summary) in enumerate(rows):
        keys: tuple[tuple[Literal["raw_accuracy", "final_accuracy"], str, float], ...] = (
            ("raw_accuracy", "tab:gray", -0.15), ("final_accuracy", "tab:blue", 0.15))
        for key, color, dy in keys:
            p = getattr(summary, key)
            if p.value is not None and p.ci95 is not None:
                lo, hi = p.ci95
                ax.errorbar(p.value, i + dy, xerr=[[p.value - lo], [hi - p.value]], fmt="o",
                            color=color, label=legend(key) if i == 0 else None)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=fontsize)
    ax.set_xlim(0, 1)
    if majority is not None:
        ax.axvline(majority, color="tab:red", lw=0.6, ls=":")
    ax.set_xlabel(xlabel)
    ax.legend(loc="lower right", fontsize=7)
    return png_base64(fig)


def plots(runs: list[ComparedRun]) -> dict[str, str]:
    """Accuracy with CIs per run; output tokens vs latency; accuracy and p95 vs concurrency."""
    figs: dict[str, str] = {}
    figs["accuracy"] = accuracy_figure([(r.label, r.summary) for r in runs], size=(8, 0.5, 0.45), fontsize=7,
                                       xlabel="accuracy (95 % Wilson CI)")

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in runs:
        t = r.summary.timing
        ct, lat = t.get("completion_tokens"), t.get("latency_s")
        if ct is not None and ct.mean and lat is not None and lat.p50:
            ax.scatter(ct.mean, lat.p50)
            ax.annotate(r.label, (ct.mean, lat.p50), fontsize=6)
    ax.set_xlabel("output tokens (mean)")
    ax.set_ylabel("latency p50 (s)")
    figs["tokens_latency"] = png_base64(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    ax2 = ax.twinx()
    pts = sorted(((r.manifest.concurrency or 0, r) for r in runs), key=lambda p: p[0])
    xs = [c for c, _ in pts]
    acc = [r.summary.final_accuracy.value for _, r in pts]  # (None: a gap, as p95 below)
    ax.plot(xs, [float("nan") if v is None else v for v in acc], "o-", label="final accuracy")
    p95 = [lat.p95 if (lat := r.summary.timing.get("latency_s")) is not None else None for _, r in pts]
    # a run without latency figures leaves a gap (NaN), exactly as matplotlib treats None
    ax2.plot(xs, [float("nan") if v is None else float(v) for v in p95],
             "s--", color="tab:red", label="p95 latency")
    ax.set_xlabel("concurrency")
    ax.set_ylabel("final accuracy")
    ax2.set_ylabel("p95 latency (s)")
    figs["concurrency"] = png_base64(fig)
    return figs


def render(dirs: list[Path], out: Path, gpu_cost_per_hour: float | None = None,
           title: str = "nlq2sql comparison") -> dict[str, Path]:
    from nlq2sql.experiments.repeated import repeats_section
    from nlq2sql.run.repeats import repeat_dirs

    # A repeated run (eval --repeats: OUT/r0 …) is tabled by its first repeat, and compared over
    # all its repeats, item-paired with clustered errors, in its own section below.
    runs = load_runs([(repeat_dirs(d) or [d])[0] for d in dirs])
    output_dir(out, create=False)  # refused before any plotting
    table = rows(runs, gpu_cost_per_hour)
    md = [f"# {title}", "", "| " + " | ".join(h for _, h in COLUMNS) + " |",
          "|" + "---|" * len(COLUMNS)]
    md += ["| " + " | ".join(row[k] for k, _ in COLUMNS) + " |" for row in table]
    if gpu_cost_per_hour is not None:
        md.append(f"\nCost assumes ${gpu_cost_per_hour}/hour and the measured req/s of each run.")
    md += repeats_section(dirs)
    md.append("\nCPU timings are CPU timings: they rank configurations on this machine, not GPUs.")
    figs = plots(runs)
    output_dir(out)
    md_path, html_path = out / "report.md", out / "report.html"
    md_path.write_text("\n".join(md) + "\n")
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(row[k])}</td>" for k, _ in COLUMNS) + "</tr>"
                   for row in table)
    imgs = "".join(f'<h3>{html.escape(k)}</h3><img alt="{k}" src="data:image/png;base64,{v}">'
                   for k, v in figs.items())
    html_path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><table><tr>{head}</tr>{body}</table>{imgs}</body></html>\n")
    return {"markdown": md_path, "html": html_path}
