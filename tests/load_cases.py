"""The load results snapshotted per case (``tests/snapshots/test_load_golden/``): every file a load
mode writes, rendered from committed runs with the code of the day.

No committed load result can be re-run from its inputs alone (a sweep's level directories are
not committed), so the cases are the modes' own functions on committed inputs:

* every committed run directory as one level (``stats_from_run``, the open loop's ``rate_level``,
  a grid ``cell``);
* level sets of committed runs (load-check, repeats, fleet, tune probes) driven through each
  mode's ``run_level`` (``--resume``: the level's ``level.json`` is read back, as a resumed run
  reads it) and ``analyse``, then written by the one output layer: ``STEM.json`` and ``STEM.md``
  as bytes (a sweep's re-analysis, mode ``reanalyse``, too); the open loop on the same runs with a
  synthetic arrival schedule;
* ``capacity`` on those runs with a fixture model config (with and without a server KV budget);
* ``load-check``'s comparison of the committed load-check runs, and the committed ``sweep.json``
  and ``tune.json`` re-rendered (and the sweep re-analysed) from the file alone.

Inputs are read as at ``COMMIT`` (``git cat-file``), so a report re-run later does not move the
snapshots; time, CPU count and plots are fixed.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from probe_cases import probe_cases
from summary_cases import ROOT, at_commit, text

from nlq2sql.experiments import loadcheck
from nlq2sql.load import capacity, tune
from nlq2sql.load import sweep as sw
from nlq2sql.load.analysis import Thresholds, analyse
from nlq2sql.load.contract import LevelStats
from nlq2sql.load.driver import LevelContext, LoadMode
from nlq2sql.load.grid import GridConfig, GridMode, LengthClass, cell
from nlq2sql.load.levels import LEVEL, stats_from_run
from nlq2sql.load.modes import run_mode
from nlq2sql.load.openloop import RateSweepConfig, RateSweepMode, rate_level
from nlq2sql.load.output import write_outputs
from nlq2sql.load.results import SweepResult
from nlq2sql.load.tune import TuneSettings, probe_from_records, tune_result
from nlq2sql.load.tune_results import TuneResult
from nlq2sql.records.item import iter_item_records
from nlq2sql.records.store import RECORDS, write_json_atomic
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.endpoint_facts import EndpointFacts

__all__ = ["COMMIT", "RUN_FILES", "SETS", "cases", "committed_run_dirs"]

#: The commit whose runs and results the cases read.
COMMIT = "2192d329ff4163e8083584098fa17fe326d7dca4"
RUN_FILES = ("manifest.json", "summary.json", "records.jsonl")
#: Level sets: committed runs that were measured together, each with its concurrency.
SETS = {
    "smollm2-loadcheck": "reports/smollm2-135m/load-check/c{}-r0",
    "qwen-loadcheck": "reports/qwen2.5-coder-0.5b/load-check/c{}-r0",
    "smollm2-repeats": "reports/repeats/smollm2-135m/loadcheck/c{}-r0",
    "qwen-repeats": "reports/repeats/qwen2.5-coder-0.5b/loadcheck/c{}-r0",
    "fleet-replica0": "reports/fleet/across-replicas/replica0/c{}-r0",
    "smollm2-tune": "reports/tune/smollm2-135m-heldout/c1-c8-e2e-p95-60s/probes/c{}",
}
LEVELS = {"smollm2-loadcheck": (1, 16, 32), "qwen-loadcheck": (1, 16, 32), "smollm2-repeats": (1, 4),
          "qwen-repeats": (1, 4), "fleet-replica0": (1, 8), "smollm2-tune": (1, 3, 5, 8)}
RATES = (0.5, 1.0, 2.0, 4.0)
NOW = 1_800_000_000.0
#: A dense GQA model's config (SmolLM2-135M's shape) and a server KV budget.
DENSE = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576,
         "torch_dtype": "bfloat16"}
METRICS = ('# TYPE vllm:cache_config_info gauge\n'
           'vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="4096"} 1.0\n')


def committed_run_dirs(commit: str) -> list[str]:
    """Every run directory (manifest, summary and records) committed at ``commit``, relative to the repository."""
    import subprocess

    files = set(subprocess.run(["git", "ls-tree", "-r", "--name-only", commit], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.split("\n"))
    dirs = {f.rsplit("/", 1)[0] for f in files if f.endswith("/records.jsonl")}
    return sorted(d for d in dirs if all(f"{d}/{f}" in files for f in RUN_FILES))


def as_dict(x: Any) -> Any:
    """A level's stats or a result as the JSON it is written as (a dict, or a typed object)."""
    if isinstance(x, dict):
        return x
    if hasattr(x, "to_json"):
        return x.to_json()
    return msgspec.to_builtins(x)


