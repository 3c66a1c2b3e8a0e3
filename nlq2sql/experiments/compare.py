"""Side-by-side comparison of recorded runs → Markdown + one self-contained HTML file, rendered only
from run records (summaries re-derived where guardrails differ), so it rebuilds offline."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nlq2sql.experiments.common import read_run
from nlq2sql.experiments.identity import RunIdentity, difference
from nlq2sql.experiments.repeated import repeats_section
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.results import Manifest, Summary
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import output_dir
from nlq2sql.records.summary_parts import Figures, Rate
from nlq2sql.run.repeats import PairedMeans, paired_means, repeat_dirs
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import mcnemar_exact

__all__ = ["COLUMNS", "ComparedRun", "FlippedItem", "PairedRuns", "accuracy_figure", "answer_text", "cost_per_1k",
           "diff_text", "load_runs", "machine_line", "paired_html", "paired_markdown", "paired_runs", "plots",
           "png_base64", "recall_text", "render", "rows", "server_device"]

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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


#: How long an answer is shown in the flipped items (characters; the rest is cut with "…").
ANSWER_CHARS = 160


@dataclass(frozen=True)
class FlippedItem:
    """An item right in one run of a pair and wrong in the other, with both runs' answers (short)."""

    id: str
    question: str
    direction: Literal["right → wrong", "wrong → right"]
    base_answer: str
    other_answer: str


@dataclass(frozen=True)
class PairedRuns:
    """A run against the baseline (the first run) on the items both recorded: final correctness,
    the difference with its paired 95 % CI (``run.repeats.paired_means``: SE clustered by
    ``pair_id``), the exact two-sided McNemar p, and the flipped items (right → wrong first)."""

    base: ComparedRun
    other: ComparedRun
    n: int
    base_right: int
    other_right: int
    right_to_wrong: int  # b: right in the baseline, wrong in the other run
    wrong_to_right: int  # c
    diff: PairedMeans
    p: float
    flipped: list[FlippedItem]


def answer_text(rec: ItemRecord) -> str:
    """A record's final answer, short: its final intent (compact JSON), else its SQL, else its
    reason for not answering, else its status; the final error class after it."""
    a = rec.answer
    intent, sql, reason = a.final_intent, a.sql, a.unanswerable
    if intent is not None:
        text = json.dumps(intent, separators=(",", ":"), ensure_ascii=False)
    elif sql:
        text = " ".join(str(sql).split())
    elif reason:
        text = f"unanswerable: {reason}"
    else:
        text = f"({a.final_status or 'no answer'})"
    if len(text) > ANSWER_CHARS:
        text = text[: ANSWER_CHARS - 1] + "…"
    error = rec.judgement.error_final if rec.judgement is not None else None
    return text + (f" [{error}]" if error else "")


def _records(run: ComparedRun) -> dict[str, ItemRecord]:
    """The run's records by id (the first record of a duplicated id counts, as in the viewer)."""
    out: dict[str, ItemRecord] = {}
    for rec in RunDir(Path(run.dir)).records():
        out.setdefault(rec.id, rec)
    return out


def _right(rec: ItemRecord) -> bool:
    return rec.judgement is not None and bool(rec.judgement.correct_final)


def paired_runs(runs: list[ComparedRun]) -> tuple[list[PairedRuns], list[str]]:
    """Each run of the baseline's eval set (manifest ``evalset_sha256``) against the baseline (the
    first run), and a note for each run of another eval set (not paired)."""
    if len(runs) < 2:
        return [], []
    base = runs[0]
    base_recs = _records(base)
    out: list[PairedRuns] = []
    notes: list[str] = []
    for other in runs[1:]:
        if other.manifest.evalset_sha256 != base.manifest.evalset_sha256:
            notes.append(f"{other.label}: not paired (another eval set than the baseline's, "
                         f"evalset_sha256 {other.manifest.evalset_sha256[:12]} vs "
                         f"{base.manifest.evalset_sha256[:12]})")
            continue
        differs = difference(RunIdentity.of(base.manifest), RunIdentity.of(other.manifest))
        if differs is not None:  # the same questions on other data or another layer: other answers are right
            notes.append(f"{other.label}: not paired ({differs.text('the baseline', 'this run')})")
            continue
        recs = _records(other)
        common = [i for i in base_recs if i in recs]
        a = {i: _right(base_recs[i]) for i in common}
        b = {i: _right(recs[i]) for i in common}
        cluster = {i: base_recs[i].pair_id or i for i in common}
        flips = [FlippedItem(i, base_recs[i].question, "right → wrong" if a[i] else "wrong → right",
                             answer_text(base_recs[i]), answer_text(recs[i]))
                 for i in common if a[i] != b[i]]
        flips.sort(key=lambda f: f.direction != "right → wrong")  # stable: record order within each
        down = sum(a[i] and not b[i] for i in common)
        up = sum(b[i] and not a[i] for i in common)
        diff = paired_means({i: float(v) for i, v in a.items()}, {i: float(v) for i, v in b.items()},
                            cluster, 1, 1)
        out.append(PairedRuns(base, other, len(common), sum(a.values()), sum(b.values()), down, up, diff,
                              mcnemar_exact(down, up), flips))
    return out, notes


