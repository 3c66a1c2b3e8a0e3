"""Concurrency sweep: throughput, goodput and tail latency per level; knee, saturation, SLO, cost.

Each level is an ordinary eval run (see :mod:`nlq2sql.load.levels`) with the eval set's
real prompts and the structured-output contract, so the workload is ours, not random
tokens.  The analysis is pure arithmetic on the measured levels and is unit-tested on
synthetic numbers, including seed 002's tables:

* scaling efficiency ``thr(N) / (N · thr(1))`` (baseline: the lowest level swept);
* marginal gain per added request ``Δthr / (Δc · thr(1))`` — 1.0 means each added
  request bought a whole single-request lane;
* the **knee**: the first level where efficiency or marginal gain falls below its stated
  threshold (the level before it is the last efficient one);
* the **saturation** point: the first level after which throughput is flat (gain below
  ``flat_pct``) while p95 climbs (by more than ``p95_rise_pct``);
* the SLO policy: for each p95 target, the level with the highest throughput meeting it;
* cost per 1,000 queries: ``hourly cost / (req/s · 3600) · 1000``.

This module runs the levels and writes the result; the arithmetic is :mod:`.analysis` and
the tables and plots :mod:`.render`, each usable on a result read back from ``sweep.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nlq2sql.errors import InputError, RecordError
from nlq2sql.inputs import MAX_REQUESTS, at_most
from nlq2sql.load.analysis import Thresholds, analyse
from nlq2sql.load.output import write_outputs
from nlq2sql.load.render import fmt_num, plot, render_markdown
from nlq2sql.load.results import SweepResult, as_model, load_result
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import bound_endpoint

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SweepConfig:
    base: EvalConfig
    levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    requests: int = 64
    slo_p95: tuple[float, ...] = ()
    gpu_cost_per_hour: float | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    warmup: int = 2
    force: bool = False
    duration_s: float | None = None  # per level: stop sending after this long (requests = the cap)
    resume: bool = False  # keep the levels a same-settings sweep in ``out`` finished; rerun the rest


# -- running ----------------------------------------------------------------------------

def prepare_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory", field="--out")
    if out.exists() and any(out.iterdir()) and not force:
        raise InputError(f"{out} exists and is not empty; pass --force to replace it", field="--out")
    if out.exists() and force:
        shutil.rmtree(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {out}: {exc.strerror}", field="--out") from None


@contextlib.contextmanager
def fresh_out(out: Path, force: bool) -> Iterator[None]:
    """:func:`prepare_out`; when the block then fails, ``out`` is left as it was found before
    anything was measured: absent, or (an existing directory) empty."""
    existed = out.is_dir()
    prepare_out(out, force)
    try:
        yield
    except BaseException:
        if not existed:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for p in out.iterdir():
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink()
        raise


def check_resume(resume: bool, force: bool) -> None:
    """``--resume`` keeps what ``--force`` would replace: every multi-level mode's ``validate``
    refuses the pair before a local server is started, and :func:`begin_level_sets` again."""
    if resume and force:
        raise InputError("--resume keeps the finished levels and --force replaces them: pass one of them",
                         field="--force")


def validate(cfg: SweepConfig) -> None:
    check_resume(cfg.resume, cfg.force)
    if not cfg.levels or any(c < 1 for c in cfg.levels):
        raise InputError("every level must be at least 1", field="--concurrency")
    if cfg.requests < 1:
        raise InputError(f"must be at least 1, got {cfg.requests}", field="--requests")
    if cfg.warmup < 0:
        raise InputError(f"must be at least 0, got {cfg.warmup}", field="--warmup")
    at_most(cfg.requests, MAX_REQUESTS, "--requests")
    at_most(cfg.warmup, MAX_REQUESTS, "--warmup")
    if cfg.duration_s is not None and not (cfg.duration_s > 0 and math.isfinite(cfg.duration_s)):
        raise InputError(f"must be positive and finite, got {cfg.duration_s}", field="--duration")
    if any(not (t > 0 and math.isfinite(t)) for t in cfg.slo_p95):
        raise InputError("p95 targets must be positive, finite seconds", field="--slo-p95")
    if cfg.gpu_cost_per_hour is not None and cfg.gpu_cost_per_hour < 0:
        raise InputError("must not be negative", field="--gpu-cost-per-hour")
    th = cfg.thresholds
    for name, v in (("--efficiency-threshold", th.efficiency), ("--marginal-threshold", th.marginal),
                    ("--flat-pct", th.flat_pct), ("--flat-pct", th.p95_rise_pct)):
        if not 0 <= v <= 1:  # also refuses NaN
            raise InputError(f"must be between 0 and 1, got {v}", field=name)


#: A multi-level run's settings, written first, so that ``--resume`` can tell its own levels.
JOB = "job.json"


def job_settings(job: Any) -> dict[str, Any]:
    """What a multi-level run measures, as JSON: its mode's settings and the eval config, less
    where it writes and how it was asked to start (``out``, ``force``, ``resume``) and the
    endpoint URL (a local server gets a fresh port each session; the model name stays)."""
    d = dataclasses.asdict(job)
    base = d.get("base") or {}
    for key in ("force", "resume"):
        d.pop(key, None)
        base.pop(key, None)
    base.pop("out", None)
    base.pop("endpoint", None)
    return json.loads(json.dumps(d, sort_keys=True, default=str))  # type: ignore[no-any-return]


def _differing(a: Any, b: Any, at: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [x for k in sorted(set(a) | set(b)) for x in _differing(a.get(k), b.get(k), f"{at}.{k}" if at else k)]
    return [] if a == b else [at or "(all)"]


def _resumable(out: Path, who: str, settings: dict[str, Any]) -> list[Path]:
    """The finished levels of the same job in ``out`` (refusing another job's directory)."""
    from nlq2sql.load.levels import LEVEL
    from nlq2sql.records.store import read_json

    try:
        got = read_json(out / JOB)
    except RecordError:  # absent or unreadable: not a resumable run
        raise InputError(f"{out} holds no readable {JOB}: not a multi-level run this version can resume; "
                         "rerun without --resume (with --force to replace it)", field="--resume") from None
    if got.get("who") != who or got.get("settings") != settings:
        diff = [f"mode {got.get('who')!r}"] if got.get("who") != who else \
            _differing(got.get("settings"), settings)
        raise InputError(f"{out} holds a run with other settings (differs in: {', '.join(diff[:6])}); rerun "
                         "without --resume (with --force to replace it)", field="--resume")
    return sorted(p.parent for p in out.rglob(LEVEL))


def begin_levels(base: EvalConfig, requests: int, warmup: int, force: bool, who: str, *, job: Any = None,
                 resume: bool = False) -> tuple[Path, list[str]]:
    """Common start of every multi-level load run: bound endpoint, fresh out dir, the expanded
    eval set and the uncounted warm-up; returns the eval set path and the notes so far.

    The options, key and endpoint are checked before the output directory is touched, and a
    failure before the first level (a bad eval set or prompt, the warm-up failing) leaves it
    as it was found: a command that measured nothing leaves nothing behind.  With ``resume``
    (``job``: the mode's config) a directory holding the same job is kept as it is: the levels
    it finished are kept by :func:`.levels.run_level`, the others run again from the start."""
    paths, notes = begin_level_sets(base, {"": requests}, warmup, force, who, job=job, resume=resume)
    return paths[""], notes


def begin_level_sets(base: EvalConfig, sets: dict[str, int], warmup: int, force: bool, who: str, *,
                     job: Any = None, resume: bool = False) -> tuple[dict[str, Path], list[str]]:
    """:func:`begin_levels` for a mode whose levels use different request counts (the
    serialization probe: few at c=1, more at c=K): one expanded eval set per name, written
    under ``out/<name>`` (the name "" writes it in ``out`` itself)."""
    from nlq2sql.load.levels import expand_evalset, run_level
    from nlq2sql.records.store import write_json_atomic
    from nlq2sql.run.config import preflight

    if base.endpoint is None:
        raise InputError(f"{who} needs a bound endpoint (use bound_endpoint)", field="--endpoint")
    check_resume(resume, force)
    preflight(base)
    notes = []
    settings = job_settings(job) if job is not None else None
    kept: list[Path] = []
    if resume and base.out.is_dir() and any(base.out.iterdir()):
        kept = _resumable(base.out, who, settings or {})
        start: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    else:
        start = fresh_out(base.out, force)
    with start:
        if settings is not None:
            write_json_atomic(base.out / JOB, {"who": who, "settings": settings})
        paths = {name: expand_evalset(base.evalset, n, base.out / name if name else base.out, base.semantic_model)
                 for name, n in sets.items()}
        if warmup:
            wpath = expand_evalset(base.evalset, warmup, base.out / "warmup", base.semantic_model)
            run_level(base, wpath, 1, base.out / "warmup" / "run")
            notes.append(f"{warmup} warm-up request(s) at c=1 ran first and are not counted.")
    kept = [p for p in kept if p.parent.name != "warmup"]
    if kept:
        notes.append(f"Resumed: {len(kept)} level(s) measured in an earlier session were kept as they were "
                     f"({', '.join(str(p.relative_to(base.out)) for p in kept)}); the others ran in this one.")
    return paths, notes


def run_sweep(cfg: SweepConfig, server_info: dict[str, Any] | None = None,
              progress: Progress | None = None) -> dict[str, Any]:
    """Run every level against ``cfg.base.endpoint`` (must be set); write and return the result."""
    from nlq2sql.load.levels import run_level

    validate(cfg)
    out = cfg.base.out
    levels_sorted = tuple(sorted(set(cfg.levels)))
    evalset_path, notes = begin_levels(cfg.base, cfg.requests, cfg.warmup, cfg.force, "run_sweep", job=cfg,
                                       resume=cfg.resume)
    stats = []
    t0 = time.time()
    level_base = replace(cfg.base, load=replace(cfg.base.load, duration_s=cfg.duration_s))
    for c in levels_sorted:
        st = run_level(level_base, evalset_path, c, out / "levels" / f"c{c}", reuse=cfg.resume)
        stats.append(st)
        if progress:
            progress(f"c={c}: {st['ok']}/{st['n']} ok, {fmt_num(st.get('req_per_s'))} req/s, "
                     f"p95 {fmt_num((st['latency_s'] or {}).get('p95'))} s")
    for st in stats:
        if st.get("not_sent"):
            notes.append(f"c={st['concurrency']}: the {cfg.duration_s:g} s duration ended the level; "
                         f"{st['n']} requests sent, {st['not_sent']} of the {cfg.requests}-request cap not sent.")
    for c in levels_sorted:
        if cfg.duration_s is None and cfg.requests < 4 * c:
            notes.append(f"c={c}: {cfg.requests} requests = {cfg.requests / c:.1f}× the concurrency, so "
                         "ramp-up and drain are a large part of the level (≥ 4× recommended).")
    loads = [v for s in stats for k, v in (s.get("machine") or {}).items() if k.startswith("loadavg")]
    if loads:
        notes.append(f"Machine load average (1 min) ranged {min(loads):.1f}–{max(loads):.1f} on "
                     f"{os.cpu_count()} CPUs at level starts and ends (it includes the harness and a local "
                     "server; more means other processes competed for the CPU).")
    errs = sum(sum(s["errors"].values()) for s in stats)
    if errs:
        notes.append(f"{errs} request(s) failed across levels; see the errors column.")
    if not stats[0]["server"]["observed"]:
        notes.append("The endpoint exposes no readable /metrics: server running/waiting, KV usage and "
                     "prefix hits are not observed (not zero).")
    result = assemble(cfg, stats, server_info or {"endpoint": cfg.base.endpoint}, notes)
    result["elapsed_s"] = time.time() - t0
    return write_result(out, result)


def assemble(cfg: SweepConfig, stats: list[dict[str, Any]], server_info: dict[str, Any],
             notes: list[str]) -> dict[str, Any]:
    base = cfg.base
    local = bool(server_info.get("started_by_us"))
    return {
        "kind": "sweep", "created": time.time(),
        "model": base.model, "evalset": base.evalset,
        "endpoint_label": ("local vLLM started for the sweep" + (
            f" (max-num-seqs {server_info.get('max_num_seqs')})" if server_info.get("max_num_seqs") else "")
                           if local else str(server_info.get("endpoint"))),
        "cpu_label": ("CPU-only vLLM on this machine: these timings rank configurations here; "
                      "they are not GPU numbers.") if local else None,
        "server": server_info,
        "config": {"levels": sorted(set(cfg.levels)), "requests": cfg.requests,
                   "slo_p95": list(cfg.slo_p95), "gpu_cost_per_hour": cfg.gpu_cost_per_hour,
                   "max_tokens": base.sampling.max_tokens, "structured": base.sampling.structured,
                   "prompt": base.prompt, "warmup": cfg.warmup, "duration_s": cfg.duration_s},
        "levels": stats,
        "analysis": analyse(stats, cfg.thresholds, cfg.slo_p95, cfg.gpu_cost_per_hour),
        "notes": notes,
    }


def write_result(out: Path, result: dict[str, Any]) -> dict[str, Any]:
    return write_outputs(out, "sweep", result, render_markdown, ("plots", plot))


def rerender(out: Path, cfg: SweepConfig) -> dict[str, Any]:
    """Re-analyse a recorded sweep (new thresholds, SLOs or cost) without re-querying."""
    from nlq2sql.load.levels import load_level_dirs

    typed: SweepResult = load_result(out / "sweep.json", SweepResult)
    stats = load_level_dirs([Path(s.run_dir) for s in typed.levels])
    for s, o in zip(stats, sorted(typed.levels, key=lambda x: x.concurrency), strict=False):
        s["client"] = o.client.model_dump()  # measured live; a re-read run cannot measure it again
        if o.machine is not None:
            s["machine"] = o.machine.model_dump()
    old = typed.model_dump(mode="json", exclude={"levels", "analysis", "plots"})
    old["levels"] = stats
    old["config"].update({"slo_p95": list(cfg.slo_p95), "gpu_cost_per_hour": cfg.gpu_cost_per_hour})
    old["analysis"] = analyse(stats, cfg.thresholds, cfg.slo_p95, cfg.gpu_cost_per_hour)
    return write_result(out, old)


# -- server sweep -----------------------------------------------------------------------

SERVER_KNOBS = {"max-num-seqs": "max_num_seqs"}


def parse_server_sweep(text: str) -> tuple[str, tuple[int, ...]]:
    """``max-num-seqs=1,4,16`` → ("max_num_seqs", (1, 4, 16))."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or key not in SERVER_KNOBS:
        raise InputError(f"expected NAME=V1,V2,… with NAME one of {', '.join(SERVER_KNOBS)}; got {text!r}",
                         field="--server-sweep")
    try:
        vals = tuple(int(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise InputError(f"values must be integers, got {values!r}", field="--server-sweep") from None
    if not vals or any(v < 1 for v in vals):
        raise InputError("every value must be at least 1", field="--server-sweep")
    return SERVER_KNOBS[key], vals


def run_server_sweep(cfg: SweepConfig, knob: str, values: tuple[int, ...],
                     progress: Progress | None = None) -> dict[str, Any]:
    """Restart a local server per setting and sweep each; a combined table compares them."""
    if cfg.base.endpoint is not None:
        raise InputError("--server-sweep restarts a local server; it cannot be used with --endpoint",
                         field="--server-sweep")
    validate(cfg)
    prepare_out(cfg.base.out, cfg.force)
    runs = []
    for v in values:
        sub = cfg.base.out / f"{knob.replace('_', '-')}-{v}"
        if progress:
            progress(f"starting a local server with {knob.replace('_', '-')}={v}")
        setting: dict[str, Any] = {knob: v}
        with bound_endpoint(replace(cfg.base, server=replace(cfg.base.server, **setting))) as (bound, info):
            res = run_sweep(replace(cfg, base=replace(bound, out=sub), force=True), info, progress)
        runs.append({"value": v, "dir": str(sub), "result": res})
    combined = {"kind": "server-sweep", "knob": knob, "values": list(values),
                "settings": [summarise_setting(r) for r in runs]}
    return write_outputs(cfg.base.out, "server-sweep", combined, lambda c: render_server_sweep(c, runs))


def summarise_setting(run: dict[str, Any]) -> dict[str, Any]:
    res = as_model(SweepResult, run["result"])
    lv = [s for s in res.levels if s.req_per_s]
    peak = max(lv, key=lambda s: s.req_per_s or 0.0) if lv else None
    return {"value": run["value"], "dir": run["dir"],
            "peak_req_per_s": peak.req_per_s if peak else None,
            "peak_at": peak.concurrency if peak else None,
            "p95_at_peak": peak.latency_s.p95 if peak else None,
            "n_at_peak": peak.n if peak else None,
            "knee": res.analysis.knee.level,
            "saturation": res.analysis.saturation.level,
            "running_peak": max((s.server.running.peak or 0 for s in res.levels), default=None),
            "waiting_peak": max((s.server.waiting.peak or 0 for s in res.levels), default=None),
            "levels": [(s.concurrency, s.req_per_s, s.latency_s.p95) for s in res.levels]}


def render_server_sweep(combined: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    knob = combined["knob"].replace("_", "-")
    md = [f"# Server sweep over {knob}", "",
          "Each setting restarted the local CPU vLLM and ran the full concurrency sweep "
          "(its own sweep.md in the sub-directory).", "",
          f"| {knob} | peak req/s (at c, n) | p95 at peak | knee | saturation | server running peak | "
          "server waiting peak |", "|---:|---|---:|---:|---:|---:|---:|"]
    for s in combined["settings"]:
        md.append(f"| {s['value']} | {fmt_num(s['peak_req_per_s'])} (c={s['peak_at']}, n={s['n_at_peak']}) "
                  f"| {fmt_num(s['p95_at_peak'])} s | {s['knee'] or 'none'} | {s['saturation'] or 'none'} "
                  f"| {s['running_peak']} | {s['waiting_peak']} |")
    levels = sorted({c for s in combined["settings"] for c, _, _ in s["levels"]})
    md += ["", "req/s by concurrency:", "", "| " + knob + " | " + " | ".join(f"c={c}" for c in levels) + " |",
           "|---:|" + "---:|" * len(levels)]
    for s in combined["settings"]:
        by = {c: r for c, r, _ in s["levels"]}
        md.append(f"| {s['value']} | " + " | ".join(fmt_num(by.get(c)) for c in levels) + " |")
    md.append("\nCPU-only vLLM: these timings rank settings on this machine; they are not GPU numbers.")
    return "\n".join(md) + "\n"
