"""Serving-path commands: sweep and probes (the ``nlq2sql.load`` package)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

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
from nlq2sql.inputs import MAX_REQUESTS, at_most
from nlq2sql.load import capacity as cap
from nlq2sql.load import grid as gr
from nlq2sql.load import modes
from nlq2sql.load import serialization as ser
from nlq2sql.load import sweep as sw
from nlq2sql.load.analysis import Thresholds
from nlq2sql.load.slo import parse_slo
from nlq2sql.records.store import output_dir
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.models import DEFAULT_MODEL
from nlq2sql.semantic.binding import open_warehouse
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.transport.client import STRUCTURED_MODES

__all__ = ["LocalSeqsOpt", "capacity_cmd", "grid_cmd", "probe_app", "probe_cancel", "probe_health", "probe_prefix",
           "probe_serialization", "sweep_cmd"]

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
def grid_cmd(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = DEFAULT_MODEL,
    api_key_env: KeyOpt = None, prompt: PromptOpt = "baseline",
    concurrency: Annotated[str, typer.Option(help="Comma-separated concurrency levels.")] = "1,4,16",
    classes: Annotated[str, typer.Option(help="Length classes: short,median,long (defaults: +0/+256/+1024 "
                                         "context tokens; intent / 64 / 128 output tokens) or name:pad:out."
                                         )] = "short,median,long",
    requests: Annotated[int, typer.Option(help="Requests per cell (eval items cycled).")] = 16,
    max_tokens: MaxTokOpt = 96,
    warmup: Annotated[int, typer.Option(help="Uncounted warm-up requests at c=1 first.")] = 1,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory (grid.json, grid.md, grid.png, cell runs).")
                   ] = Path("runs/grid"),
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    resume: ResumeLevelsOpt = False,
    semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None, schema: SchemaOpt = "flat",
) -> None:
    """Concurrency × request-length class: req/s, p95 and peak KV usage per cell, as a table and heatmap."""

    cfg = gr.GridConfig(base=_load_base(evalset, endpoint, model, api_key_env, prompt, max_tokens, "json", out,
                                        max_num_seqs, semantic=(semantic_model, db, schema)),
                        levels=parse_levels(concurrency, "--concurrency"), classes=gr.parse_classes(classes),
                        requests=requests, warmup=warmup, force=force, resume=resume)
    res = modes.run_mode("grid", cfg, _say)
    Console().print(gr.render_markdown(res), markup=False, highlight=False)
    err.print(f"wrote {out / 'grid.json'}, {out / 'grid.md'} and {out / 'grid.png'}")


@probe_app.command("serialization")
@handled
def probe_serialization(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = DEFAULT_MODEL,
    api_key_env: KeyOpt = None, prompt: PromptOpt = "baseline",
    level: Annotated[int, typer.Option(help="The loaded concurrency level K (compared with c=1).")] = 8,
    requests_single: Annotated[int, typer.Option(help="Requests at c=1.")] = 6,
    requests_level: Annotated[int, typer.Option(help="Requests at c=K.")] = 24,
    staircase: Annotated[int, typer.Option(help="Independent OS processes started together.")] = 4,
    max_tokens: MaxTokOpt = 96,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/probe-serialization"),
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    expect: Annotated[str | None, typer.Option(help="Exit 1 unless the verdict is this one.")] = None,
) -> None:
    """Batched, serialized (upstream or at the engine) or client-bound? Evidence and a verdict."""

    if expect is not None and expect not in ser.VERDICTS:
        raise InputError(f"unknown verdict {expect!r} (known: {', '.join(ser.VERDICTS)})", field="--expect")
    base = _load_base(evalset, endpoint, model, api_key_env, prompt, max_tokens, "json", out, max_num_seqs)
    res = modes.run_mode("serialization", ser.SerializationConfig(
        base=base, level=level, requests_single=requests_single, requests_level=requests_level, staircase=staircase,
        force=force), _say)
    Console().print(ser.render_markdown(res), markup=False, highlight=False)
    if expect is not None and res.verdict != expect:
        err.print(f"verdict {res.verdict!r}, expected {expect!r}")
        raise typer.Exit(1)


def _probe(name: str, endpoint: str | None, model: str, api_key_env: str | None, max_num_seqs: int | None,
           out: Path, **kw: Any) -> None:

    output_dir(out, create=False)
    base = _load_base("heldout", endpoint, model, api_key_env, "baseline", 16, "none", out, max_num_seqs)
    res = modes.run_mode(f"probe-{name}", {"base": base, **kw})
    Console().print(modes.mode(f"probe-{name}").render(res), markup=False, highlight=False)
    err.print(f"wrote {out / (name + '.json')} and {out / (name + '.md')}")


@probe_app.command("cancel")
@handled
def probe_cancel(
    endpoint: EndpointOpt = None, model: ModelOpt = DEFAULT_MODEL, api_key_env: KeyOpt = None,
    k: Annotated[int, typer.Option(help="Disconnect after this many streamed tokens.")] = 16,
    max_tokens: Annotated[int, typer.Option(help="The long generation's max_tokens (ignore_eos).")] = 512,
    trials: Annotated[int, typer.Option(help="Repetitions.")] = 3,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/probe-cancel"),
) -> None:
    """Disconnect a long stream after k tokens: time until running = 0, tokens generated after."""
    if k < 1 or max_tokens <= k or trials < 1:
        raise InputError("need 1 ≤ k < max_tokens and trials ≥ 1", field="--k")
    at_most(trials, 10_000, "--trials")
    at_most(max_tokens, MAX_REQUESTS, "--max-tokens")
    _probe("cancel", endpoint, model, api_key_env, max_num_seqs, out, k_tokens=k, max_tokens=max_tokens,
           trials=trials)


@probe_app.command("health")
@handled
def probe_health(
    endpoint: EndpointOpt = None, model: ModelOpt = DEFAULT_MODEL, api_key_env: KeyOpt = None,
    prefill_words: Annotated[int, typer.Option(help="Words in each long prompt (≈ tokens).")] = 1200,
    parallel: Annotated[int, typer.Option(help="Long prompts sent together.")] = 4,
    interval: Annotated[float, typer.Option(help="Seconds between /health calls.")] = 0.05,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/probe-health"),
) -> None:
    """/health round-trip (count, p50, p95, max, errors) idle and while long prefills run."""
    if prefill_words < 1 or parallel < 1 or interval <= 0:
        raise InputError("need positive --prefill-words, --parallel and --interval", field="--parallel")
    at_most(parallel, 1024, "--parallel")
    at_most(prefill_words, MAX_REQUESTS, "--prefill-words")
    _probe("health", endpoint, model, api_key_env, max_num_seqs, out, prefill_words=prefill_words,
           parallel=parallel, interval_s=interval)


@probe_app.command("prefix")
@handled
def probe_prefix(
    endpoint: EndpointOpt = None, model: ModelOpt = DEFAULT_MODEL, api_key_env: KeyOpt = None,
    evalset: EvalsetOpt = "heldout", prompt: PromptOpt = "baseline",
    requests: Annotated[int, typer.Option(help="Sequential requests per scenario.")] = 8,
    pad_words: Annotated[int, typer.Option(help="Padding words appended to the system prompt.")] = 600,
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request.")] = 32,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/probe-prefix"),
    semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None,
) -> None:
    """Shared vs diverse vs leading-unique prefixes: TTFT, prefill share, prefix-cache hit rate."""

    if requests < 1 or pad_words < 0 or max_tokens < 1:
        raise InputError("need --requests ≥ 1, --pad-words ≥ 0, --max-tokens ≥ 1", field="--requests")
    at_most(requests, MAX_REQUESTS, "--requests")
    at_most(pad_words, MAX_REQUESTS, "--pad-words")
    wh = open_warehouse(semantic_model, db)  # the CLI's warehouse (default retail, as --semantic-model says)
    questions = [c.question for c in load_evalset(evalset, wh).cases]
    _probe("prefix", endpoint, model, api_key_env, max_num_seqs, out, system=load_prompt(prompt, "default", wh).text,
           questions=questions, requests=requests, pad_words=pad_words, max_tokens=max_tokens)


@app.command("capacity")
@handled
def capacity_cmd(
    run: Annotated[list[Path] | None, typer.Option(help="Recorded run directories (repeat).")] = None,
    sweep: Annotated[Path | None, typer.Option(help="A sweep directory: all its levels.")] = None,
    model: Annotated[str, typer.Option(help="Local model alias or folder (its config.json).")] = DEFAULT_MODEL,
    model_config: Annotated[Path | None, typer.Option(help="A Hugging Face config.json (for remote models).")
                            ] = None,
    kv_dtype: Annotated[str, typer.Option(help="KV-cache dtype: auto (the model's), bfloat16, fp8, …")] = "auto",
    endpoint: Annotated[str | None, typer.Option(help="Read the KV budget from this server's /metrics.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Concurrency for the KV need (default: the "
                                                    "highest recorded).")] = None,
    context: Annotated[int | None, typer.Option(help="Tokens per sequence (default: largest prompt + "
                                                "recommended max_tokens).")] = None,
    margin: Annotated[float, typer.Option(help="Margin over the largest valid output for max_tokens.")] = 0.25,
    out: Annotated[Path | None, typer.Option(help="Write capacity.json and capacity.md here.")] = None,
) -> None:
    """KV bytes per token vs the server's KV budget; ISL/OSL, max_tokens and context headroom."""

    res = modes.run_mode("capacity", cap.CapacitySettings(
        runs=tuple(run or ()), sweep=sweep, model=model, config_json=model_config, kv_dtype=kv_dtype,
        endpoint=endpoint, concurrency=concurrency, context=context, margin=margin, out=out))
    md = cap.render_markdown(res)
    Console().print(md, markup=False, highlight=False)

