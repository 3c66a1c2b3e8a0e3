"""Which load run ``nlq2sql sweep`` means, and the one place that decides it.

It is also the registry's front door: :func:`run_mode` runs any registered load mode by name.

One command covers five runs — a closed-loop concurrency sweep, an open-loop rate sweep
(``rates``), a server sweep restarting a local vLLM per setting, a fleet sweep (several
endpoints: the whole, then each replica) and the re-analysis of a recorded sweep.  Which
combinations make sense, and the order of checks (options, then endpoints, then the output
directory), live here rather than in the CLI, so a library caller asking for an impossible
combination gets the same message and exit code as the command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nlq2sql.errors import InputError
from nlq2sql.load import grid, openloop, serialization, sweep, tune
from nlq2sql.load.contract import _M
from nlq2sql.load.driver import MODES, LoadMode, Progress, drive
from nlq2sql.load.sweep import SweepConfig
from nlq2sql.run.endpoint_facts import EndpointFacts

__all__ = ["BUILTIN", "SweepJob", "SweepOutcome", "registry", "run_job", "run_mode", "validate_job"]

#: The package's own load modes (importing them registers them with the driver).
BUILTIN = (sweep.SweepMode, openloop.RateSweepMode, grid.GridMode, serialization.SerializationMode, tune.TuneMode)


def registry() -> dict[str, type[LoadMode[Any, Any]]]:
    """Every registered mode by name: the built-in ones and any a caller registered (a plugin, a test)."""
    return MODES


def run_mode(name: str, progress: Progress | None = None, **values: Any) -> _M:
    """The library entry a command calls: the registered mode ``name``, its settings built (and
    checked: a bad value is an :class:`InputError` naming its option) from ``values``, driven; its
    result as written (the mode's typed result)."""
    if name not in MODES:
        raise InputError(f"unknown load mode {name!r} (known: {', '.join(sorted(MODES))})", field="mode")
    mode = MODES[name]()
    return drive(mode, mode.settings_model(**values), progress)


@dataclass(frozen=True)
class SweepJob:
    """A sweep and what kind of run it is (nothing set: a closed-loop sweep)."""

    sweep: SweepConfig
    rates: tuple[float, ...] | None = None  # open loop: offered rates; the largest level caps requests in flight
    server_sweep: str | None = None  # e.g. "max-num-seqs=1,4,16" (a local server only)
    reanalyse: bool = False  # re-analyse the sweep already in the output directory


@dataclass(frozen=True)
class SweepOutcome:
    markdown: str  # the report, as written beside the JSON
    wrote: str  # which files, for the user


def validate_job(job: SweepJob) -> None:
    """Refuse combinations that cannot run, naming the option, before anything is touched."""
    cfg = job.sweep
    if cfg.base.replicas and (job.rates is not None or job.server_sweep or job.reanalyse):
        raise InputError("several endpoints: a closed-loop sweep only (no --rate, --server-sweep, --reanalyse)",
                         field="--endpoint")
    if job.rates is not None and (job.server_sweep or job.reanalyse):
        raise InputError("not with --rate", field="--server-sweep" if job.server_sweep else "--reanalyse")
    if job.server_sweep and job.reanalyse:
        raise InputError("not with --server-sweep", field="--reanalyse")
    if cfg.resume and (job.server_sweep or job.reanalyse or cfg.base.replicas):
        what = "--server-sweep" if job.server_sweep else "--reanalyse" if job.reanalyse else "--endpoint"
        raise InputError("--resume continues a closed-loop or --rate sweep only", field=what)
    if job.reanalyse and not (cfg.base.out / "sweep.json").is_file():
        raise InputError(f"no sweep.json in {cfg.base.out}", field="--out")


def run_job(job: SweepJob, progress: Progress | None = None) -> SweepOutcome:
    """Validate, run the kind of sweep ``job`` names, and return its report."""
    from nlq2sql.load import sweep as sw

    validate_job(job)
    cfg, out = job.sweep, job.sweep.base.out
    if job.rates is not None:
        from nlq2sql.load import openloop

        rcfg = openloop.RateSweepConfig(base=cfg.base, rates=job.rates, requests=cfg.requests,
                                        max_in_flight=max(cfg.levels), duration_s=cfg.duration_s,
                                        slo_p95=cfg.slo_p95, gpu_cost_per_hour=cfg.gpu_cost_per_hour,
                                        warmup=cfg.warmup, force=cfg.force, resume=cfg.resume, slo=cfg.slo)
        rres = openloop.run_rate_sweep(rcfg, None, progress)
        return SweepOutcome(openloop.render_markdown(rres),
                            f"{out / 'rate-sweep.json'}, {out / 'rate-sweep.md'} and a plot")
    if job.reanalyse:
        res = sw.rerender(out, cfg)
    elif job.server_sweep:
        knob, values = sw.parse_server_sweep(job.server_sweep)
        sw.run_server_sweep(cfg, knob, values, progress)
        return SweepOutcome((out / "server-sweep.md").read_text(), f"{out / 'server-sweep.md'} and one sweep "
                            "per setting")
    elif cfg.base.replicas:
        from nlq2sql.load import fleet
        from nlq2sql.run.config import preflight

        preflight(cfg.base)  # every replica reachable and serving the model before anything is written
        facts = EndpointFacts.model_validate({"endpoint": "fleet", "started_by_us": False})
        fres = fleet.run_fleet_sweep(cfg, facts, progress)
        return SweepOutcome(fleet.render_markdown(fres),
                            f"{out / 'fleet-sweep.json'}, {out / 'fleet-sweep.md'} and one sweep per replica")
    else:
        res = sw.run_sweep(cfg, None, progress)
    return SweepOutcome(sw.render_markdown(res), f"{out / 'sweep.json'}, {out / 'sweep.md'} and plots")
