"""Serving-path commands: sweep and probes (the ``nlq2sql.load`` package)."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args, get_origin

import typer
from rich.console import Console

from nlq2sql.cli._common import (
    CLI_WAREHOUSE,
    ENDPOINT_PANEL,
    LOAD_PANEL,
    OUTPUT_PANEL,
    DbOpt,
    EndpointOpt,
    EndpointsFileOpt,
    EndpointsOpt,
    EvalsetOpt,
    KeyOpt,
    MaxTokOpt,
    ModelOpt,
    PromptOpt,
    ResumeLevelsOpt,
    RoutingOpt,
    SchemaOpt,
    SemanticModelOpt,
    app,
    err,
    handled,
    parse_levels,
)
from nlq2sql.cli._serving import check_server_numbers
from nlq2sql.cli._spec import base_config, fleet_args, spec_options
from nlq2sql.errors import InputError
from nlq2sql.load import capacity as cap
from nlq2sql.load import grid as gr
from nlq2sql.load import modes
from nlq2sql.load import serialization as ser
from nlq2sql.load import sweep as sw
from nlq2sql.load.analysis import Thresholds
from nlq2sql.load.driver import ModeSettings
from nlq2sql.load.probes import ProbeMode
from nlq2sql.load.slo import parse_slo
from nlq2sql.records.store import output_dir
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.models import DEFAULT_MODEL
from nlq2sql.semantic.binding import open_warehouse
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.transport.client import STRUCTURED_MODES

__all__ = ["LocalSeqsOpt", "add_probe_commands", "capacity_cmd", "grid_cmd", "mode_options", "mode_params", "probe_app",
           "probe_serialization", "sweep_cmd"]

F = TypeVar("F", bound=Callable[..., Any])

probe_app = typer.Typer(help="Serving-path probes: serialization verdict, cancel, /health, prefix reuse.",
                        no_args_is_help=True)
app.add_typer(probe_app, name="probe")


def _floats(values: list[str] | None, option: str) -> tuple[float, ...]:
    out: list[float] = []
    for v in values or []:
        for x in v.split(","):
            if x.strip():
                try:
                    out.append(float(x))
                except ValueError:
                    raise InputError(f"expected a number, got {x!r}", field=option) from None
                if not math.isfinite(out[-1]):
                    raise InputError(f"must be a finite number, got {x.strip()!r}", field=option)
    return tuple(out)


def _load_base(evalset: str, endpoint: str | None, model: str, api_key_env: str | None, prompt: str,
               max_tokens: int, structured: str, out: Path, max_num_seqs: int | None,
               semantic: tuple[str, Path | None, str] = (CLI_WAREHOUSE, None, "flat")) -> EvalConfig:
    from dataclasses import replace


    if structured not in STRUCTURED_MODES:
        raise InputError(f"unknown mode {structured!r} (known: {', '.join(STRUCTURED_MODES)})",
                         field="--structured")
    if max_num_seqs is not None and endpoint is not None:
        raise InputError("only for a local server (no --endpoint)", field="--max-num-seqs")
    check_server_numbers(max_num_seqs)
    base = base_config(evalset, endpoint, model, api_key_env, prompt, None, max_tokens, out, semantic=semantic)
    return replace(base, sampling=replace(base.sampling, structured=structured),
                   server=replace(base.server, max_num_seqs=max_num_seqs))


def _say(msg: str) -> None:
    err.print(msg, markup=False, highlight=False)


def mode_params(model: type[ModeSettings], panel: str | None = None) -> list[inspect.Parameter]:
    """One keyword parameter per field of ``model`` declared with an option's help
    (:func:`nlq2sql.load.driver.option`): its flag, help, default and type (a tuple field is a
    repeatable option)."""
    out = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if "help" not in extra:
            continue
        opt = typer.Option(str(extra["option"]), help=str(extra["help"]), rich_help_panel=panel)
        kind: Any = info.annotation
        default = info.default
        if get_origin(kind) is tuple:  # tuple[X, ...]: the option repeated
            kind, default = list[get_args(kind)[0]] | None, None  # type: ignore[misc]
        out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                     annotation=Annotated[kind, opt]))
    return out


def _with_options(fn: Callable[..., Any], own: list[inspect.Parameter], model: type[ModeSettings],
                  panel: str | None) -> Callable[..., Any]:
    """``fn`` as a command taking ``own`` then ``model``'s generated options (:func:`mode_params`);
    ``fn`` receives the latter as ``values`` (field name → value, a repeated option as a tuple)."""
    extra = mode_params(model, panel)
    repeated = {p.name: model.model_fields[p.name].default for p in extra
                if get_origin(model.model_fields[p.name].annotation) is tuple}

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        values = {p.name: kwargs.pop(p.name) for p in extra}
        values |= {n: default if values[n] is None else tuple(values[n]) for n, default in repeated.items()}
        return fn(values=values, **kwargs)

    params = [*own, *extra]
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def mode_options(model: type[ModeSettings], panel: str | None = LOAD_PANEL) -> Callable[[F], F]:
    """Give a command the options of ``model``'s declared fields (after its own); it receives them as
    ``values`` (field name → value), which the settings model validates (a bad one names its option)."""
    def deco(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values() if p.name != "values"]
        return _with_options(fn, own, model, panel)  # type: ignore[return-value]
    return deco


LocalSeqsOpt = Annotated[int | None, typer.Option(help="Local server only: vLLM --max-num-seqs.",
                                                  rich_help_panel=ENDPOINT_PANEL)]


@app.command("sweep")
@handled
@spec_options(max_tokens=96)
def sweep_cmd(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointsOpt = None,
    api_key_env: KeyOpt = None,
    concurrency: Annotated[str, typer.Option(help="Comma-separated concurrency levels.",
                                             rich_help_panel=LOAD_PANEL)] = "1,2,4,8,16,32",
    requests: Annotated[int, typer.Option(help="Requests per level (eval items cycled, ids id#k); with "
                                          "--duration, the cap per level.", rich_help_panel=LOAD_PANEL)] = 64,
    duration: Annotated[float | None, typer.Option(help="Seconds per level: no request starts after this "
                                                   "(finished ones are kept; the rest are counted as not sent).",
                                                   rich_help_panel=LOAD_PANEL)] = None,
    rate: Annotated[str | None, typer.Option("--rate", "--request-rate",
                                             help="Open loop: comma-separated offered rates (req/s, Poisson "
                                             "arrivals) as the levels; --concurrency's largest value caps "
                                             "requests in flight.", rich_help_panel=LOAD_PANEL)] = None,
    arrival_seed: Annotated[int, typer.Option(help="Seed of the Poisson arrival schedule.",
                                              rich_help_panel=LOAD_PANEL)] = 0,
    slo_p95: Annotated[list[str] | None, typer.Option(help="p95 target in seconds (repeat or comma-separate) "
                                                      "for the SLO policy table.")] = None,
    slo: Annotated[list[str] | None, typer.Option(help="Per-request SLO of correct goodput (correct answers/s "
                                                  "whose request met every one), e.g. e2e_p95<=8s; repeat.")
                   ] = None,
    gpu_cost_per_hour: Annotated[float | None, typer.Option(help="For cost per 1,000 queries.")] = None,
    warmup: Annotated[int, typer.Option(help="Uncounted warm-up requests at c=1 first.",
                                        rich_help_panel=LOAD_PANEL)] = 2,
    efficiency_threshold: Annotated[float, typer.Option(help="Knee: scaling efficiency below this.")] = 0.8,
    marginal_threshold: Annotated[float, typer.Option(help="Knee: marginal gain per added request below "
                                                      "this fraction of a single-request lane.")] = 0.5,
    flat_pct: Annotated[float, typer.Option(help="Saturation: next level's throughput gain below this "
                                            "fraction while p95 rises more than it.")] = 0.10,
    server_sweep: Annotated[str | None, typer.Option(help="Restart a local server per setting, e.g. "
                                                     "'max-num-seqs=1,4,16' (no --endpoint).",
                                                     rich_help_panel=ENDPOINT_PANEL)] = None,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory (sweep.json, sweep.md, PNGs, level runs).",
                                      rich_help_panel=OUTPUT_PANEL)] = Path("runs/sweep"),
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.",
                                        rich_help_panel=OUTPUT_PANEL)] = False,
    reanalyse: Annotated[bool, typer.Option(help="Re-analyse the sweep already in --out (new thresholds, "
                                            "SLOs or cost) without sending requests.",
                                            rich_help_panel=OUTPUT_PANEL)] = False,
    resume: ResumeLevelsOpt = False,
    endpoints_file: EndpointsFileOpt = None, routing: RoutingOpt = "least-inflight",
    spec: Any = None,  # the run spec (spec_options)
) -> None:
    """Concurrency sweep on real eval prompts: req/s, goodput, latency, knee, saturation, SLO, cost.

    With several endpoints: the sweep of the whole fleet, then of each replica alone."""
    from dataclasses import replace


    levels = parse_levels(concurrency, "--concurrency")
    endpoint_url, replicas = fleet_args(endpoint, endpoints_file)
    if max_num_seqs is not None and endpoint_url is not None:
        raise InputError("only for a local server (no --endpoint)", field="--max-num-seqs")
    check_server_numbers(max_num_seqs)
    base = spec.apply(EvalConfig(evalset=evalset, out=out, endpoint=endpoint_url, api_key_env=api_key_env,
                                 replicas=replicas, routing=routing))
    base = replace(base, server=replace(base.server, max_num_seqs=max_num_seqs),
                   load=replace(base.load, arrival_seed=arrival_seed))
    th = Thresholds(efficiency=efficiency_threshold, marginal=marginal_threshold, flat_pct=flat_pct,
                    p95_rise_pct=flat_pct)
    cfg = sw.SweepConfig(base=base, levels=levels, requests=requests, slo_p95=_floats(slo_p95, "--slo-p95"),
                         gpu_cost_per_hour=gpu_cost_per_hour, thresholds=th, warmup=warmup, force=force,
                         duration_s=duration, resume=resume, slo=tuple(parse_slo(x) for x in slo or ()))
    name, settings = modes.sweep_mode(cfg, rates=_floats([rate], "--rate") if rate is not None else None,
                                      server_sweep=server_sweep, reanalyse=reanalyse)
    res, chosen = modes.run_mode(name, settings, _say), modes.mode(name)
    Console().print(chosen.render(res), markup=False, highlight=False)
    err.print(f"wrote {chosen.wrote(out)}")


@app.command("grid")
@handled
@mode_options(gr.GridConfig, panel=None)
def grid_cmd(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = DEFAULT_MODEL,
    api_key_env: KeyOpt = None, prompt: PromptOpt = "baseline",
    concurrency: Annotated[str, typer.Option(help="Comma-separated concurrency levels.")] = "1,4,16",
    classes: Annotated[str, typer.Option(help="Length classes: short,median,long (defaults: +0/+256/+1024 "
                                         "context tokens; intent / 64 / 128 output tokens) or name:pad:out."
                                         )] = "short,median,long",
    max_tokens: MaxTokOpt = 96,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory (grid.json, grid.md, grid.png, cell runs).")
                   ] = Path("runs/grid"),
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    resume: ResumeLevelsOpt = False,
    semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None, schema: SchemaOpt = "flat",
    values: dict[str, Any] | None = None,
) -> None:
    """Concurrency × request-length class: req/s, p95 and peak KV usage per cell, as a table and heatmap."""

    cfg = gr.GridConfig(base=_load_base(evalset, endpoint, model, api_key_env, prompt, max_tokens, "json", out,
                                        max_num_seqs, semantic=(semantic_model, db, schema)),
                        levels=parse_levels(concurrency, "--concurrency"), classes=gr.parse_classes(classes),
                        force=force, resume=resume, **(values or {}))
    res = modes.run_mode("grid", cfg, _say)
    Console().print(gr.render_markdown(res), markup=False, highlight=False)
    err.print(f"wrote {out / 'grid.json'}, {out / 'grid.md'} and {out / 'grid.png'}")


@probe_app.command("serialization")
@handled
@mode_options(ser.SerializationConfig, panel=None)
def probe_serialization(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = DEFAULT_MODEL,
    api_key_env: KeyOpt = None, prompt: PromptOpt = "baseline",
    max_tokens: MaxTokOpt = 96,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/probe-serialization"),
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    expect: Annotated[str | None, typer.Option(help="Exit 1 unless the verdict is this one.")] = None,
    values: dict[str, Any] | None = None,
) -> None:
    """Batched, serialized (upstream or at the engine) or client-bound? Evidence and a verdict."""
    if expect is not None and expect not in ser.VERDICTS:
        raise InputError(f"unknown verdict {expect!r} (known: {', '.join(ser.VERDICTS)})", field="--expect")
    base = _load_base(evalset, endpoint, model, api_key_env, prompt, max_tokens, "json", out, max_num_seqs)
    res = modes.run_mode("serialization", {"base": base, "force": force, **(values or {})}, _say)
    Console().print(ser.render_markdown(res), markup=False, highlight=False)
    if expect is not None and res.verdict != expect:
        err.print(f"verdict {res.verdict!r}, expected {expect!r}")
        raise typer.Exit(1)


def _probe_command(mode: type[ProbeMode[Any, Any]]) -> None:
    """``nlq2sql probe X`` for the registered mode ``probe-X``: where it sends and writes, the
    eval set it asks (``asks_questions``), then its settings' own options."""
    short = mode.name.removeprefix("probe-")
    stem = mode.stem

    def command(endpoint: str | None = None, model: str = DEFAULT_MODEL, api_key_env: str | None = None,
                max_num_seqs: int | None = None, out: Path = Path(f"runs/probe-{short}"),
                evalset: str = "heldout", prompt: str = "baseline", semantic_model: str = CLI_WAREHOUSE,
                db: Path | None = None, values: dict[str, Any] | None = None) -> None:
        values = dict(values or {})
        output_dir(out, create=False)
        base = _load_base("heldout", endpoint, model, api_key_env, "baseline", 16, "none", out, max_num_seqs)
        if mode.asks_questions:
            wh = open_warehouse(semantic_model, db)  # the CLI's warehouse (default retail, as --semantic-model says)
            values |= {"system": load_prompt(prompt, "default", wh).text,
                       "questions": [c.question for c in load_evalset(evalset, wh).cases]}
        res = modes.run_mode(mode.name, {"base": base, **values})
        Console().print(modes.mode(mode.name).render(res), markup=False, highlight=False)
        err.print(f"wrote {out / (stem + '.json')} and {out / (stem + '.md')}")

    common = [("endpoint", EndpointOpt), ("model", ModelOpt), ("api_key_env", KeyOpt), ("max_num_seqs", LocalSeqsOpt),
              ("out", Annotated[Path, typer.Option(help="Output directory.", rich_help_panel=OUTPUT_PANEL)])]
    if mode.asks_questions:
        common += [("evalset", EvalsetOpt), ("prompt", PromptOpt), ("semantic_model", SemanticModelOpt), ("db", DbOpt)]
    defaults = inspect.signature(command).parameters
    own = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=defaults[n].default, annotation=a)
           for n, a in common]
    run = _with_options(command, own, mode.settings_model, None)
    run.__doc__ = (mode.__doc__ or "").strip().split("\n\n")[0]
    run.__name__ = f"probe_{short.replace('-', '_')}"
    probe_app.command(short)(handled(run))


def add_probe_commands() -> list[str]:
    """A ``nlq2sql probe X`` command for every registered ``probe-X`` mode that has none yet (run
    when this module loads; again by a caller that registered a probe later); the names added."""
    have = {c.name for c in probe_app.registered_commands}
    new = [m for m in modes.registry().values()
           if issubclass(m, ProbeMode) and m.name.startswith("probe-") and m.name.removeprefix("probe-") not in have]
    for m in new:
        _probe_command(m)
    return [m.name.removeprefix("probe-") for m in new]


add_probe_commands()


@app.command("capacity")
@handled
@mode_options(cap.CapacitySettings, panel=None)
def capacity_cmd(values: dict[str, Any]) -> None:
    """KV bytes per token vs the server's KV budget; ISL/OSL, max_tokens and context headroom."""
    res = modes.run_mode("capacity", values)
    md = cap.render_markdown(res)
    Console().print(md, markup=False, highlight=False)

