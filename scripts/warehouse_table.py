"""Render the warehouse × schema table from run records (reports/warehouses/README.md).

Every figure is recomputed from ``records.jsonl`` and carries its counts; the manifest
names the commit, model, semantic model and database hash.

    .venv/bin/python scripts/warehouse_table.py reports/warehouses > reports/warehouses/README.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nlq2sql.records.store import iter_records
from nlq2sql.stages.score import rate, spread


def pct(k: int, n: int) -> str:
    w = rate(k, n)
    if not n or w.ci95 is None:
        return "n/a"
    lo, hi = w.ci95
    return f"{100 * k / n:.1f} % [{100 * lo:.1f}–{100 * hi:.1f}] ({k}/{n})"


def row(run: Path) -> str:
    manifest = json.loads((run / "manifest.json").read_text())
    recs = list(iter_records(run / "records.jsonl"))
    n = len(recs)
    valid = sum(r["raw_intent"] is not None for r in recs)
    inconsistent = sum(r["status"] == "inconsistent" for r in recs)
    lat = spread([r["latency_s"] for r in recs if r.get("latency_s") is not None])
    toks = spread([r["completion_tokens"] for r in recs if r.get("completion_tokens") is not None])
    return " | ".join([
        manifest["semantic_model"], manifest["sampling"].get("schema", "flat"), str(n), pct(valid, n),
        f"{inconsistent}/{n}", pct(sum(r["correct_raw"] for r in recs), n),
        pct(sum(r["correct_final"] for r in recs), n), pct(sum(r["correct_exec"] for r in recs), n),
        f"{lat.p50:.1f} s / {lat.p95:.1f} s (n={lat.n})" if lat.n else "n/a",
        f"{toks.mean:.1f}" if toks.n else "n/a"])


def main(root: Path) -> str:
    runs = sorted(p.parent for p in root.glob("*/manifest.json"))
    if not runs:
        raise SystemExit(f"no runs under {root}")
    first = json.loads((runs[0] / "manifest.json").read_text())
    lines = [
        "# One held-out eval per warehouse: flat vs branch intent schema",
        "",
        f"Model `{first['model']}` on a local CPU vLLM {first.get('server', {}).get('server_version', '?')}, "
        f"prompt `{first['prompt']}`, `ranking` guardrail, c={first['concurrency']}, "
        f"max_tokens {first['sampling']['max_tokens']}; commit `{str(first.get('git_commit'))[:12]}`"
        f"{' (dirty tree)' if first.get('git_dirty') else ''}. CPU timings, 2 cores. "
        "Rendered by `scripts/warehouse_table.py` from the records in each run folder.",
        "",
        "| warehouse | schema | n | schema-valid | inconsistent | raw accuracy | final accuracy "
        "| execution accuracy | latency p50 / p95 | completion tokens (mean) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + row(r) + " |" for r in runs]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(main(Path(sys.argv[1] if len(sys.argv) > 1 else "reports/warehouses")))
