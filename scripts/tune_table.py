"""Rebuild a ``tune`` report from its probes' records (never from the cached tune.json figures).

    python scripts/tune_table.py RUN_DIR REPORT_DIR

Copies each probe's records, manifest and summary from RUN_DIR (a ``nlq2sql tune --out``
directory) into REPORT_DIR/probes/, recomputes every probe (correct goodput, CIs, McNemar
against the baseline, eligibility) from those records with the settings tune.json recorded,
and writes REPORT_DIR/tune.json, tune.md and tune.png with no absolute path of this machine.
Run with RUN_DIR = REPORT_DIR to re-render a committed report from its committed records.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from nlq2sql.load.contract import EndpointFacts
from nlq2sql.load.output import write_outputs
from nlq2sql.load.tune import Probe, TuneSettings, plot_curve, probe_from_records, render_markdown, tune_result
from nlq2sql.records.item import iter_item_records
from nlq2sql.records.store import MANIFEST, RECORDS, SUMMARY, read_json
from nlq2sql.run.config import EvalConfig
from nlq2sql.transport.client import Sampling


def main(run: Path, dest: Path) -> None:
    old = read_json(run / "tune.json")
    cfg = old["config"]
    base = EvalConfig(model=old["model"], evalset=old["evalset"], out=dest, prompt=cfg["prompt"],
                      sampling=Sampling(max_tokens=cfg["max_tokens"], structured=cfg["structured"]))
    s = TuneSettings(base=base, by=cfg["by"], slo=tuple(cfg["slo"]), min_accuracy=cfg["min_accuracy"],
                     alpha=cfg["alpha"], lo=cfg["lo"], hi=cfg["hi"], probes=cfg["probes"], requests=cfg["requests"],
                     order_seed=cfg["order_seed"], max_in_flight=cfg["max_in_flight"] or 32, warmup=cfg["warmup"])
    probes: list[Probe] = []
    dest.mkdir(parents=True, exist_ok=True)
    copy = run.resolve() != dest.resolve()
    expanded = sorted(run.glob("*-x*.jsonl"))
    if expanded and copy:
        shutil.copyfile(expanded[0], dest / expanded[0].name)  # the items, in the order every probe sent them
    for row in sorted(old["probes"], key=lambda r: r["order"]):
        rel = Path("probes") / Path(row["run_dir"]).name
        if copy:
            (dest / rel).mkdir(parents=True, exist_ok=True)
            for name in (RECORDS, MANIFEST, SUMMARY):  # this machine's paths dropped (the set's path: its name)
                text = (run / rel / name).read_text().replace(f"{run.resolve()}/", "")
                (dest / rel / name).write_text(text)
        wall = (read_json(dest / rel / SUMMARY).get("throughput") or {}).get("wall_s")
        probes.append(probe_from_records(row["load"], rel, list(iter_item_records(dest / rel / RECORDS)), wall, s.slo,
                                         s.by == "rate"))
    server = EndpointFacts.model_validate({k: v for k, v in old["server"].items()
                                           if k in ("started_by_us", "endpoint")})
    result = tune_result(s, probes, server, [n for n in old["notes"] if "Resumed" not in n and "raise" not in n
                                          and "Fewer than" not in n])
    result.created = old["created"]
    written = write_outputs(dest, "tune", result, render_markdown, ("plot", plot_curve), elapsed_s=old.get("elapsed_s"))
    print(json.dumps(written.operating_point.to_json() if written.operating_point else None))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
