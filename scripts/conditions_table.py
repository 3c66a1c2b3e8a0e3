"""Render a conditions table (one row per run) from run records, with McNemar against the first.

    .venv/bin/python scripts/conditions_table.py reports/conditions/MODEL > reports/conditions/MODEL/README.md

Every figure is recomputed from ``records.jsonl``; rows are ordered by the run folder name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nlq2sql.records.store import iter_records
from nlq2sql.stages.score import mcnemar_exact, rate, spread


def pct(k: int, n: int) -> str:
    if not n:
        return "n/a"
    lo, hi = rate(k, n).ci95 or (0.0, 0.0)
    return f"{100 * k / n:.1f} % [{100 * lo:.1f}–{100 * hi:.1f}] ({k}/{n})"


def describe(m: dict) -> str:
    parts = [m["prompt"], m["sampling"].get("schema", "flat")]
    if m.get("examples"):
        parts.append(f"{m['examples']['k']} examples ({m['examples']['bank']})")
    if m.get("planner"):
        parts.append(f"planner {m['planner']}")
    parts.append("+".join(m["guardrails"]) or "no guardrail")
    return " · ".join(parts)


def main(root: Path) -> str:
    runs = sorted(p.parent for p in root.glob("*/manifest.json"))
    if not runs:
        raise SystemExit(f"no runs under {root}")
    first_m = json.loads((runs[0] / "manifest.json").read_text())
    base = {r["id"]: r["correct_final"] for r in iter_records(runs[0] / "records.jsonl")}
    commits = sorted({str(json.loads((r / "manifest.json").read_text()).get("git_commit"))[:12] for r in runs})
    lines = [f"# Conditions · {first_m['model']} · {first_m['semantic_model']} {first_m['evalset']}", "",
             f"CPU vLLM {first_m['server'].get('server_version')}, c={first_m['concurrency']}, max_tokens "
             f"{first_m['sampling']['max_tokens']}; commit(s) {', '.join(commits)}. McNemar (exact, two-sided) "
             f"compares final correctness with the first row on the same items. Rendered by "
             "`scripts/conditions_table.py` from the records.", "",
             "| run | condition | n | schema-valid | raw accuracy | final accuracy | majority baseline | "
             "McNemar p vs first (b/c) | latency p50 (all stages) | completion tokens (mean) | requests/item |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        m = json.loads((run / "manifest.json").read_text())
        recs = list(iter_records(run / "records.jsonl"))
        n = len(recs)
        golds: dict[str, int] = {}
        for r in recs:
            golds[r["gold_intent"]["intent"]] = golds.get(r["gold_intent"]["intent"], 0) + 1
        b = sum(1 for r in recs if base.get(r["id"]) and not r["correct_final"])
        c = sum(1 for r in recs if base.get(r["id"]) is False and r["correct_final"])
        lat = spread([r.get("latency_total_s") or r["latency_s"] for r in recs if r.get("latency_s")])
        toks = spread([(r.get("completion_tokens") or 0) + (r.get("planner_completion_tokens") or 0)
                       for r in recs if r.get("completion_tokens") is not None])
        reqs = sum(r.get("requests", 1) for r in recs) / n if n else 0
        lines.append("| " + " | ".join([
            run.name, describe(m), str(n), pct(sum(r["raw_intent"] is not None for r in recs), n),
            pct(sum(r["correct_raw"] for r in recs), n), pct(sum(r["correct_final"] for r in recs), n),
            pct(max(golds.values()), n), "—" if run == runs[0] else f"{mcnemar_exact(b, c):.3g} ({b}/{c})",
            f"{lat.p50:.1f} s (n={lat.n})" if lat.n else "n/a",
            f"{toks.mean:.1f}" if toks.n else "n/a", f"{reqs:.2f}"]) + " |")
    lines += guardrail_table(runs)
    return "\n".join(lines) + "\n"


#: Guardrail conditions re-scored offline on every run (no new request): lexical rules, the
#: learned classifier, value linking (``values``), the sort direction (``sort``) and combinations.
CONDITIONS = ("none", "ranking", "values", "ranking+values", "learned:ranking", "learned:ranking+values",
              "ranking+sort+values", "learned:ranking+sort+values")


def guardrail_table(runs: list[Path]) -> list[str]:
    """Each run's recorded answers under every guardrail condition, with per-rule precision and
    the error classes that remain under the best one."""
    from nlq2sql.answers.offline import rescore_run

    out = ["", "## Guardrails re-scored on each run's answers", "",
           "The same recorded answers under each guardrail condition (`nlq2sql.answers.offline.rescore_run`, no new "
           "request). McNemar: final correctness against `none` (raw) on the same items. Precision: "
           "interventions whose changed fields equal the gold's.", "",
           "| run | guardrails | final accuracy | interventions | precision | McNemar p vs none (b/c) | "
           "per rule: fired · precision · recall |", "|---|---|---|---|---|---|---|"]
    for run in runs:
        best: tuple[int, str, dict] | None = None
        raw_ok: dict[str, bool] = {}
        for cond in CONDITIONS:
            names = tuple(n for n in cond.split("+") if n != "none")
            figures, r_ok, f_ok = rescore_run(run, names)
            summ = figures.to_json()  # (the table reads the figures as written)
            raw_ok = raw_ok or r_ok
            n = summ["n"]
            k = sum(f_ok.values())
            b = sum(1 for i, ok in raw_ok.items() if ok and not f_ok.get(i))
            c = sum(1 for i, ok in raw_ok.items() if not ok and f_ok.get(i))
            prec = summ["intervention_precision"]
            rules = "; ".join(f"`{rid}` {v['interventions']} · {v['precision']['k']}/{v['precision']['n']} · "
                              f"{v['recall']['k']}/{v['recall']['n']}"
                              for rid, v in summ["rules"].items() if v["interventions"] or v["scope"])
            out.append("| " + " | ".join([
                run.name, cond, pct(k, n), str(summ["interventions"]),
                f"{prec['k']}/{prec['n']}" if prec["n"] else "—",
                "—" if cond == "none" else f"{mcnemar_exact(b, c):.3g} ({b}/{c})", rules or "—"]) + " |")
            if best is None or k > best[0]:
                best = (k, cond, summ)
        assert best is not None
        left = ", ".join(f"`{e}` {c}" for e, c in best[2]["error_taxonomy_final"].items()
                         if e != "correct") or "none"
        out.append(f"| {run.name} | errors left under {best[1]} | | | | | {left} |")
    return out


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1])))
