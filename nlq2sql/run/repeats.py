"""Repeated runs: the same items N times, each repeat in its own seeded order.

``eval --repeats N`` writes whole runs ``OUT/r0 … OUT/r{N-1}`` (``load.order_seed = seed + k``) and
``OUT/repeats.json``: mean ± CI across repeats, and item-level accuracy with standard error clustered
by ``pair_id`` (paraphrases are not independent). Resume keeps finished repeats, resumes the rest."""

from __future__ import annotations

import math
import re
import shutil
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from nlq2sql.errors import InputError, RecordError
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import SUMMARY, write_json_atomic
from nlq2sql.records.typed import Num, Typed
from nlq2sql.run.config import EvalConfig, validate

__all__ = ["MAX_REPEATS", "REPEATS_FILE", "AcrossRepeats", "ClusterMean", "ItemCounts", "MeanCI", "PairedMeans",
           "RepeatRow", "RepeatsResult", "RepeatsServer", "check_repeats_out", "cluster_mean", "finals_means",
           "item_means", "mean_ci", "paired_difference", "paired_means", "render_repeats", "repeat_dirs",
           "run_repeats", "summarise_repeats"]

REPEATS_FILE = "repeats.json"
MAX_REPEATS = 100
_REPEAT = re.compile(r"r(\d+)")
Z95 = 1.959963984540054


# The figures as types, turned into JSON once, where they are written (``to_json``).
class MeanCI(Typed):
    """A mean across repeats with its t-interval (``sd``/``ci95`` None under two values)."""

    n: int
    mean: float | None
    sd: float | None
    ci95: list[float] | None


class ClusterMean(Typed):
    """A mean of per-item values with its cluster-robust SE (CR1) and the naive one."""

    n_items: int
    n_clusters: int
    mean: float | None
    se_cluster: float | None
    se_naive: float | None
    ci95: list[float] | None


class PairedMeans(ClusterMean):
    """Candidate minus baseline over shared items, with the two-sided p and what was compared."""

    p_two_sided: float | None
    baseline_repeats: int
    candidate_repeats: int
    baseline_only: int
    candidate_only: int


class RepeatRow(Typed):
    """One repeat's figures, from its summary (as it holds them: an int stays an int)."""

    run: str
    n: int
    accuracy: Num | None
    raw_accuracy: Num | None
    latency_p50_s: Num | None
    latency_p95_s: Num | None
    ttft_p50_s: Num | None
    req_per_s: Num | None


class AcrossRepeats(Typed):
    accuracy: MeanCI
    raw_accuracy: MeanCI
    latency_p50_s: MeanCI
    latency_p95_s: MeanCI
    ttft_p50_s: MeanCI
    req_per_s: MeanCI


class ItemCounts(Typed):
    always_right: int
    never_right: int
    flaky: int


class RepeatsServer(Typed):
    """The server the repeats ran on (``eval --repeats``): started here or not, its backend."""

    started_by_us: bool
    structured_outputs: dict[str, str | bool | None] | None  # as the manifests record it
    batch_invariant: bool | None


class RepeatsResult(Typed):
    """``repeats.json``: each repeat, the figures across them, the item-level accuracy."""

    repeats: int
    per_repeat: list[RepeatRow]
    across_repeats: AcrossRepeats
    item_level_accuracy: ClusterMean
    items: ItemCounts
    order_seeds: list[int] | None = None  # set by run_repeats
    server: RepeatsServer | None = None  # set by the CLI


def repeat_dirs(out: Path) -> list[Path]:
    """The repeat runs under ``out`` (``r0``, ``r1``, …, in order); [] when it is a plain run."""
    if not out.is_dir():
        return []
    found = [(int(m.group(1)), d) for d in out.iterdir() if d.is_dir() and (m := _REPEAT.fullmatch(d.name))]
    return [d for _, d in sorted(found)]


def check_repeats_out(cfg: EvalConfig, repeats: int) -> None:
    """The options and ``--out`` of a repeated run, refused before anything starts or is written."""
    validate(cfg)
    if not 2 <= repeats <= MAX_REPEATS:
        raise InputError(f"must be between 2 and {MAX_REPEATS}, got {repeats}", field="--repeats")
    out = cfg.out
    if out.exists() and not out.is_dir():
        raise RecordError("output path exists and is not a directory", path=str(out))
    existing = out.is_dir() and any(out.iterdir())
    if cfg.resume and not existing:
        raise RecordError("nothing to resume: no run here", path=str(out))
    if existing and not cfg.resume and not cfg.force:
        raise RecordError("output directory exists; pass --resume to continue it or --force to replace it",
                          path=str(out))
    if existing and not cfg.resume and not repeat_dirs(out) and not (out / REPEATS_FILE).exists():
        raise RecordError("not a repeated run: --force would replace it with one; give a new --out", path=str(out))