def _pp(x: float) -> str:
    return f"{'+' if x > 0 else '−' if x < 0 else '±'}{abs(100 * x):.1f}"


def diff_text(p: PairedRuns) -> str:
    """"+3.3 pp [−1.2, +7.8]": the other run's accuracy minus the baseline's on the items of both."""
    d = p.diff
    if d.mean is None:
        return "n/a (no item in both)"
    return f"{_pp(d.mean)} pp" + (f" [{_pp(d.ci95[0])}, {_pp(d.ci95[1])}]" if d.ci95 is not None else "")


def _md_cell(text: str) -> str:
    """Text in a Markdown table cell: pipes, markup and line breaks cannot end the cell or become HTML."""
    return (" ".join(text.split()).replace("\\", "\\\\").replace("|", "\\|")
            .replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("`", "\\`"))


PAIRED_HEAD = ("run (vs baseline)", "items in both", "baseline right", "run right",
               "difference (95 % CI, paired)", "right → wrong", "wrong → right", "exact McNemar p")
FLIP_HEAD = ("id", "change", "question", "baseline answer", "run answer")


def _paired_cells(p: PairedRuns) -> tuple[str, ...]:
    return (p.other.label, str(p.n), str(p.base_right), str(p.other_right), diff_text(p), str(p.right_to_wrong),
            str(p.wrong_to_right), f"{p.p:.4g}")


def _flip_cells(f: FlippedItem) -> tuple[str, ...]:
    return (f.id, f.direction, f.question, f.base_answer, f.other_answer)


PAIRED_NOTE = ("Final correctness on the items both runs recorded (by id). Difference: run minus baseline, "
               "percentage points, 95 % CI from the standard error clustered by pair_id "
               "(run.repeats.paired_means); McNemar: exact, two-sided.")


def paired_markdown(base: str, pairs: list[PairedRuns], notes: list[str]) -> list[str]:
    """The paired comparison and the flipped items, as Markdown lines."""
    if not pairs and not notes:
        return []
    lines = ["", f"## Paired comparison against the baseline: {_md_cell(base)}",
             "", PAIRED_NOTE, ""]
    if pairs:
        lines += ["| " + " | ".join(PAIRED_HEAD) + " |", "|" + "---|" * len(PAIRED_HEAD)]
        lines += ["| " + " | ".join(_md_cell(c) for c in _paired_cells(p)) + " |" for p in pairs]
    if notes:
        lines += ["", *(f"- {_md_cell(n)}" for n in notes)]
    for p in pairs:
        lines += ["", f"### Flipped items: {_md_cell(p.other.label)}", "",
                  f"{len(p.flipped)} of {p.n} items flipped ({p.right_to_wrong} right → wrong, "
                  f"{p.wrong_to_right} wrong → right); regressions first.", ""]
        if p.flipped:
            lines += ["| " + " | ".join(FLIP_HEAD) + " |", "|" + "---|" * len(FLIP_HEAD)]
            lines += ["| " + " | ".join(_md_cell(c) for c in _flip_cells(f)) + " |" for f in p.flipped]
    return lines


def _html_table(head: tuple[str, ...], body: list[tuple[str, ...]], cls: str) -> str:
    h = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    b = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
    return f"<table class='{cls}'><tr>{h}</tr>{b}</table>"


