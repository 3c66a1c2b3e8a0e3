"""The one entry of every load run: :func:`run_mode` runs a registered mode by name.

Importing this module registers the package's modes; a caller registers its own with
:func:`.driver.register`. :func:`sweep_mode` alone decides which mode ``nlq2sql sweep`` means and
refuses impossible combinations (options, then endpoints, then the output directory), so a
library caller gets the command's message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nlq2sql.errors import InputError
from nlq2sql.load import capacity, fleet, grid, openloop, probes, serialization, sweep, tune
from nlq2sql.load.driver import MODES, Mode, ModeSettings, Progress
from nlq2sql.load.sweep import SweepConfig

__all__ = ["BUILTIN", "mode", "registry", "run_mode", "sweep_mode"]

#: The package's own load modes (importing them registered them).
BUILTIN = (sweep.SweepMode, openloop.RateSweepMode, sweep.ServerSweepMode, fleet.FleetSweepMode,
           sweep.ReanalyseMode, grid.GridMode, serialization.SerializationMode, tune.TuneMode, probes.CancelMode,
           probes.HealthMode, probes.PrefixMode, capacity.CapacityMode)


def registry() -> dict[str, type[Mode[Any, Any]]]:
    """Every registered mode by name: the built-in ones and any a caller registered (a plugin, a test)."""
    return MODES


def mode(name: str) -> Mode[Any, Any]:
    """The registered mode ``name`` (an :class:`InputError` listing the known ones otherwise)."""
    if name not in MODES:
        raise InputError(f"unknown load mode {name!r} (known: {', '.join(sorted(MODES))})", field="mode")
    return MODES[name]()


def run_mode(name: str, settings: ModeSettings | Mapping[str, Any] | None = None,
             progress: Progress | None = None) -> Any:
    """Run the registered mode ``name`` with ``settings`` (its settings model, or the values to
    build it from: a bad one is an :class:`InputError` naming its option); ``progress`` hears each
    step.  Returns the mode's typed result as written (``STEM.json``; ``mode(name).render`` gives
    its ``STEM.md``)."""
    m = mode(name)
    model = m.settings_model
    if not isinstance(settings, model):
        if isinstance(settings, ModeSettings):
            raise TypeError(f"load mode {name!r} takes {model.__name__}, not {type(settings).__name__}")
        settings = model(**(settings or {}))
    return m.run(settings, progress)


def sweep_mode(cfg: SweepConfig, *, rates: tuple[float, ...] | None = None, server_sweep: str | None = None,
               reanalyse: bool = False) -> tuple[str, ModeSettings]:
    """Which mode ``nlq2sql sweep`` runs, and its settings: ``rates`` (open loop: the offered rates;
    ``cfg``'s largest level caps requests in flight), ``server_sweep`` (``max-num-seqs=1,4,16``: a
    local server only), ``reanalyse`` (the sweep already in ``cfg.base.out``), several endpoints
    (a fleet), or else the closed-loop sweep.  Refuses a combination that cannot run, naming the
    option, before anything is touched."""
    if cfg.base.replicas and (rates is not None or server_sweep or reanalyse):
        raise InputError("several endpoints: a closed-loop sweep only (no --rate, --server-sweep, --reanalyse)",
                         field="--endpoint")
    if rates is not None and (server_sweep or reanalyse):
        raise InputError("not with --rate", field="--server-sweep" if server_sweep else "--reanalyse")
    if server_sweep and reanalyse:
        raise InputError("not with --server-sweep", field="--reanalyse")
    if cfg.resume and (server_sweep or reanalyse or cfg.base.replicas):
        what = "--server-sweep" if server_sweep else "--reanalyse" if reanalyse else "--endpoint"
        raise InputError("--resume continues a closed-loop or --rate sweep only", field=what)
    if reanalyse and not (cfg.base.out / "sweep.json").is_file():
        raise InputError(f"no sweep.json in {cfg.base.out}", field="--out")
    if rates is not None:
        return "rate-sweep", openloop.RateSweepConfig(
            base=cfg.base, rates=rates, requests=cfg.requests, max_in_flight=max(cfg.levels),
            duration_s=cfg.duration_s, slo_p95=cfg.slo_p95, gpu_cost_per_hour=cfg.gpu_cost_per_hour,
            warmup=cfg.warmup, force=cfg.force, resume=cfg.resume, slo=cfg.slo)
    if reanalyse:
        return "reanalyse", cfg
    if server_sweep:
        knob, values = sweep.parse_server_sweep(server_sweep)
        return "server-sweep", sweep.ServerSweepSettings(sweep=cfg, knob=knob, values=values)
    return ("fleet-sweep" if cfg.base.replicas else "sweep"), cfg
