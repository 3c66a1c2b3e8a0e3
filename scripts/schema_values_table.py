"""reports/schema-values/README.md from the run records: the query arm with known values pinned in
the schema, item by item against the committed arm without them (same options, same items).

    .venv/bin/python scripts/schema_values_table.py [reports/schema-values] > reports/schema-values/README.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nlq2sql.stages.score import mcnemar_exact

ROOT = Path(__file__).resolve().parent.parent
MODEL = "qwen2.5-coder-0.5b"


def _records(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines()) if r}


def _commit(run: Path) -> str:
    return str(json.loads((run / "manifest.json").read_text())["git_commit"])[:7]


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "reports" / "schema-values"
    lines = ["# Known values pinned in the v2 schema: does it change the answers?", "",
             f"{MODEL}, `--answer query --examples 8`, max_tokens 256, temperature 0, on the local CPU vLLM.",
             "*Unpinned*: the committed query arm (`reports/arms`); *pinned*: the same arm re-run with the",
             "schema's `where` values pinned to the data's values for small categorical fields and each",
             "operator's number of values counted (issue 21), at the commit the last column names.",
             "Gained/lost: items right in one run only; p: exact two-sided McNemar on those.", "",
             "| set | n | unpinned | pinned | gained | lost | p | raw answers differing | commits |",
             "|---|---|---|---|---|---|---|---|---|"]
    tot = [0, 0, 0, 0, 0, 0]
    for run in sorted(p for p in out.iterdir() if (p / "q-ex8" / "records.jsonl").exists()):
        name = run.name
        st = name.split("-", 1)[1]
        base = ROOT / "reports" / "arms" / MODEL / name / f"{st}-query"
        new, old = _records(run / "q-ex8" / "records.jsonl"), _records(base / "records.jsonl")
        assert new.keys() == old.keys(), name
        ok_old = sum(bool(r.get("correct_final")) for r in old.values())
        ok_new = sum(bool(r.get("correct_final")) for r in new.values())
        gained = sum(1 for k in new if new[k].get("correct_final") and not old[k].get("correct_final"))
        lost = sum(1 for k in new if old[k].get("correct_final") and not new[k].get("correct_final"))
        differ = sum(1 for k in new if new[k].get("raw_text") != old[k].get("raw_text"))
        p = mcnemar_exact(gained, lost)
        lines.append(f"| {name} | {len(new)} | {ok_old} | {ok_new} | {gained} | {lost} | {p:.2f} | {differ} | "
                     f"{_commit(base)} → {_commit(run / 'q-ex8')} |")
        for i, v in enumerate((len(new), ok_old, ok_new, gained, lost, differ)):
            tot[i] += v
    n, a, b, g, lo, d = tot
    p = mcnemar_exact(g, lo)
    lines.append(f"| **pooled** | {n} | {a} ({a / n:.1%}) | {b} ({b / n:.1%}) | {g} | {lo} | {p:.2f} | {d} | |")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
