"""The prompt × guardrail condition matrix.

The model is queried once per (prompt, item) and every guardrail condition re-scored from the raw
outputs, so conditions differ only in what they claim to; pairs get an exact McNemar test. With
``repeats`` N each prompt is a repeated run, every repeat re-scored: the table shows the first, and a
section gives mean ± CI across repeats and paired differences with standard errors clustered by ``pair_id``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path

from nlq2sql.answers.offline import rescore_run
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import output_dir, write_json_atomic
from nlq2sql.records.summary_parts import Figures
from nlq2sql.records.typed import Num, Typed
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.run.repeats import (
    Z95,
    ClusterMean,
    MeanCI,
    PairedMeans,
    cluster_mean,
    finals_means,
    mean_ci,
    paired_means,
    repeat_dirs,
    run_repeats,
)
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import mcnemar_exact

__all__ = ["MatrixCondition", "MatrixConfig", "MatrixPair", "MatrixRepeats", "MatrixTable", "condition_table",
           "render_markdown", "run_prompts", "write_result"]


@dataclass(frozen=True)
class MatrixConfig:
    base: EvalConfig
    prompts: tuple[str, ...] = ("baseline", "contrastive")
    guardrails: tuple[str, ...] = ("none", "ranking")
    repeats: int = 1


def run_prompts(cfg: MatrixConfig) -> dict[str, Path]:
    """One live run per prompt (a repeated one with ``repeats`` > 1), recorded without
    guardrails (they are applied offline)."""
    dirs = {}
    for prompt in cfg.prompts:
        out = cfg.base.out / f"{cfg.base.evalset}-{prompt}"
        run = replace(cfg.base, prompt=prompt, guardrails=(), out=out, force=True, resume=False)
        if cfg.repeats > 1:
            run_repeats(run, cfg.repeats, run_eval)
        else:
            run_eval(run)
        dirs[prompt] = out
    return dirs


# ``matrix.json`` as built (a condition or pair without repeats leaves ``repeats`` / ``over_repeats`` out).

class MatrixRepeats(Typed):
    """One condition over its repeats."""

    repeats: int
    per_repeat_accuracy: list[Num | None]
    accuracy: MeanCI
    latency_p50_s: MeanCI
    latency_p95_s: MeanCI
    item_level_accuracy: ClusterMean


class MatrixCondition(Typed):
    condition: str
    prompt: str
    guardrails: list[str]
    run: str
    summary: Figures  # ``answers.offline.rescore_run``'s, written as its file has it
    repeats: MatrixRepeats | None = None

    def read(self) -> Figures:
        """The summary (what the report reads)."""
        return self.summary


class MatrixPair(Typed):
    a: str
    b: str
    n: int
    a_right_b_wrong: int
    b_right_a_wrong: int
    mcnemar_exact_p: float
    over_repeats: PairedMeans | None = None


class MatrixTable(Typed):
    conditions: list[MatrixCondition]
    pairs: list[MatrixPair]


def condition_table(runs: dict[str, Path], guardrails: tuple[str, ...]) -> MatrixTable:
    """Re-score each recorded prompt run (every repeat of a repeated one) under each guardrail
    condition."""
    conditions: list[MatrixCondition] = []
    finals: dict[str, list[dict[str, bool]]] = {}
    clusters: dict[str, str] = {}
    for prompt, run_dir in runs.items():
        reps = repeat_dirs(run_dir) or [run_dir]
        for d in reps:
            clusters.update({r.id: r.pair_id or r.id for r in RunDir(d).records()})
        for g in guardrails:
            names = tuple(x for x in g.split("+") if x and x != "none")
            scored = [rescore_run(d, names) for d in reps]
            label = prompt if not names else f"{prompt} + {'+'.join(names)}"
            finals[label] = [final_ok for _, _, final_ok in scored]
            row = MatrixCondition(condition=label, prompt=prompt, guardrails=list(names), run=str(reps[0]),
                                  summary=scored[0][0])
            if len(reps) > 1:
                row.repeats = _across_repeats([s for s, _, _ in scored], finals[label], clusters)
            conditions.append(row)
    pairs = []
    for a, b in combinations(finals, 2):
        fa, fb = finals[a][0], finals[b][0]  # McNemar on the first repeat (one answer per item)
        common = sorted(set(fa) & set(fb))
        b_only = sum(fa[i] and not fb[i] for i in common)
        c_only = sum(fb[i] and not fa[i] for i in common)
        pair = MatrixPair(a=a, b=b, n=len(common), a_right_b_wrong=b_only, b_right_a_wrong=c_only,
                          mcnemar_exact_p=mcnemar_exact(b_only, c_only))
        if len(finals[a]) > 1 or len(finals[b]) > 1:
            pair.over_repeats = paired_means(
                finals_means(finals[a]), finals_means(finals[b]), clusters, len(finals[a]), len(finals[b]))
        pairs.append(pair)
    return MatrixTable(conditions=conditions, pairs=pairs)


def _across_repeats(summaries: list[Figures], finals: list[dict[str, bool]], clusters: dict[str, str]
                    ) -> MatrixRepeats:
    """One condition over its repeats: final accuracy and latency mean ± CI across repeats, and
    the item-level accuracy with its standard error clustered by ``pair_id``."""
    def timing(s: Figures, q: str) -> float | None:
        lat = s.timing.get("latency_s")
        return getattr(lat, q) if lat is not None else None

    accuracy = [s.final_accuracy.value for s in summaries]
    return MatrixRepeats(
        repeats=len(summaries), per_repeat_accuracy=list(accuracy),
        accuracy=mean_ci(accuracy),
        latency_p50_s=mean_ci([timing(s, "p50") for s in summaries]),
        latency_p95_s=mean_ci([timing(s, "p95") for s in summaries]),
        item_level_accuracy=cluster_mean(finals_means(finals), clusters))


def render_markdown(table: MatrixTable, title: str = "Condition matrix") -> str:
    lines = [f"## {title}", "",
             "| condition | raw intent | final after guardrail | interventions | precision | recall | "
             "schema-valid |", "|---|---|---|---|---|---|---|"]
    for c in table.conditions:
        s = c.read()
        rec = "; ".join(f"{k} {pct(v)}" for k, v in s.intervention_recall.items()) or "n/a"
        lines.append(f"| {c.condition} | {pct(s.raw_accuracy)} | {pct(s.final_accuracy)} | "
                     f"{s.interventions} | {pct(s.intervention_precision)} | {rec} | "
                     f"{pct(s.schema_valid_rate)} |")
    lines += ["", "Paired comparisons (final correctness, exact McNemar):", "",
              "| A | B | n | A right, B wrong | B right, A wrong | p |", "|---|---|---|---|---|---|"]
    for p in table.pairs:
        lines.append(f"| {p.a} | {p.b} | {p.n} | {p.a_right_b_wrong} | {p.b_right_a_wrong} | "
                     f"{p.mcnemar_exact_p:.4f} |")
    lines += _repeats_lines(table)
    lines += ["", "Error taxonomy (final) per condition:", ""]
    for c in table.conditions:
        tax = ", ".join(f"{k} {v}" for k, v in c.read().error_taxonomy_final.items())
        lines.append(f"- {c.condition}: {tax}")
    return "\n".join(lines) + "\n"


def _repeats_lines(table: MatrixTable) -> list[str]:
    """The repeated runs' section: across repeats per condition, then each pair over repeats."""
    rows = [(c.condition, r) for c in table.conditions if (r := c.repeats) is not None]
    if not rows:
        return []

    def ci(d: MeanCI, fmt: str) -> str:
        if d.mean is None:
            return "n/a"
        return fmt.format(d.mean) + (f" [{fmt.format(d.ci95[0])}, {fmt.format(d.ci95[1])}]" if d.ci95 else "")

    lines = ["", "Across repeats (the table above shows the first repeat; mean [95 % t-interval] across "
             "repeats; item-level: each item's fraction of repeats right, ± 1.96·SE clustered by pair_id):", "",
             "| condition | repeats | final accuracy | item-level accuracy | e2e p50 s | e2e p95 s |",
             "|---|---|---|---|---|---|"]
    for condition, r in rows:
        il = r.item_level_accuracy
        item = (f"{il.mean:.1%} ± {Z95 * il.se_cluster:.1%} ({il.n_clusters} clusters / "
                f"{il.n_items} items)" if il.se_cluster is not None else "n/a")
        lines.append(f"| {condition} | {r.repeats} | {ci(r.accuracy, '{:.1%}')} | {item} | "
                     f"{ci(r.latency_p50_s, '{:.2f}')} | {ci(r.latency_p95_s, '{:.2f}')} |")
    lines += ["", "Paired over repeats (B − A, item by item, SE clustered by pair_id; normal two-sided p):", "",
              "| A | B | items (clusters) | B − A [95 % CI] | p |", "|---|---|---|---|---|"]
    for p in table.pairs:
        d = p.over_repeats
        if d is None or d.mean is None:
            continue
        diff = f"{100 * d.mean:+.1f} pp" + (f" [{100 * d.ci95[0]:+.1f}, {100 * d.ci95[1]:+.1f}]" if d.ci95 else "")
        lines.append(f"| {p.a} | {p.b} | {d.n_items} ({d.n_clusters}) | {diff} | {d.p_two_sided:.3g} |")
    return lines


def write_result(out: Path, table: MatrixTable, title: str) -> None:
    output_dir(out)
    write_json_atomic(out / "matrix.json", table.to_json())
    (out / "matrix.md").write_text(render_markdown(table, title))
