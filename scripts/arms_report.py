"""Issue 23's report: every recorded arm under a directory, side by side per model and set.

Reads the run directories ``scripts/run_arms.sh`` wrote (``<out>/<model>/<warehouse>-<set>/<set>-<arm>/``)
and prints Markdown: an overview (per model × warehouse × set: accuracy per arm with its Wilson 95 % CI
and the exact McNemar p of query vs each SQL arm), abstention precision and recall of the query arm
per warehouse (unanswerable sets hold only unanswerable items, so precision needs the answerable
sets' false abstentions too), issue 22's targets for the main-job model, then one table per
(model, set) with tokens, latency, cost per 1,000 questions, McNemar per pair and the error taxonomy.
Nothing is measured here: records only (the targets also read ``reports/main-job`` and
``reports/synthetic-bank``).
Usage: python scripts/arms_report.py reports/arms > reports/arms/README.md
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from nlq2sql.experiments.abstention import Decision, best_at_recall, decisions, leave_one_out, sweep
from nlq2sql.experiments.arms import ARMS, Arm, ArmsTable, arms_table, load_arm, render_markdown
from nlq2sql.records.item import iter_item_records
from nlq2sql.records.summary_parts import Rate
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import rate

PROJECT = Path(__file__).resolve().parent.parent
#: The README's main job recorded as the v1 intent and as the v2 query (scripts/run_main_job.sh).
MAIN_JOBS = (("main-job", "v1 main job"), ("main-job-v2", "v2 main job"))
#: Issue 22's targets are for the main-job model.
TARGET_MODEL = "qwen2.5-coder-0.5b"
Group = dict[tuple[str, str, str], list[Arm]]
#: What ``scripts/run_arms.sh`` runs by default (models; warehouse, set): a pair without a finished
#: matrix is listed as not recorded.
EXPECTED_MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b")
EXPECTED_SETS = tuple((wh, s) for wh in ("retail", "tpch", "flights", "jaffle")
                      for s in ("heldout" if wh == "jaffle" else "heldout-v2", "adversarial", "unanswerable"))


def missing(groups: Group) -> list[str]:
    gone = [f"{m} · {wh} · {s}" for m in EXPECTED_MODELS for wh, s in EXPECTED_SETS if (m, wh, s) not in groups]
    return ["## Not recorded", "", ("Sets the script runs by default with no finished matrix here: "
                                    + "; ".join(gone) + ".") if gone else "Every default set is recorded.", ""]


def _p(table: ArmsTable, a: str, b: str) -> str:
    for p in table.pairs:
        if {p.a, p.b} == {a, b}:
            return f"{p.mcnemar_exact_p:.3g} ({p.a_right_b_wrong}/{p.b_right_a_wrong})"
    return "–"


def overview(groups: Group) -> list[str]:
    lines = ["## Overview", "",
             "Final accuracy per arm (Wilson 95 % CI, k/n); McNemar: exact two-sided p, paired on item id "
             "(in brackets: only query right / only the SQL arm right). Unanswerable sets run the query arm "
             "only: its accuracy there is the share of questions it correctly called unanswerable.", "",
             "| model | warehouse | set | n | query | sql | sql-grammar | p query vs sql | p query vs sql-grammar |",
             "|---" * 9 + "|"]
    for (model, wh, evalset), group in sorted(groups.items()):
        table = arms_table(group)
        by = {r.arm: r for r in table.arms}
        cells = [pct(by[a].accuracy) if a in by else "–" for a in ARMS]
        n = max(r.n for r in table.arms)
        lines.append(f"| {model} | {wh} | {evalset} | {n} | {' | '.join(cells)} | {_p(table, 'query', 'sql')} | "
                     f"{_p(table, 'query', 'sql-grammar')} |")
    return lines + [""]


def pooled(groups: Group) -> list[str]:
    """Per model, every set that ran all three arms pooled (items keyed by warehouse/set/id):
    accuracy, McNemar against the query arm, and what each arm costs in tokens and latency."""
    lines = ["## Pooled over the answerable sets (every set with all three arms)", "",
             "| model | arm | sets | n | accuracy (95 % CI) | McNemar vs query (only query / only this) | "
             "prompt tokens (mean) | completion tokens (mean) | latency p50 / p95 |", "|---" * 9 + "|"]
    for model in sorted({m for m, _, _ in groups}):
        full = {k: g for k, g in groups.items() if k[0] == model and {a.answer for a in g} >= set(ARMS)}
        if not full:
            continue
        arms = []
        for arm in ARMS:
            runs = [(f"{wh}/{es}", a) for (_, wh, es), g in sorted(full.items()) for a in g if a.answer == arm]
            arms.append(Arm(arm, arm, model, "pooled", None, None,
                            {f"{k}/{i}": v for k, a in runs for i, v in a.correct.items()},
                            {f"{k}/{i}": v for k, a in runs for i, v in a.lenient.items()},
                            sum((a.errors for _, a in runs), Counter()),
                            [t for _, a in runs for t in a.prompt_tokens],
                            [t for _, a in runs for t in a.completion_tokens],
                            [t for _, a in runs for t in a.latency_s]))
        table = arms_table(arms)
        for r in table.arms:
            lat = r.latency_s
            lines.append(f"| {model} | {r.arm} | {len(full)} | {r.n} | {pct(r.accuracy)} | "
                         f"{_p(table, 'query', r.arm) if r.arm != 'query' else '—'} | "
                         f"{r.prompt_tokens.mean:.0f} | {r.completion_tokens.mean:.1f} | "
                         f"{lat.p50:.1f} / {lat.p95:.1f} s |")
    return lines + [""]


def _abstention(arms: list[Arm]) -> tuple[int, int, int]:
    """(abstained, abstained rightly, unanswerable items) over the query-arm runs given."""
    said = right = items = 0
    for a in arms:
        ab = a.summary.abstention if a.summary else None
        if ab is not None:
            said, right, items = said + ab.abstained, right + ab.precision.k, items + ab.unanswerable_items
    return said, right, items


def abstention_rows(groups: Group) -> dict[tuple[str, str], tuple[int, int, int, list[str]]]:
    """Per (model, warehouse): the query arm's abstentions pooled over every recorded set."""
    out: dict[tuple[str, str], tuple[int, int, int, list[str]]] = {}
    for (model, wh, evalset), group in sorted(groups.items()):
        q = [a for a in group if a.answer == "query"]
        if not q:
            continue
        said, right, items = _abstention(q)
        s0, r0, i0, sets = out.get((model, wh), (0, 0, 0, []))
        out[(model, wh)] = (s0 + said, r0 + right, i0 + items, [*sets, f"{evalset} ({said} abstained)"])
    return out


