"""Render reports/fleet/README.md from the run records (never from a cached summary).

    python scripts/fleet_table.py reports/fleet
"""

from __future__ import annotations

import sys
from pathlib import Path

from nlq2sql.experiments import loadcheck
from nlq2sql.records.store import MANIFEST, RECORDS, read_json
from nlq2sql.run.session import fleet_summary
from nlq2sql.stages.pipeline import summarise_file
from nlq2sql.stages.report import pct
from nlq2sql.stages.rulesets import load_guardrails


def main(root: Path) -> None:
    run = root / "heldout-routed"
    manifest = read_json(run / MANIFEST)
    summary = summarise_file(run / RECORDS, load_guardrails(list(manifest["guardrails"])))
    fleet = fleet_summary(run, manifest, None)
    saved = read_json(run / "summary.json")
    print("# Two replicas behind one run\n")
    print(f"Commit {manifest.get('git_commit', '?')[:12]} (dirty: {manifest.get('git_dirty')}), model "
          f"{manifest['model']}, eval set {manifest['evalset']} ({manifest['n_items']} items), routing "
          f"{manifest.get('routing')}, concurrency {manifest['concurrency']}, local CPU vLLM replicas started by "
          "`nlq2sql serve --replicas 2` on one 2-core machine (both replicas share its cores, so this shows "
          "attribution and identity, not a speed-up).\n")
    print(f"Final accuracy {pct(summary.final_accuracy)}; throughput "
          f"{(saved.get('throughput') or {}).get('req_per_s') or 0:.2f} req/s.\n")
    print("| replica | answered | ok | errors | p50 / p95 latency (s) |")
    print("|---|---:|---:|---|---|")
    for r in fleet.replicas:
        lat = r.latency_s
        lat_s = f"{lat.p50:.2f} / {lat.p95:.2f}" if lat.p50 is not None and lat.p95 is not None else "n/a"
        errs = ", ".join(f"{k} {v}" for k, v in sorted(r.errors.items())) or "none"
        print(f"| {r.label} | {r.answered} | {r.ok} | {errs} | {lat_s} |")
    harness = saved.get("harness") or {}
    if harness:
        print(f"\nClient: {harness.get('cpu_share_of_core') or 0:.0%} of a core, event-loop lag p95 "
              f"{(harness.get('loop_lag_ms') or {}).get('p95') or 0:.1f} ms; saturated: {harness.get('saturated')}.")
    lc = root / "across-replicas"
    dirs = sorted(p.parent for p in lc.glob("replica*/*/records.jsonl"))
    if dirs:
        by_level: dict[str, list[Path]] = {}
        by_replica: dict[str, list[Path]] = {}
        for d in dirs:
            by_level.setdefault(d.name.split("-")[0], []).append(d)
            by_replica.setdefault(d.parent.name, []).append(d)
        print("\n## Every item to every replica\n")
        print("| compared | runs | items byte-identical | parsed intents differ |")
        print("|---|---:|---|---:|")
        for what, groups in (("across replicas at", by_level), ("across concurrency on", by_replica)):
            for key, ds in sorted(groups.items()):
                if len(ds) < 2:
                    continue
                res = loadcheck.compare_runs(ds)
                print(f"| {what} {key} | {len(ds)} | {res.identical_items} / {res.items} | "
                      f"{res.intent_divergent_items} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