def _copy_run(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for f in RUN_FILES:
        shutil.copyfile(src / f, dest / f)


def _open_loop(run: Path, rate: float) -> None:
    """Make a committed closed-loop run look open-loop: the manifest's offered rate, and each
    record's arrival (a seeded-looking schedule before it started) and wait for a slot."""
    m = json.loads((run / "manifest.json").read_text())
    m["load"] = {**(m.get("load") or {}), "rate": rate, "duration_s": None}
    (run / "manifest.json").write_text(json.dumps(m))
    lines = []
    for i, line in enumerate((run / "records.jsonl").read_text().splitlines()):
        r = json.loads(line)
        if r.get("started") and r.get("latency_s") is not None:
            q = 0.05 * (i % 4) * (1 + i / 10)
            r.update(scheduled=r["started"] - q, queued_s=q, latency_from_arrival_s=r["latency_s"] + q)
        lines.append(json.dumps(r, separators=(",", ":")))
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")


def _level_json(run: Path, i: int) -> None:
    """``level.json`` as a live level writes it (the machine's load measured around the run)."""
    st = as_dict(stats_from_run(run))
    st["machine"] = {"loadavg_1m_start": 1.25 + i, "loadavg_1m_end": 2 + i, "cpus": 2}
    write_json_atomic(run / LEVEL, st)


def _drive(mode: LoadMode[Any, Any], ctx: LevelContext[Any], levels: list[Any], plot: str) -> tuple[str, str]:
    """The driver's level loop and output on levels already measured (``--resume`` reads them back)."""
    done = [mode.run_level(ctx, lv) for lv in levels]
    result = mode.analyse(ctx, done)
    stub = (mode.plot[0], lambda _r, _o: ({"throughput": plot} if mode.plot[0] == "plots" else plot)) \
        if mode.plot else None
    write_outputs(ctx.out, mode.stem, result, mode.render, stub, elapsed_s=time.time() - ctx.started)
    return (ctx.out / f"{mode.stem}.json").read_text(), (ctx.out / f"{mode.stem}.md").read_text()


def _base(out: str) -> EvalConfig:
    return EvalConfig(evalset="heldout", out=Path(out), endpoint="http://127.0.0.1:9/v1", model="golden-model")


def _set_cases(name: str, runs: dict[int, Path]) -> Iterator[tuple[str, str]]:
    levels = sorted(runs)
    server = EndpointFacts.model_validate({"started_by_us": False, "endpoint": "http://127.0.0.1:9/v1"})
    # closed loop: plain, and with SLOs, p95 targets and a cost
    for tag, kw in (("plain", {}), ("slo", {"slo": ("e2e_p95<=20s", "ttft_p95<=5s"), "slo_p95": (5.0, 30.0, 1e9),
                                              "gpu_cost_per_hour": 2.5})):
        out = f"{name}-sweep-{tag}"
        for i, c in enumerate(levels):
            _copy_run(runs[c], Path(out) / "levels" / f"c{c}")
            _level_json(Path(out) / "levels" / f"c{c}", i)
        cfg = sw.SweepConfig(base=_base(out), levels=tuple(levels), requests=32, resume=True, **kw)
        ctx = LevelContext(settings=cfg, server_info=server, evalsets={"": Path("x.jsonl")},
                           notes=["2 warm-up request(s) at c=1 ran first and are not counted."], started=NOW)
        js, md = _drive(sw.SweepMode(), ctx, levels, "throughput_vs_p95.png")
        yield f"{name}:sweep-{tag}.json", js
        yield f"{name}:sweep-{tag}.md", md
        run_mode("reanalyse", cfg.but(slo_p95=(10.0,), gpu_cost_per_hour=1.0))
        yield f"{name}:sweep-{tag}-rerender.json", (Path(out) / "sweep.json").read_text()
        yield f"{name}:sweep-{tag}-rerender.md", (Path(out) / "sweep.md").read_text()
    # open loop: the same runs as offered rates
    rates = RATES[:len(levels)]
    for tag, kw in (("plain", {}), ("slo", {"slo": ("e2e_p95<=20s",), "slo_p95": (5.0, 60.0), "gpu_cost_per_hour": 3.6,
                                              "growth": 1.2})):
        out = f"{name}-rate-{tag}"
        for i, (c, r) in enumerate(zip(levels, rates, strict=False)):
            d = Path(out) / "levels" / f"r{r:g}"
            _copy_run(runs[c], d)
            _open_loop(d, r)
            _level_json(d, i)
        rcfg = RateSweepConfig(base=_base(out), rates=rates, requests=32, resume=True, **kw)
        ctx = LevelContext(settings=rcfg, server_info=server, evalsets={"": Path("x.jsonl")}, started=NOW)
        js, md = _drive(RateSweepMode(), ctx, list(rates), "rate_vs_latency.png")
        yield f"{name}:rate-sweep-{tag}.json", js
        yield f"{name}:rate-sweep-{tag}.md", md
    # grid: a structured class and a fixed-output class at every level (the same runs)
    classes = (LengthClass("short", 0, 0), LengthClass("fixed", 0, 48))
    out = f"{name}-grid"
    for k in classes:
        for i, c in enumerate(levels):
            d = Path(out) / "cells" / f"{k.name}-c{c}"
            _copy_run(runs[c], d)
            _level_json(d, i)
    gcfg = GridConfig(base=_base(out), levels=tuple(levels), classes=classes, requests=16, resume=True)
    facts = EndpointFacts.model_validate({"started_by_us": True, "max_num_seqs": 8})
    ctx = LevelContext(settings=gcfg, server_info=facts, evalsets={"": Path("x")},
                       started=NOW)
    js, md = _drive(GridMode(), ctx, [(k, c) for k in classes for c in levels], "grid.png")
    yield f"{name}:grid.json", js
    yield f"{name}:grid.md", md
    # capacity on the runs, with and without the server's KV budget
    dirs = [Path(f"{name}-sweep-plain") / "levels" / f"c{c}" for c in levels]
    for tag, kw in (("no-budget", {}), ("budget", {"metrics_text": METRICS, "concurrency": 8}),
                    ("context", {"metrics_text": METRICS, "context": 900, "margin": 0.5})):
        res = capacity.analyse(DENSE, dirs, **kw)  # type: ignore[arg-type]
        out = Path(f"{name}-capacity-{tag}")
        write_outputs(out, "capacity", res, capacity.render_markdown)
        yield f"{name}:capacity-{tag}.json", (out / "capacity.json").read_text()
        yield f"{name}:capacity-{tag}.md", (out / "capacity.md").read_text()


#: Committed load-check results, re-rendered from the file (across replicas, repeats, levels).
LOADCHECKS = ("reports/fleet/across-replicas/loadcheck.json", "reports/smollm2-135m/load-check/loadcheck.json",
              "reports/repeats/smollm2-135m/loadcheck/loadcheck.json",
              "reports/repeats/qwen2.5-coder-0.5b/loadcheck/loadcheck.json")


def _read_loadcheck(path: Path) -> Any:
    data = json.loads(path.read_text())
    return getattr(loadcheck, "LoadCheck", None) and loadcheck.LoadCheck.from_json(data) or data


def _loadcheck(name: str, runs: list[Path]) -> Iterator[tuple[str, str]]:
    """As ``load-check`` writes a local run: the comparison, the identity split, the server."""
    res = loadcheck.compare_runs(runs)
    split = loadcheck.split_identity(runs)
    res = res.with_split(split) if hasattr(res, "with_split") else res | split
    server = {"started_by_us": False, "batch_invariant": True, "structured_outputs": {"backend": "xgrammar"}}
    if isinstance(res, dict):
        res["server"] = server
    else:  # the model, as the CLI sets it (its keys in the order given)
        res.server = EndpointFacts.model_validate(server)
    out = Path(name.replace(":", "-"))
    loadcheck.write_result(out, res)
    yield f"{name}:loadcheck.json", (out / "loadcheck.json").read_text()
    yield f"{name}:loadcheck.md", (out / "loadcheck.md").read_text()


def _tune(run: Path, written: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """A committed tune re-derived from its probes' runs (in the order run): as configured, and stricter."""
    cfg = written["config"]
    for tag, over in (("as-run", {}), ("strict", {"min_accuracy": 0.95, "alpha": 0.5})):
        out = Path(f"{run.name}-{run.parent.name}-{tag}")
        kw = {k: cfg[k] for k in ("by", "min_accuracy", "alpha", "lo", "hi", "probes", "requests", "order_seed",
                                  "warmup")} | over
        s = TuneSettings(base=_base(str(out)), slo=tuple(cfg["slo"]), **kw)
        done = []
        for row in sorted(written["probes"], key=lambda r: r["order"]):
            d = run / row["run_dir"]
            wall = as_dict(stats_from_run(d))["wall_s"]
            recs = list(iter_item_records(d / RECORDS))
            done.append(probe_from_records(row["load"], Path(row["run_dir"]), recs, wall, s.slo, s.by == "rate"))
        server = {"started_by_us": True, "endpoint": "local", "max_num_seqs": 4}
        result = tune_result(s, done, EndpointFacts.model_validate(server), ["a note"])
        write_outputs(out, "tune", result, tune.render_markdown, ("plot", lambda _r, _o: "tune.png"))
        yield f"{run}:tune-{tag}.json", (out / "tune.json").read_text()
        yield f"{run}:tune-{tag}.md", (out / "tune.md").read_text()


def cases(tmp: Path, commit: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """(name, text written) for every case; inputs as they were at ``commit``."""
    dirs = committed_run_dirs(commit)
    wanted = {d.format(c) for n, d in SETS.items() for c in LEVELS[n]}
    extra = ["reports/sweep-cpu-smollm2/sweep.json", *(f"reports/tune/{d}/tune.json" for d in (
        "smollm2-135m-heldout/c1-c8-e2e-p95-60s", "smollm2-135m-heldout/c1-c8-e2e-p95-30s",
        "smollm2-135m-heldout/c1-c4-e2e-p95-45s", "qwen2.5-coder-0.5b-heldout/c1-c8-e2e-p95-60s",
        "qwen2.5-coder-0.5b-heldout/c1-e2e-p95-30s", "qwen2.5-coder-0.5b-heldout/c1-c4-e2e-p95-45s")),
             *LOADCHECKS]
    files = at_commit(commit, [f"{d}/{f}" for d in sorted(set(dirs) | wanted) for f in RUN_FILES] + extra, tmp)
    work = tmp / "at"
    monkeypatch.chdir(work)  # every path written into a result is relative
    monkeypatch.setattr(time, "time", lambda: NOW)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(sw, "plot", lambda _r, _o: {"throughput": "throughput_vs_p95.png"})
    for d in dirs:
        run = Path(d)
        st = as_dict(stats_from_run(run))
        yield f"{d}:level", text(st)
        yield f"{d}:rate-level", text(as_dict(rate_level(run)))
        yield f"{d}:cell", text(as_dict(cell(stats_from_run(run), LengthClass("fixed", 0, 48))))
    for name, pattern in SETS.items():
        yield from _set_cases(name, {c: Path(pattern.format(c)) for c in LEVELS[name]})
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b"):
        runs = [Path(f"reports/{name}/load-check/c{c}-r0") for c in (1, 16, 32)]
        res = loadcheck.compare_runs(runs)
        yield f"{name}:loadcheck.json", text(as_dict(res))
        yield f"{name}:loadcheck.md", loadcheck.render_markdown(res)
        runs = [Path(f"reports/repeats/{name}/loadcheck/c{c}-r{r}") for c in (1, 4) for r in range(3)]
        yield from _loadcheck(f"{name}:repeats", runs)
    for rel in LOADCHECKS:
        yield f"{rel}:md", loadcheck.render_markdown(_read_loadcheck(files[rel]))
    sweep = json.loads(files["reports/sweep-cpu-smollm2/sweep.json"].read_text())
    yield "sweep-cpu-smollm2:sweep.md", sw.render_markdown(SweepResult.from_json(sweep))
    th = Thresholds(**sweep["analysis"]["thresholds"])
    levels = [LevelStats.from_json(s) for s in sweep["levels"]]
    yield "sweep-cpu-smollm2:analysis", text(as_dict(analyse(levels, th, tuple(sweep["config"]["slo_p95"]),
                                                             sweep["config"]["gpu_cost_per_hour"])))
    yield from probe_cases(monkeypatch)
    for rel in extra[1:]:
        if rel.endswith("tune.json"):
            yield f"{rel}:md", tune.render_markdown(TuneResult.from_json(json.loads(files[rel].read_text())))
            yield from _tune(Path(rel).parent, json.loads(files[rel].read_text()))