def abstention(groups: Group) -> list[str]:
    lines = ["## Abstention (query arm)", "",
             "The query arm may answer `{\"unanswerable\": …}`. The unanswerable sets hold only unanswerable "
             "questions and the held-out/adversarial sets only answerable ones, so per warehouse the sets are "
             "pooled: precision = right abstentions / all abstentions (false ones come from the answerable "
             "sets), recall = right abstentions / unanswerable questions.", "",
             "| model | warehouse | sets (abstentions) | abstained | precision (95 % CI) | recall (95 % CI) |",
             "|---" * 6 + "|"]
    rows = abstention_rows(groups)
    for (model, wh), (said, right, items, sets) in rows.items():
        lines.append(f"| {model} | {wh} | {', '.join(sets)} | {said} | {pct(rate(right, said))} | "
                     f"{pct(rate(right, items))} |")
    for model in sorted({m for m, _ in rows}):
        said = sum(v[0] for (m, _), v in rows.items() if m == model)
        right = sum(v[1] for (m, _), v in rows.items() if m == model)
        items = sum(v[2] for (m, _), v in rows.items() if m == model)
        lines.append(f"| {model} | **all** | every set above | {said} | {pct(rate(right, said))} | "
                     f"{pct(rate(right, items))} |")
    return lines + [""]


def _shown(root: Path) -> str:
    """The records' folder as the report names it: relative as given, never this machine's absolute path."""
    return root.name if root.is_absolute() else root.as_posix()


