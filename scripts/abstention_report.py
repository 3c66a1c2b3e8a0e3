"""Issue 22's abstention figures: unanswerable precision and recall per warehouse, from records.

Reads the run directories ``scripts/run_abstention.sh`` wrote (``<out>/<model>/<warehouse>-<set>/``:
each warehouse's held-out set and its unanswerable set, run with ``--abstain-below``) and prints
Markdown: per model, each warehouse's two runs pooled (held-out items are all answerable, so the
false abstentions that precision needs come from there), then all warehouses pooled, at the run's
own cut-off, at the best precision reaching recall 0.6, and with explicit "unanswerable" answers
only.  Nothing is measured here: records only.
Usage: python scripts/abstention_report.py reports/abstention > reports/abstention/README.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nlq2sql.experiments.abstention import Decision, decisions, leave_one_out, render
from nlq2sql.records.item import iter_item_records


def main(root: Path) -> None:
    print("# Abstention: unanswerable precision and recall (issue 22)\n")
    print("Each warehouse's held-out run (answerable items) pooled with its unanswerable run, both with "
          "`--answer query --examples 8 --abstain-below P`. At a cut-off t an item is declined when the model "
          "answered `unanswerable` or its confidence (its share on answering at all × its share on the first "
          "metric, from vLLM's top-8 logprobs) is below t. Precision: declined items that were unanswerable; "
          "recall: unanswerable items declined; coverage: answerable items still answered; final accuracy: "
          "a right abstention counts right. Wilson 95 % CIs. Every cut-off is re-derived from the records, "
          "so the best cut-off is chosen on the same items it is reported on (optimistic); the row "
          "'cut-off chosen on the other warehouses' is the honest one: the threshold picked (best precision "
          "at recall ≥ 60 %) on the other warehouses pooled, applied to this one.\n")
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = sorted(d for d in model_dir.iterdir() if (d / "manifest.json").is_file())
        if not runs:
            continue
        groups: dict[str, list[Decision]] = {}
        thresholds, commits = set(), set()
        for d in runs:
            manifest = json.loads((d / "manifest.json").read_text())
            thresholds.add(manifest.get("abstain_below"))
            commits.add(str(manifest.get("git_commit") or "?")[:7] + ("+dirty" if manifest.get("git_dirty") else ""))
            items = decisions(iter_item_records(d / "records.jsonl"))
            groups.setdefault(str(manifest.get("semantic_model")), []).extend(items)
        transferred = leave_one_out(groups) if len(groups) > 1 else {}
        groups["all warehouses"] = [d for items in list(groups.values()) for d in items]
        t = next(iter(thresholds)) if len(thresholds) == 1 else None
        print(f"## {model_dir.name}\n")
        print(f"Runs: {', '.join(d.name for d in runs)} (commit {', '.join(sorted(commits))}; "
              f"run cut-off {t if t is not None else 'varies'}).\n")
        print("\n".join(render(groups, t, transferred)))
        print()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("reports/abstention"))
