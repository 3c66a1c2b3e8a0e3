"""The gate and the comparison report on repeated runs (``eval --repeats N``: ``OUT/r0 …``).

Compared item by item over repeats: each item's fraction right, candidate minus baseline, averaged
over shared items, with standard error clustered by ``pair_id`` (CR1; the naive one beside it). The
plain gate's per-item checks run on the first repeats."""

from __future__ import annotations

from pathlib import Path

from nlq2sql.errors import InputError
from nlq2sql.experiments import gate as gt
from nlq2sql.run.repeats import Z95, PairedMeans, paired_difference, repeat_dirs, summarise_repeats

__all__ = ["gate", "repeats_check", "repeats_section"]


def _paired(base: list[Path], cand: list[Path]) -> PairedMeans:
    return paired_difference(base, cand)


def repeats_check(diff: PairedMeans, alpha: float, max_drop: float) -> gt.Check:
    """Fail when the paired drop over repeats is significant (one-sided, clustered SE) or larger
    than ``max_drop`` percentage points."""
    from scipy.stats import norm

    mean, se = diff.mean or 0.0, diff.se_cluster  # (mean None: no shared item, refused by the plain gate)
    p_one = float(norm.cdf(mean / se)) if se else (0.0 if mean < 0 else 1.0)
    drop_pp = -100 * mean
    status: gt.Status = "fail" if p_one < alpha or drop_pp > max_drop else "pass"
    ci = diff.ci95
    return gt.Check(
        id="accuracy_repeats", title="final accuracy over repeats: item-paired, SE clustered by pair_id",
        status=status,
        detail=(f"candidate − baseline = {100 * mean:+.1f} pp over {diff.n_items} items "
                f"({diff.baseline_repeats} vs {diff.candidate_repeats} repeats; {diff.n_clusters} "
                f"pair_id clusters), 95 % CI "
                + (f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}] pp" if ci else "n/a")
                + f"; one-sided p = {p_one:.4g} (alpha {alpha:g}); drop bound {max_drop:g} pp"),
        numbers={"difference": mean, "se_cluster": se, "se_naive": diff.se_naive, "p_one_sided": p_one,
                 "items": diff.n_items, "clusters": diff.n_clusters})


def gate(cfg: gt.GateConfig) -> gt.GateResult:
    """The plain gate, or for two repeated runs: the plain checks on their first repeats plus
    ``accuracy_repeats`` over every repeat."""
    base, cand = repeat_dirs(cfg.baseline), repeat_dirs(cfg.candidate)
    if not base and not cand:
        return gt.run_gate(cfg)
    if not (base and cand):
        raise InputError("compare a repeated run (OUT/r0, OUT/r1, …) with another repeated run",
                         field="--candidate" if base else "--baseline")
    first = gt.run_gate(cfg.model_copy(update={"baseline": base[0], "candidate": cand[0]}))
    check = repeats_check(_paired(base, cand), cfg.alpha, cfg.max_drop)
    checks = [*first.checks, check]
    verdict = "fail" if any(c.status == "fail" for c in checks) else "pass"
    return first.model_copy(update={"checks": checks, "verdict": verdict, "config": cfg})


def repeats_section(dirs: list[Path]) -> list[str]:
    """Markdown lines for the comparison report: each repeated run across its repeats, and each
    one's item-paired difference from the first repeated run."""
    repeated = [(d, repeat_dirs(d)) for d in dirs]
    repeated = [(d, r) for d, r in repeated if r]
    if not repeated:
        return []
    lines = ["", "## Repeated runs", "",
             "| run | repeats | accuracy across repeats (mean [95 % CI]) | item-level accuracy ± 1.96·SE "
             "(clustered by pair_id) | vs first: difference [95 % CI], p |", "|---|---|---|---|---|"]
    first = repeated[0][1]
    for d, reps in repeated:
        s = summarise_repeats(d)
        a = s.across_repeats.accuracy
        il = s.item_level_accuracy
        acc = (f"{a.mean:.1%}" + (f" [{a.ci95[0]:.1%}, {a.ci95[1]:.1%}]" if a.ci95 else "")
               if a.mean is not None else "n/a")
        item = (f"{il.mean:.1%} ± {Z95 * il.se_cluster:.1%} ({il.n_clusters} clusters / "
                f"{il.n_items} items)" if il.se_cluster is not None and il.mean is not None else "n/a")
        if reps is first:
            vs = "—"
        else:
            diff = _paired(first, reps)
            ci, mean = diff.ci95, diff.mean or 0.0
            vs = (f"{100 * mean:+.1f} pp [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}], p = "
                  f"{diff.p_two_sided:.3g}" if ci else f"{100 * mean:+.1f} pp")
        lines.append(f"| {d.name} | {s.repeats} | {acc} | {item} | {vs} |")
    return lines