def run_repeats(cfg: EvalConfig, repeats: int, run: Callable[[EvalConfig], object],
                seed: int = 0) -> RepeatsResult:
    """Run ``cfg`` ``repeats`` times under ``cfg.out`` with ``run`` (``live.run_eval``); returns
    the summary across repeats, also written to ``OUT/repeats.json``."""
    check_repeats_out(cfg, repeats)
    out = cfg.out
    for k in range(repeats):
        sub = out / f"r{k}"
        if cfg.resume and (sub / SUMMARY).exists():
            continue  # finished: every item of this repeat is on disk exactly once
        resume = cfg.resume and sub.is_dir() and any(sub.iterdir())
        run(replace(cfg, out=sub, resume=resume, force=cfg.force and not resume,
                    load=replace(cfg.load, order_seed=seed + k)))
    if cfg.force:  # a replaced run with more repeats than this one: drop the extra ones
        for stale in repeat_dirs(out)[repeats:]:
            shutil.rmtree(stale)
    result = summarise_repeats(out)
    result.order_seeds = [seed + k for k in range(repeats)]
    write_json_atomic(out / REPEATS_FILE, result.to_json())
    return result


def mean_ci(values: list[float | None]) -> MeanCI:
    """Mean across repeats with a t-interval (repeats are few: a normal interval would be too narrow)."""
    from scipy.stats import t

    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return MeanCI(n=0, mean=None, sd=None, ci95=None)
    mean = statistics.fmean(vals)
    if len(vals) < 2:
        return MeanCI(n=1, mean=mean, sd=None, ci95=None)
    sd = statistics.stdev(vals)
    half = float(t.ppf(0.975, len(vals) - 1)) * sd / math.sqrt(len(vals))
    return MeanCI(n=len(vals), mean=mean, sd=sd, ci95=[mean - half, mean + half])


def item_means(dirs: list[Path]) -> tuple[dict[str, float], dict[str, str]]:
    """Per item: the fraction of repeats it was right in (final correctness), and its cluster
    (``pair_id``, else its own id).  Items missing from a repeat count over the repeats they are in."""
    finals: list[dict[str, bool]] = []
    cluster: dict[str, str] = {}
    for d in dirs:
        right: dict[str, bool] = {}
        for rec in RunDir(d).records():
            item = rec.id
            right[item] = bool(rec.judgement.correct_final) if rec.judgement is not None else False
            cluster[item] = rec.pair_id or item
        finals.append(right)
    return finals_means(finals), cluster


def finals_means(finals: list[dict[str, bool]]) -> dict[str, float]:
    """Per item, the fraction of the repeats (one ``{id: correct}`` map each) it was right in,
    over the repeats it is in (also for correctness re-scored offline, as the matrix's guardrails)."""
    right: dict[str, list[bool]] = {}
    for rep in finals:
        for item, ok in rep.items():
            right.setdefault(item, []).append(ok)
    return {i: sum(v) / len(v) for i, v in right.items()}


def cluster_mean(values: dict[str, float], cluster: dict[str, str]) -> ClusterMean:
    """Mean of per-item values with a cluster-robust standard error (CR1: clusters are
    ``pair_id`` groups), beside the naive one that treats every item as independent."""
    n = len(values)
    if n == 0:
        return ClusterMean(n_items=0, n_clusters=0, mean=None, se_cluster=None, se_naive=None, ci95=None)
    mean = statistics.fmean(values.values())
    sums: dict[str, float] = {}
    for item, v in values.items():
        sums[cluster.get(item, item)] = sums.get(cluster.get(item, item), 0.0) + (v - mean)
    g = len(sums)
    se = math.sqrt(g / (g - 1) * sum(s * s for s in sums.values())) / n if g > 1 else None
    naive = statistics.stdev(values.values()) / math.sqrt(n) if n > 1 else None
    return ClusterMean(n_items=n, n_clusters=g, mean=mean, se_cluster=se, se_naive=naive,
                       ci95=[mean - Z95 * se, mean + Z95 * se] if se is not None else None)


def paired_difference(base: list[Path], cand: list[Path]) -> PairedMeans:
    """Candidate minus baseline accuracy, paired item by item over the repeats (each item's
    fraction right), with the standard error clustered by ``pair_id``; two-sided normal p."""
    b, cluster = item_means(base)
    c, cluster_c = item_means(cand)
    return paired_means(b, c, {**cluster_c, **cluster}, len(base), len(cand))


