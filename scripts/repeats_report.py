"""Render reports/repeats/README.md from the records of ``eval --repeats`` and ``load-check --repeats``
(scripts/run_serving.sh, step ``repeats``): every figure recomputed from the runs' records.

    python scripts/repeats_report.py reports/repeats > reports/repeats/README.md

Per model: the eval's repeats (accuracy and latency per repeat, mean [95 % t-interval] across
repeats, item-level accuracy with its SE clustered by pair_id, byte-identity of the raw replies
across the repeats), then load-check's identity run to run at one concurrency (plain
nondeterminism) and across levels on the first repeat (batch effects), with each level's
throughput and latency across its repeats.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from nlq2sql.experiments.loadcheck import compare_runs, split_identity
from nlq2sql.records.store import MANIFEST, read_json
from nlq2sql.run.repeats import MeanCI, mean_ci, render_repeats, repeat_dirs, summarise_repeats


def _ci(d: MeanCI, fmt: str) -> str:
    if d.mean is None:
        return "n/a"
    ci = d.ci95
    return fmt.format(d.mean) + (f" [{fmt.format(ci[0])}, {fmt.format(ci[1])}]" if ci else "")


HEAD = ["| identity | runs | items byte-identical | intents differ | divergent ids |", "|---|---|---|---|---|"]


def _identity_row(what: str, r: dict[str, Any]) -> str:
    ids = ", ".join(r["divergent_ids"][:6]) + (" …" if len(r["divergent_ids"]) > 6 else "")
    return (f"| {what} | {r['runs']} | {r['identical_items']} / {r['items']} | {r['intent_divergent_items']} | "
            f"{ids or 'none'} |")


def _brief(res: dict[str, Any]) -> dict[str, Any]:
    return {"items": res["items"], "runs": len(res["runs"]), "identical_items": res["identical_items"],
            "intent_divergent_items": res["intent_divergent_items"],
            "divergent_ids": [d["id"] for d in res["divergent"]]}


def model_section(root: Path) -> list[str]:
    lines = [f"## {root.name}", ""]
    eval_dir, lc_dir = root / "eval", root / "loadcheck"
    reps = repeat_dirs(eval_dir)
    if reps:
        m = read_json(reps[0] / MANIFEST)
        lines += [f"Model {m.get('model')}, eval set {m.get('evalset')} (first {m.get('limit')} items), prompt "
                  f"{m.get('prompt')}, schema {(m.get('sampling') or {}).get('schema')}, max_tokens "
                  f"{(m.get('sampling') or {}).get('max_tokens')}, temperature "
                  f"{(m.get('sampling') or {}).get('temperature')}, concurrency {m.get('concurrency')}; "
                  f"structured-output backend {(m.get('structured_outputs') or {}).get('backend')}; canary "
                  f"{'passed' if (m.get('structured_canary') or {}).get('passed') else 'not passed'}; runs at commit "
                  f"{str(m.get('git_commit') or '?')[:12]} (dirty: {m.get('git_dirty')}).", "",
                  "### eval --repeats", ""]
        body = render_repeats(summarise_repeats(eval_dir)).splitlines()[2:]  # its own "## N repeats" heading dropped
        lines += body
        same = _brief(compare_runs(reps).to_json())
        lines += ["", "Raw replies across the eval's repeats (each repeat its own seeded order, so an item's "
                  "batch differs too):", "", *HEAD, _identity_row("across the eval's repeats", same), ""]
    runs = sorted(d for d in lc_dir.glob("c*-r*") if d.is_dir()) if lc_dir.is_dir() else []
    if runs:
        split = split_identity(runs).to_json()
        lines += ["### load-check --repeats", "", *HEAD]
        for level, r in (split.get("run_to_run") or {}).items():
            lines.append(_identity_row(f"run to run at {level}", r))
        if split.get("across_levels_first_repeat"):
            lines.append(_identity_row("across levels (first repeat)", split["across_levels_first_repeat"]))
        every = compare_runs(runs).to_json()
        lines.append(_identity_row("all runs", _brief(every)))
        by_level: dict[int, list[dict[str, Any]]] = {}
        for r in every["runs"]:
            by_level.setdefault(int(r["concurrency"]), []).append(r)
        lines += ["", "| concurrency | repeats | final accuracy (each) | req/s mean [95 % CI] | "
                  "e2e p95 s mean [95 % CI] |", "|---|---|---|---|---|"]
        for level, rs in sorted(by_level.items()):
            accs = ", ".join(f"{r['final_accuracy']['value']:.0%}" for r in rs)
            rps = mean_ci([r["req_per_s"] for r in rs])
            p95 = mean_ci([(r["latency_s"] or {}).get("p95") for r in rs])
            lines.append(f"| {level} | {len(rs)} | {accs} | {_ci(rps, '{:.3f}')} | {_ci(p95, '{:.1f}')} |")
        lines.append("")
    return lines


def main(root: Path) -> None:
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip() or "?"
    print("# Repeated runs: run-to-run identity and accuracy across repeats\n")
    print(f"Rendered by `scripts/repeats_report.py` at commit {head} from the records below (`scripts/run_serving.sh`, "
          "step `repeats`: one local CPU vLLM 0.32 per model, `--max-model-len 4096`, whitespace-free grammar, "
          "`eval --repeats 3` then `load-check --repeats 3 --concurrency 1,4` on the same items). CPU timings on a "
          "shared 2-core machine; they rank settings here and are not GPU figures.\n")
    for model in sorted(d for d in root.iterdir() if (d / "eval").is_dir() or (d / "loadcheck").is_dir()):
        print("\n".join(model_section(model)))
    print("Identity is measured on the raw reply bytes (and the parsed intents), never assumed. Run to run at one "
          "concurrency separates plain nondeterminism from batch effects (across levels). Accuracy across repeats: "
          "mean with a t-interval over the repeats; item-level accuracy: each item's fraction of repeats right, "
          "averaged, ± 1.96 · SE clustered by pair_id.")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "reports/repeats"))
