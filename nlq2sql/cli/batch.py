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
    ENDPOINT_PANEL,
    LOAD_PANEL,
    OUTPUT_PANEL,
    EndpointsFileOpt,
    KeyOpt,
    RoutingOpt,
    app,
    err,
    handled,
)
from nlq2sql.cli._spec import fleet_args, spec_options
from nlq2sql.errors import InputError
from nlq2sql.records.batch_parts import BatchTail
from nlq2sql.records.results import Summary
from nlq2sql.records.summary_parts import AnswerFigures, Figures
from nlq2sql.run.batch import run_batch
from nlq2sql.run.batch_config import BatchConfig, require_ray
from nlq2sql.run.config import EvalConfig
from nlq2sql.stages.report import pct, render_summary

__all__ = ["BatchEndpointsOpt", "answers_table", "batch_cmd"]

BatchEndpointsOpt = Annotated[list[str] | None, typer.Option(
    "--endpoint", "--base-url", help="--engine ray: OpenAI-compatible base URL (…/v1); give it several times for "
    "replicas of one model (items are routed over all of them).", rich_help_panel=ENDPOINT_PANEL)]


#: What the batch engines do not apply yet: refused by name when a spec sets it (option, preset or --like).



@app.command("batch")
@handled
@spec_options()
def batch_cmd(
    evalset: Annotated[str | None, typer.Option(help="Eval set name or path: every item is scored.")] = None,
    questions: Annotated[Path | None, typer.Option(
        help='Question file instead: JSONL lines {"id", "question"}, answered but not scored (no gold).')] = None,
    endpoint: BatchEndpointsOpt = None,
    endpoints_file: EndpointsFileOpt = None,
    routing: RoutingOpt = "least-inflight",
    api_key_env: KeyOpt = None,
    out: Annotated[str, typer.Option(help="Output directory: records/ (shards), summary.json, manifest.json; "
                                     "a path, or a file://, s3:// or gs:// URI (pyarrow's filesystems: "
                                     "credentials from the environment).", rich_help_panel=OUTPUT_PANEL)
                   ] = "runs/batch",
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.",
                                        rich_help_panel=OUTPUT_PANEL)] = False,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted batch in --out: finished shards are "
                                         "kept, the rest answered (nothing there: a fresh start).",
                                         rich_help_panel=OUTPUT_PANEL)] = False,
    format: Annotated[str, typer.Option("--format", help="Shard format: parquet (columns id, record: the "
                                        "record's JSON text) | jsonl (record lines, as records.jsonl).",
                                        rich_help_panel=OUTPUT_PANEL)] = "parquet",
    shard_rows: Annotated[int, typer.Option(help="At most this many records per shard (one Ray Data "
                                            "batch).", rich_help_panel=OUTPUT_PANEL)] = 1000,
    concurrency: Annotated[int, typer.Option("--concurrency", "--max-concurrency",
                                             help="Requests in flight per actor (--engine ray-vllm: the "
                                             "engine's max_num_seqs).", rich_help_panel=LOAD_PANEL)] = 8,
    actors: Annotated[int, typer.Option(help="Ray actors answering (--engine ray-vllm: vLLM engines).",
                                        rich_help_panel=LOAD_PANEL)] = 1,
    engine: Annotated[str, typer.Option(help="ray (actors send requests to --endpoint) | local (this process "
                                        "sends them) | ray-vllm (vLLM runs inside Ray Data: ray.data.llm, no "
                                        "server; v1 intents, no condition).", rich_help_panel=LOAD_PANEL)
                      ] = "ray",
    ray_address: Annotated[str | None, typer.Option(help="An existing Ray cluster's GCS address (e.g. head:6379 "
                                                    "or auto; ray:// is refused); --out must then be storage every "
                                                    "node can write. Default: a local Ray.",
                                                    rich_help_panel=LOAD_PANEL)] = None,
    timeout: Annotated[float, typer.Option(help="Per-request timeout, seconds.", rich_help_panel=LOAD_PANEL)] = 120.0,
    limit: Annotated[int | None, typer.Option(help="Only the first K items.", rich_help_panel=LOAD_PANEL)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.",
                                          rich_help_panel=OUTPUT_PANEL)] = False,
    spec: Any = None,  # the run spec (spec_options)
) -> None:
    """Answer an eval set or a question file at scale with Ray Data: records as Parquet/JSONL shards plus
    the usual summary.  Shards are written whole; an interrupted batch continues with --resume."""

    require_ray(engine)  # the extra first: no input (an endpoints file, the eval set) is read without it
    if (evalset is None) == (questions is None):
        raise InputError("give one of --evalset (scored) or --questions (answered, not scored)", field="--evalset")
    first, replicas = fleet_args(endpoint, endpoints_file)
    base = spec.apply(EvalConfig(endpoint=first, replicas=replicas, routing=routing, api_key_env=api_key_env,
                                 limit=limit, concurrency=concurrency, timeout_s=timeout))
    cfg = BatchConfig(base=base, input=str(questions if questions is not None else evalset),
                      questions=questions is not None, out=out, shard_rows=shard_rows, format=format,
                      engine=engine, ray_address=ray_address, concurrency=concurrency, actors=actors, force=force,
                      resume=resume)
    try:
        summary = run_batch(cfg)
    except KeyboardInterrupt:
        err.print(f"interrupted: the shards finished so far are kept in {out}; --resume continues the batch"
                  if engine != "ray-vllm" else "interrupted: nothing was kept (--engine ray-vllm is all or nothing)")
        raise typer.Exit(130) from None
    if as_json:
        sys.stdout.write(json.dumps(summary.to_json(), indent=2) + "\n")
        return
    title = f"{cfg.input} · {base.model} · {engine} · {actors}×c={concurrency}"
    if isinstance(summary.figures, Figures):  # read as a run's summary, less what only a batch has
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
