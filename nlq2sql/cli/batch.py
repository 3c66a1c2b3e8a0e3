"""``nlq2sql batch``: an eval set or a question file through Ray Data (``nlq2sql.run.batch``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from nlq2sql.cli._common import (
    CLI_WAREHOUSE,
    DbOpt,
    EndpointsFileOpt,
    GuardrailsOpt,
    KeyOpt,
    PromptOpt,
    RoutingOpt,
    SemanticModelOpt,
    app,
    condition_options,
    err,
    fleet_args,
    guardrail_names,
    handled,
)
from nlq2sql.errors import InputError
from nlq2sql.records.batch_parts import BatchTail
from nlq2sql.records.summary_parts import AnswerFigures, Figures
from nlq2sql.run.models import DEFAULT_MODEL

__all__ = ["BatchEndpointsOpt", "answers_table", "batch_cmd"]

BatchEndpointsOpt = Annotated[list[str] | None, typer.Option(
    "--endpoint", help="--engine ray: OpenAI-compatible base URL (…/v1); give it several times for replicas "
    "of one model (items are routed over all of them).")]


@app.command("batch")
@handled
@condition_options
def batch_cmd(
    evalset: Annotated[str | None, typer.Option(help="Eval set name or path: every item is scored.")] = None,
    questions: Annotated[Path | None, typer.Option(
        help='Question file instead: JSONL lines {"id", "question"}, answered but not scored (no gold).')] = None,
    endpoint: BatchEndpointsOpt = None,
    endpoints_file: EndpointsFileOpt = None,
    routing: RoutingOpt = "least-inflight",
    model: Annotated[str, typer.Option(help="Served model name (--engine ray), or the model alias / folder "
                                       "vLLM loads (--engine ray-vllm).")] = DEFAULT_MODEL,
    api_key_env: KeyOpt = None,
    prompt: PromptOpt = "baseline",
    guardrails: GuardrailsOpt = None,
    semantic_model: SemanticModelOpt = CLI_WAREHOUSE,
    db: DbOpt = None,
    out: Annotated[str, typer.Option(help="Output directory: records/ (shards), summary.json, manifest.json; "
                                     "a path, or a file://, s3:// or gs:// URI (pyarrow's filesystems: "
                                     "credentials from the environment).")] = "runs/batch",
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted batch in --out: finished shards are "
                                         "kept, the rest answered (nothing there: a fresh start).")] = False,
    format: Annotated[str, typer.Option("--format", help="Shard format: parquet (columns id, record: the "
                                        "record's JSON text) | jsonl (record lines, as records.jsonl).")] = "parquet",
    shard_rows: Annotated[int, typer.Option(help="At most this many records per shard (one Ray Data "
                                            "batch).")] = 1000,
    concurrency: Annotated[int, typer.Option(help="Requests in flight per actor (--engine ray-vllm: the "
                                             "engine's max_num_seqs).")] = 8,
    actors: Annotated[int, typer.Option(help="Ray actors answering (--engine ray-vllm: vLLM engines).")] = 1,
    engine: Annotated[str, typer.Option(help="ray (actors send requests to --endpoint) | ray-vllm (vLLM runs "
                                        "inside Ray Data: ray.data.llm, no server).")] = "ray",
    ray_address: Annotated[str | None, typer.Option(help="An existing Ray cluster's GCS address (e.g. head:6379 "
                                                    "or auto; ray:// is refused); --out must then be storage every "
                                                    "node can write. Default: a local Ray.")] = None,
    answer: Annotated[str, typer.Option(help="intent (v1 intent JSON) | sql (DuckDB SQL the model writes, "
                                        "guarded, sandboxed, scored by result rows; the eval set's v2 golds) | "
                                        "sql-grammar (the same under the warehouse's SQL grammar: checked with one "
                                        "request first, recorded in the manifest).")] = "intent",
    max_tokens: Annotated[int, typer.Option(help="max_tokens per request.")] = 128,
    timeout: Annotated[float, typer.Option(help="Per-request timeout, seconds.")] = 120.0,
    limit: Annotated[int | None, typer.Option(help="Only the first K items.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    conditions: Any = None,  # every registered condition's options (condition_options)
) -> None:
    """Answer an eval set or a question file at scale with Ray Data: records as Parquet/JSONL shards plus
    the usual summary.  Shards are written whole; an interrupted batch continues with --resume."""
    from nlq2sql.answers.kinds import KINDS
    from nlq2sql.run.batch import BatchConfig, require_ray, run_batch
    from nlq2sql.run.config import EvalConfig
    from nlq2sql.stages.report import render_summary
    from nlq2sql.transport.client import Sampling

    require_ray()  # the extra first: no input (an endpoints file, the eval set) is read without it
    if (evalset is None) == (questions is None):
        raise InputError("give one of --evalset (scored) or --questions (answered, not scored)", field="--evalset")
    first, replicas = fleet_args(endpoint, endpoints_file)
    names = guardrail_names(guardrails)
    if answer in KINDS:  # as eval: the kind's own prompt, no v1 guardrail unless named (answers.kinds)
        prompt = KINDS[answer].prompt if prompt == "baseline" else prompt
        names = names if KINDS[answer].default_guardrails or guardrails else ()
    base = EvalConfig(endpoint=first, replicas=replicas, routing=routing, model=model, api_key_env=api_key_env,
                      prompt=prompt, guardrails=names, limit=limit, concurrency=concurrency, answer=answer,
                      sampling=Sampling(max_tokens=max_tokens), timeout_s=timeout, semantic_model=semantic_model,
                      warehouse=db, conditions=conditions)
    cfg = BatchConfig(base=base, input=str(questions if questions is not None else evalset),
                      questions=questions is not None, out=out, shard_rows=shard_rows, format=format,
                      engine=engine, ray_address=ray_address, concurrency=concurrency, actors=actors, force=force,
                      resume=resume)
    try:
        summary = run_batch(cfg)
    except KeyboardInterrupt:
        err.print(f"interrupted: the shards finished so far are kept in {out}; --resume continues the batch"
                  if engine == "ray" else "interrupted: nothing was kept (--engine ray-vllm is all or nothing)")
        raise typer.Exit(130) from None
    if as_json:
        sys.stdout.write(json.dumps(summary.to_json_dict(), indent=2) + "\n")
        return
    title = f"{cfg.input} · {model} · {engine} · {actors}×c={concurrency}"
    if isinstance(summary.figures, Figures):  # read as a run's summary, less what only a batch has
        from nlq2sql.records.results import Summary

        tail = summary.tail
        render_summary(Summary.of(summary.figures, **{k: getattr(tail, k) for k in tail.model_fields_set
                                                      if k in Summary.model_fields
                                                      and k not in ("load", "records", "retry_budget")}),
                       title=title)
    else:
        Console().print(answers_table(summary.figures, summary.tail, title))
    shards = summary.tail.records.shards
    Console().print(f"{summary.tail.records.count} records in {len(shards)} {format} shard"
                    f"{'s' * (len(shards) != 1)} under {out.rstrip('/')}/records")


def answers_table(s: AnswerFigures, tail: BatchTail, title: str) -> Table:
    """An unscored batch: how the answers came out (no gold, so no accuracy)."""
    from nlq2sql.stages.report import pct

    t = Table(title=title, show_header=True)
    t.add_column("measure")
    t.add_column("value")
    for k, v in (("items (not scored: no gold)", str(s.n)), ("schema-valid rate", pct(s.schema_valid_rate)),
                 ("answers that executed", pct(s.executed_rate)), ("execution errors", str(s.exec_errors)),
                 ("final intents", ", ".join(f"{k} {v}" for k, v in s.final_intents.items())),
                 ("status (raw)", ", ".join(f"{k} {v}" for k, v in s.status_counts.items())),
                 ("request errors by class", ", ".join(f"{k} {v}" for k, v in tail.errors_by_class.items()) or "none")):
        t.add_row(k, v)
    return t