def _summary(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**missed**")


def _acc(group: list[Arm] | None) -> tuple[Rate | None, Arm | None]:
    q = next((a for a in group or [] if a.answer == "query"), None)
    return (rate(sum(q.correct.values()), len(q.correct)) if q else None), q


def abstention_targets(root: Path) -> list[tuple[str, str, str, bool | None]]:
    """Unanswerable precision at recall ≥ 0.6 with a confidence cut-off (``scripts/run_abstention.sh``):
    per warehouse at the cut-off chosen on the other warehouses, and pooled at its best cut-off."""
    if not root.is_dir():
        return []
    groups: dict[str, list[Decision]] = {}
    for d in sorted(p.parent for p in root.glob("*/manifest.json")):
        wh = str(json.loads((d / "manifest.json").read_text()).get("semantic_model"))
        groups.setdefault(wh, []).extend(decisions(iter_item_records(d / "records.jsonl")))
    rows: list[tuple[str, str, str, bool | None]] = []
    src = f"reports/abstention/{root.name}"
    for wh, p in leave_one_out(groups).items():
        if p is not None:
            rows.append((f"{wh}: unanswerable precision ≥ 0.8 at recall ≥ 0.6 (cut-off chosen on the other warehouses)",
                         f"precision {pct(p.precision)}, recall {pct(p.recall)} at {p.threshold:.3g}", src,
                         p.meets_target))
    best = best_at_recall(sweep([x for items in groups.values() for x in items]))
    if best is not None:
        rows.append(("all warehouses: unanswerable precision ≥ 0.8 at recall ≥ 0.6 (best cut-off, in-sample)",
                     f"precision {pct(best.precision)}, recall {pct(best.recall)} at {best.threshold:.3g}",
                     src,
                     best.meets_target))
    return rows


def targets(groups: Group, root: Path) -> list[str]:
    """Issue 22's targets for the main-job model, each with its figure and where it comes from."""
    rows: list[tuple[str, str, str, bool | None]] = []
    for job, label in MAIN_JOBS:
        s = _summary(PROJECT / "reports" / job / "heldout" / "summary.json")
        if s:
            acc = s["final_accuracy"]
            rows.append((f"retail held-out ≥ 85 % ({label})", pct(acc), f"reports/{job}/heldout", acc["value"] >= 0.85))
    v2, _ = _acc(groups.get((TARGET_MODEL, "retail", "heldout-v2")))
    if v2:
        rows.append(("retail held-out ≥ 85 % (v2, query arm)", pct(v2),
                     f"{_shown(root)}/{TARGET_MODEL}/retail-heldout-v2", v2.value is not None and v2.value >= 0.85))
    for wh in sorted({w for (m, w, _) in groups if m == TARGET_MODEL}):
        held = next((groups[(TARGET_MODEL, wh, s)] for s in ("heldout-v2", "heldout")
                     if (TARGET_MODEL, wh, s) in groups), None)
        h, _ = _acc(held)
        adv, qa = _acc(groups.get((TARGET_MODEL, wh, "adversarial")))
        if not (adv and qa):
            continue
        base = qa.summary.majority_baseline.model_dump(exclude_unset=True) if qa.summary else {}
        ok = None if h is None or h.value is None or adv.value is None or base.get("value") is None else (
            adv.value >= h.value - 0.15 and adv.value > base["value"])
        rows.append((f"{wh} adversarial ≥ held-out − 15 points and > majority baseline (query arm)",
                     f"{pct(adv)} vs held-out {pct(h) if h else 'not run'} − 15 = "
                     f"{((h.value or 0.0) - 0.15) * 100:.1f} % and baseline {base.get('value', 0) * 100:.1f} % "
                     f"({base.get('label')})" if h else pct(adv),
                     f"{_shown(root)}/{TARGET_MODEL}/{wh}-adversarial", ok))
    for job, label in MAIN_JOBS:
        main = PROJECT / "reports" / job
        mh, ma = _summary(main / "heldout" / "summary.json"), _summary(main / "adversarial" / "summary.json")
        if mh and ma:
            h, a, base = mh["final_accuracy"], ma["final_accuracy"], ma["majority_baseline"]
            rows.append((f"retail adversarial ≥ held-out − 15 points and > majority baseline ({label})",
                         f"{pct(a)} vs held-out {h['value'] * 100:.1f} % − 15 = {(h['value'] - 0.15) * 100:.1f} % "
                         f"and baseline {base['value'] * 100:.1f} % ({base['label']})", f"reports/{job}/adversarial",
                         a["value"] >= h["value"] - 0.15 and a["value"] > base["value"]))
    for d in sorted((PROJECT / "reports" / "synthetic-bank").glob("*-synthetic")):
        s = _summary(d / "summary.json")
        if s:
            acc = s["final_accuracy"]
            rows.append((f"{d.name.removesuffix('-synthetic')} zero-shot (synthetic bank only) ≥ 60 %", pct(acc),
                         f"reports/synthetic-bank/{d.name}", acc["value"] >= 0.60))
    ab = abstention_rows(groups)
    pooled = [v for (m, _), v in ab.items() if m == TARGET_MODEL]
    for label, vals in [(wh, [v]) for (m, wh), v in ab.items() if m == TARGET_MODEL] + [("all warehouses", pooled)]:
        said, right, items = sum(v[0] for v in vals), sum(v[1] for v in vals), sum(v[2] for v in vals)
        if not items:
            continue
        prec, rec = rate(right, said), rate(right, items)
        ok = said > 0 and right / said >= 0.8 and right / items >= 0.6
        rows.append((f"{label}: unanswerable precision ≥ 0.8 at recall ≥ 0.6 (query arm, sets pooled)",
                     f"precision {pct(prec)}, recall {pct(rec)}", f"{_shown(root)}/{TARGET_MODEL}/*", ok))
    rows += abstention_targets(PROJECT / "reports" / "abstention" / TARGET_MODEL)
    for job, label in MAIN_JOBS:
        for name in ("heldout", "adversarial"):
            s = _summary(PROJECT / "reports" / job / name / "summary.json")
            if s and s.get("intervention_precision"):
                ip = s["intervention_precision"]
                rows.append((f"guardrail intervention precision ≥ 0.95 ({name}, {label})", pct(ip),
                             f"reports/{job}/{name}", ip["value"] is not None and ip["value"] >= 0.95))
    lines = [f"## Issue 22's targets ({TARGET_MODEL}, final accuracy)", "",
             "| target | figure | from | verdict |", "|---" * 4 + "|"]
    lines += [f"| {t} | {fig} | `{src}` | {_verdict(ok)} |" for t, fig, src, ok in rows]
    return lines + [""]


def main(root: Path) -> str:
    # a set's runs count once its matrix finished (arms.json): an interrupted set is left out
    runs = sorted(p.parent for p in root.glob("*/*/*/manifest.json") if (p.parent.parent / "arms.json").is_file())
    if not runs:
        raise SystemExit(f"no recorded runs under {root}")
    arms = [load_arm(d) for d in runs]
    groups: Group = {}
    for a in arms:
        wh = (a.manifest.semantic_model if a.manifest else None) or "?"
        groups.setdefault((a.model, str(wh), a.evalset), []).append(a)
    order = {a: i for i, a in enumerate(ARMS)}
    for group in groups.values():
        group.sort(key=lambda a: order.get(a.answer, 99))
    manifests = [a.manifest for a in arms if a.manifest is not None]  # (every loaded arm has one)
    commits = sorted({str(m.git_commit)[:12] for m in manifests})
    dirty = sorted({str(m.git_dirty) for m in manifests})
    sampling = manifests[0].sampling
    assert sampling is not None  # (every arm run records its sampling)
    lines = ["# Does the semantic layer help? Answer arms side by side (issue 23)", "",
             f"Generated by `scripts/arms_report.py` from the records under `{_shown(root)}` (runs by "
             f"`scripts/run_arms.sh`). Commit(s) of the runs: {', '.join(commits)}; uncommitted changes when run: "
             f"{', '.join(dirty)}. "
             f"Arms: `query` (the v2 answer: a MetricFlow query constrained by the manifest's JSON Schema — the "
             f"issue's *intent* arm for v2 sets), `sql` (DuckDB SQL, free text, guarded and sandboxed) and "
             f"`sql-grammar` (the same prompt under the warehouse's SQL grammar); all scored by rows against the "
             f"same gold. Each with K retrieved examples from the warehouse's dev bank (solved SQL for the SQL "
             f"arms). max_tokens {sampling.max_tokens}, temperature {sampling.temperature}. "
             "Latency is CPU vLLM latency (2 cores, shared with other work): it ranks the arms on this machine, "
             "it is not a GPU figure. Cost per 1k assumes $1/hour and each run's measured completed requests/s.", ""]
    lines += overview(groups) + missing(groups) + pooled(groups) + abstention(groups) + targets(groups, root)
    for (model, wh, evalset), group in sorted(groups.items()):
        table = arms_table(group, gpu_cost_per_hour=1.0)
        lines.append(render_markdown(table, f"{model} · {wh} · {evalset}"))
        ex = [getattr(a.manifest, "examples", None) for a in group]  # (conditions.example_bank.ExamplesManifest)
        sols = [e.solutions for e in ex if e is not None and e.solutions]
        if sols:
            lines.append(f"Solved-SQL bank: {json.dumps(sols[0])} (clean: one-line SELECT checked by execution "
                         "against the gold's rows; metricflow: MetricFlow's compiled SQL, parameters inlined).\n")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1] if len(sys.argv) > 1 else "reports/arms")))