def paired_html(base: str, pairs: list[PairedRuns], notes: list[str]) -> str:
    """The paired comparison and the flipped items, as HTML (every text escaped)."""
    if not pairs and not notes:
        return ""
    out = [f"<h2>Paired comparison against the baseline: {html.escape(base)}</h2>",
           f"<p>{html.escape(PAIRED_NOTE)}</p>"]
    if pairs:
        out.append(_html_table(PAIRED_HEAD, [_paired_cells(p) for p in pairs], "paired"))
    out += [f"<p>{html.escape(n)}</p>" for n in notes]
    for p in pairs:
        out.append(f"<h3>Flipped items: {html.escape(p.other.label)}</h3>"
                   f"<p>{len(p.flipped)} of {p.n} items flipped ({p.right_to_wrong} right → wrong, "
                   f"{p.wrong_to_right} wrong → right); regressions first.</p>")
        if p.flipped:
            out.append(_html_table(FLIP_HEAD, [_flip_cells(f) for f in p.flipped], "flipped"))
    return "".join(out)


def recall_text(recall: dict[str, Rate]) -> str:
    """Intervention recall, each value named by the failure kind it is the recall of
    ("sort_desc 83.3 % [43.6–97.0] (5/6)"); kinds with no failing item are left out."""
    shown = [f"{kind} {pct(r)}" for kind, r in recall.items() if r.n]
    return "; ".join(shown) or "n/a (no item of a kind a guardrail fixes failed)"


def server_device(m: Manifest) -> str | None:
    """The device the server ran on, where the manifest says it: ``--device X`` in the arguments of a
    server the run started (None: not recorded; an endpoint's device is not reported by vLLM)."""
    args = m.server_args or []
    for i, a in enumerate(args):
        if a == "--device" and i + 1 < len(args):
            return args[i + 1].lower()
        if a.startswith("--device="):
            return a.split("=", 1)[1].lower()
    return None


def machine_line(r: ComparedRun) -> str:
    """What the run's manifest records of where it ran: harness, client, engine, server."""
    m = r.manifest
    parts = [f"harness {m.harness_version}"
             + (f" (git {m.git_commit[:12]}{', dirty' if m.git_dirty else ''})" if m.git_commit else "")]
    if m.client:
        parts.append(f"client {m.client}")
    if m.engine is not None:
        parts.append(f"engine {m.engine.name} × {m.engine.workers}"
                     + (f" at {m.engine.ray_address}" if m.engine.ray_address else ""))
    server = "a server this run started" if m.server_started_by_us else "a given endpoint"
    if m.server is not None:
        server += (f", vLLM {m.server.server_version or '?'}, max_model_len {m.server.max_model_len or '?'}")
    if m.structured_outputs is not None and m.structured_outputs.backend:
        server += f", structured outputs {m.structured_outputs.backend}"
    if m.batch_invariant:
        server += ", batch-invariant"
    device = server_device(m)
    server += f", device {device}" if device else ", device not recorded"
    parts.append(server)
    return f"{r.label}: " + "; ".join(parts)


def timing_note(runs: list[ComparedRun]) -> str:
    """What the timings compare: "CPU timings" only where every run's manifest says its server ran on CPU."""
    devices = {server_device(r.manifest) for r in runs}
    if devices == {"cpu"}:
        return "CPU timings: they rank configurations on this machine, not GPUs."
    if None in devices:
        return ("Timings rank configurations on the machine each run came from (see the machine lines); "
                "not every manifest records the server's device.")
    return f"Timings from servers on {', '.join(sorted(d for d in devices if d))} (as the manifests record)."


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
            "run": r.label, "n": str(s.n), "raw": pct(s.raw_accuracy), "final": pct(s.final_accuracy),
            "precision": pct(s.intervention_precision),
            "recall": recall_text(s.intervention_recall),
            "schema_valid": pct(s.schema_valid_rate),
            "p50": f"{lat.p50:.2f} s" if lat is not None and lat.p50 is not None else "n/a",
            "p95": f"{lat.p95:.2f} s" if lat is not None and lat.p95 is not None else "n/a",
            "tokens": f"{ct.mean:.1f}" if ct is not None and ct.mean is not None else "n/a",
            "req_per_s": f"{rps:.2f}" if rps else "n/a",
            "cost_per_1k": (f"${c:.4f}" if (c := cost_per_1k(rps, gpu_cost_per_hour)) is not None else "n/a"),
            "errors": ", ".join(f"{k} {v}" for k, v in s.error_taxonomy_final.items()),
        })
    return out


