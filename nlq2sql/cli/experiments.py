"""Experiment commands: load-check, compact, matrix, compare (seed 002's experiments)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ..errors import InputError
from .main import app, err, handled


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