def paired_means(b: dict[str, float], c: dict[str, float], cluster: dict[str, str], base_repeats: int,
                 cand_repeats: int) -> PairedMeans:
    """``c`` minus ``b`` over their shared items (per-item fractions right), SE clustered by
    ``cluster``; two-sided normal p."""
    from scipy.stats import norm

    shared = sorted(b.keys() & c.keys())
    res = cluster_mean({i: c[i] - b[i] for i in shared}, cluster)
    se, mean = res.se_cluster, res.mean
    p = (float(2 * norm.sf(abs(mean) / se)) if se else (1.0 if not mean else 0.0)) if mean is not None else None
    return PairedMeans(n_items=res.n_items, n_clusters=res.n_clusters, mean=mean, se_cluster=se, se_naive=res.se_naive,
                       ci95=res.ci95, p_two_sided=p, baseline_repeats=base_repeats, candidate_repeats=cand_repeats,
                       baseline_only=len(b.keys() - c.keys()), candidate_only=len(c.keys() - b.keys()))


def summarise_repeats(out: Path) -> RepeatsResult:
    """Accuracy and latency across the finished repeats under ``out``, from their records."""
    dirs = repeat_dirs(out)
    if not dirs:
        raise RecordError("no repeats (r0, r1, …) here", path=str(out))
    per: list[RepeatRow] = []
    for d in dirs:
        s = RunDir.finished(d).summary_json()  # refuses records that no longer match their summary
        t = s.get("timing") or {}
        per.append(RepeatRow(run=d.name, n=s["n"], accuracy=(s.get("final_accuracy") or {}).get("value"),
                             raw_accuracy=(s.get("raw_accuracy") or {}).get("value"),
                             latency_p50_s=(t.get("latency_s") or {}).get("p50"),
                             latency_p95_s=(t.get("latency_s") or {}).get("p95"),
                             ttft_p50_s=(t.get("ttft_s") or {}).get("p50"),
                             req_per_s=(s.get("throughput") or {}).get("req_per_s")))
    means, cluster = item_means(dirs)

    def across(field: str) -> MeanCI:
        return mean_ci([getattr(r, field) for r in per])

    return RepeatsResult(
        repeats=len(dirs), per_repeat=per,
        across_repeats=AcrossRepeats(**{f: across(f) for f in AcrossRepeats.model_fields}),
        item_level_accuracy=cluster_mean(means, cluster),
        items=ItemCounts(always_right=sum(v == 1 for v in means.values()),
                         never_right=sum(v == 0 for v in means.values()), flaky=sum(0 < v < 1 for v in means.values())))


def _ci(d: MeanCI, fmt: str) -> str:
    if d.mean is None:
        return "n/a"
    ci = d.ci95
    return fmt.format(d.mean) + (f" [{fmt.format(ci[0])}, {fmt.format(ci[1])}]" if ci else "") + f" (n={d.n})"


def render_repeats(result: RepeatsResult) -> str:
    """Markdown: each repeat, then mean [95 % CI] across repeats and the item-level accuracy."""
    lines = [f"## {result.repeats} repeats", "", "| repeat | n | accuracy | e2e p50 s | e2e p95 s | req/s |",
             "|---|---|---|---|---|---|"]
    for r in result.per_repeat:
        def f(v: object, spec: str) -> str:
            return format(v, spec) if isinstance(v, int | float) else "n/a"
        lines.append(f"| {r.run} | {r.n} | {f(r.accuracy, '.1%')} | {f(r.latency_p50_s, '.2f')} | "
                     f"{f(r.latency_p95_s, '.2f')} | {f(r.req_per_s, '.2f')} |")
    a = result.across_repeats
    il = result.item_level_accuracy
    se = il.se_cluster
    lines += ["", f"- accuracy across repeats: {_ci(a.accuracy, '{:.1%}')}",
              f"- e2e p50 across repeats: {_ci(a.latency_p50_s, '{:.2f} s')}; "
              f"p95: {_ci(a.latency_p95_s, '{:.2f} s')}",
              f"- item-level accuracy: {il.mean:.1%} ± {Z95 * se:.1%} (95 %, SE clustered by pair_id over "
              f"{il.n_clusters} clusters of {il.n_items} items; naive SE {il.se_naive:.3f}, "
              f"clustered {se:.3f})" if il.mean is not None and se is not None else
              "- item-level accuracy: n/a",
              f"- items right in every repeat {result.items.always_right}, in none "
              f"{result.items.never_right}, in some (flaky) {result.items.flaky}"]
    return "\n".join(lines) + "\n"
