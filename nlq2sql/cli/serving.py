"""The ``backends`` command: the structured-output backends of the installed vLLM, side by side."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NamedTuple

import typer
from rich.console import Console

from nlq2sql.cli._common import (
    CLI_WAREHOUSE,
    DbOpt,
    EvalsetOpt,
    ModelOpt,
    PromptOpt,
    SchemaOpt,
    SemanticModelOpt,
    app,
    handled,
)
from nlq2sql.cli._spec import base_config
from nlq2sql.errors import InputError
from nlq2sql.experiments import backends as exp
from nlq2sql.records.store import SUMMARY, output_dir, write_json_atomic
from nlq2sql.run import live as run_live
from nlq2sql.run.config import EvalConfig, validate
from nlq2sql.run.models import DEFAULT_MODEL
from nlq2sql.run.repeats import REPEATS_FILE, RepeatsServer, check_repeats_out, render_repeats, repeat_dirs, run_repeats
from nlq2sql.run.serving import STRUCTURED_BACKENDS

__all__ = ["RepeatFailures", "backends", "eval_repeats"]


@app.command("backends")
@handled
def backends(
    evalset: EvalsetOpt = "heldout", model: ModelOpt = DEFAULT_MODEL, prompt: PromptOpt = "baseline",
    limit: Annotated[int, typer.Option(help="Items per backend.")] = 20,
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request.")] = 128,
    concurrency: Annotated[int, typer.Option(help="Requests in flight (1: the first request's grammar "
                                             "compile is measured alone).")] = 1,
    backend: Annotated[list[str] | None, typer.Option(help="A backend to run (repeat; default: every one "
                                                      "vLLM names).")] = None,
    compact: Annotated[bool, typer.Option(help="Whitespace-free grammar (xgrammar and guidance only; the "
                                          "others are reported as unable to start).")] = False,
    out: Annotated[Path, typer.Option(help="Output directory (one run per backend under it).")] = Path(
        "runs/backends"),
    port: Annotated[int, typer.Option(help="Port of each backend's server (one at a time).")] = 8100,
    semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None, schema: SchemaOpt = "flat",
) -> None:
    """One local vLLM per structured-output backend, the same items each: schema-valid rate,
    accuracy, tokens, TTFT/e2e, first-request grammar compile; a backend that cannot start is
    reported with its error."""
    from dataclasses import replace


    chosen = tuple(backend or STRUCTURED_BACKENDS)
    for b in chosen:
        if b not in STRUCTURED_BACKENDS:
            raise InputError(f"unknown backend {b!r} (known: {', '.join(STRUCTURED_BACKENDS)})", field="--backend")
    if len(set(chosen)) != len(chosen):
        raise InputError("a backend is named twice", field="--backend")
    output_dir(out, create=False)
    base = replace(base_config(evalset, None, model, None, prompt, limit, max_tokens, out,
                               semantic=(semantic_model, db, schema)), concurrency=concurrency)
    base = replace(base, server=replace(base.server, port=port))
    validate(base)
    result = exp.run_backends(exp.BackendsConfig(base, chosen, compact))
    exp.write_result(out, result)
    Console().print(exp.render_markdown(result), markup=False, highlight=False)


class RepeatFailures(NamedTuple):
    """Items that failed across the repeats, of how many (what ``--max-failure-rate`` judges)."""

    failed: int
    n: int


def eval_repeats(cfg: EvalConfig, repeats: int, progress: Callable[[str, dict[str, int]], None]
                 ) -> RepeatFailures:
    """``eval --repeats N``: one local server (when none is given) for every repeat; prints the
    summary across repeats and returns the items and failures of all repeats (for
    ``--max-failure-rate``)."""
    import json


    check_repeats_out(cfg, repeats)  # before a local server starts
    with run_live.bound_endpoint(cfg) as (bound, info):
        result = run_repeats(bound, repeats, lambda c: run_live.run_eval(c, progress))
    result.server = RepeatsServer(started_by_us=bool(info.started_by_us),
                                  structured_outputs=info.structured_written(),
                                  batch_invariant=info.batch_invariant)
    write_json_atomic(cfg.out / REPEATS_FILE, result.to_json())
    Console().print(render_repeats(result), markup=False, highlight=False, soft_wrap=True)
    failed = n = 0
    for d in repeat_dirs(cfg.out)[:repeats]:
        s = json.loads((d / SUMMARY).read_text())
        failed, n = failed + sum(s.get("errors_by_class", {}).values()), n + s["n"]
    return RepeatFailures(failed=failed, n=n)
