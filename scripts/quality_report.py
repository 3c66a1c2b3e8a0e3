"""Render the quality report (Markdown + self-contained HTML) from every recorded condition run.

    .venv/bin/python scripts/quality_report.py [OUT] [RUN_DIR ...]

Default runs: every run under ``reports/conditions/*/``, ``reports/warehouses/``,
``reports/main-job/`` and ``reports/arms/`` (the answer arms: re-scored by
``nlq2sql.experiments.quality_arms``, in their own section); default
OUT: ``reports/quality``.  Every figure is re-derived from the runs' records
(``nlq2sql.experiments.quality``); tpch and flights are rebuilt from their recipes if missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nlq2sql.experiments.quality import render
from nlq2sql.experiments.quality_arms import arm_lines, collect_arms, is_arm_run

ROOT = Path(__file__).resolve().parent.parent


def default_runs() -> list[Path]:
    found = list((ROOT / "reports" / "conditions").glob("*/*/manifest.json"))
    found += (ROOT / "reports" / "warehouses").glob("*/manifest.json")
    found += (ROOT / "reports" / "main-job").glob("*/manifest.json")
    found += (ROOT / "reports" / "arms").glob("*/*/*/manifest.json")
    return sorted(p.parent.relative_to(ROOT) for p in found)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("reports/quality")
    runs = [Path(a) for a in sys.argv[2:]] or default_runs()
    arms = [d for d in runs if is_arm_run(d)]
    paths = render([d for d in runs if d not in arms], out, extra=arm_lines(collect_arms(arms)))
    print(f"{len(runs)} runs → {paths['markdown']}, {paths['html']}")