COLUMNS = [("run", "run"), ("n", "n"), ("raw", "raw intent"), ("final", "final"),
           ("precision", "intervention precision"), ("recall", "intervention recall by failure kind"),
           ("schema_valid", "schema-valid"), ("p50", "p50"), ("p95", "p95"),
           ("tokens", "output tokens (mean)"), ("req_per_s", "req/s"), ("cost_per_1k", "cost / 1k"),
           ("errors", "error taxonomy (final)")]


def png_base64(fig: Figure) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def accuracy_figure(rows: list[tuple[str, Figures]], *, size: tuple[float, float, float], fontsize: int,
                    xlabel: str, legend: Callable[[str], str] = str, majority: float | None = None) -> str:
    """Raw and final accuracy with their 95 % CIs, one row per (label, summary): the comparison
    and quality reports' figure.  ``size``: width, base height, height per row; ``fontsize``: the row labels'."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

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
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

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
    # joined by lines only where every run has its own concurrency: two runs at one level are two
    # configurations, and a line between them would draw a vertical stroke that means nothing
    join = len(set(xs)) == len(xs)
    ax.plot(xs, [float("nan") if v is None else v for v in acc], "o-" if join else "o", label="final accuracy")
    p95 = [lat.p95 if (lat := r.summary.timing.get("latency_s")) is not None else None for _, r in pts]
    # a run without latency figures leaves a gap (NaN), exactly as matplotlib treats None
    ax2.plot(xs, [float("nan") if v is None else float(v) for v in p95],
             "s--" if join else "s", color="tab:red", label="p95 latency")
    ax.set_xlabel("concurrency")
    ax.set_ylabel("final accuracy")
    ax2.set_ylabel("p95 latency (s)")
    figs["concurrency"] = png_base64(fig)
    return figs


def render(dirs: list[Path], out: Path, gpu_cost_per_hour: float | None = None,
           title: str = "nlq2sql comparison") -> dict[str, Path]:
    # A repeated run (eval --repeats: OUT/r0 …) is tabled by its first repeat, and compared over
    # all its repeats, item-paired with clustered errors, in its own section below.
    runs = load_runs([(repeat_dirs(d) or [d])[0] for d in dirs])
    output_dir(out, create=False)  # refused before any plotting
    table = rows(runs, gpu_cost_per_hour)
    md = [f"# {title}", "", "| " + " | ".join(h for _, h in COLUMNS) + " |",
          "|" + "---|" * len(COLUMNS)]
    md += ["| " + " | ".join(_md_cell(row[k]) for k, _ in COLUMNS) + " |" for row in table]
    if gpu_cost_per_hour is not None:
        md.append(f"\nCost assumes ${gpu_cost_per_hour}/hour and the measured req/s of each run.")
    pairs, pair_notes = paired_runs(runs)
    md += paired_markdown(runs[0].label, pairs, pair_notes)
    md += repeats_section(dirs)
    md += ["", "## Where each run ran (from its manifest)", "", *(f"- {_md_cell(machine_line(r))}" for r in runs),
           "", timing_note(runs)]
    figs = plots(runs)
    output_dir(out)
    md_path, html_path = out / "report.md", out / "report.html"
    md_path.write_text("\n".join(md) + "\n")
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(row[k])}</td>" for k, _ in COLUMNS) + "</tr>"
                   for row in table)
    paired = paired_html(runs[0].label, pairs, pair_notes)
    machines = "".join(f"<li>{html.escape(machine_line(r))}</li>" for r in runs)
    imgs = "".join(f'<h3>{html.escape(k)}</h3><img alt="{k}" src="data:image/png;base64,{v}">'
                   for k, v in figs.items())
    html_path.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><table><tr>{head}</tr>{body}</table>{paired}"
        f"<h2>Where each run ran (from its manifest)</h2><ul>{machines}</ul><p>{html.escape(timing_note(runs))}</p>"
        f"{imgs}</body></html>\n")
    return {"markdown": md_path, "html": html_path}
