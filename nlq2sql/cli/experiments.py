"""Experiment commands: load-check, compact, matrix, compare."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from nlq2sql.cli._common import (
    CLI_WAREHOUSE,
    LOAD_PANEL,
    OUTPUT_PANEL,
    DbOpt,
    EndpointOpt,
    EndpointsFileOpt,
    EndpointsOpt,
    EvalsetOpt,
    KeyOpt,
    LimitOpt,
    MaxTokOpt,
    ModelOpt,
    PromptOpt,
    SchemaOpt,
    SemanticModelOpt,
    app,
    err,
    handled,
    parse_levels,
)
from nlq2sql.cli._serving import BatchInvariantOpt, check_local_only
from nlq2sql.cli._spec import base_config, fleet_args, spec_options
from nlq2sql.errors import InputError
from nlq2sql.experiments import common as exp_common
from nlq2sql.experiments import compact as cx
from nlq2sql.experiments import gate as gt
from nlq2sql.experiments import loadcheck
from nlq2sql.experiments import matrix as mx
from nlq2sql.experiments.arms import matrix_arms
from nlq2sql.experiments.compare import render
from nlq2sql.experiments.gate_report import render_markdown, write_outputs
from nlq2sql.experiments.repeated import gate as run_gate
from nlq2sql.inputs import at_most
from nlq2sql.records.store import output_dir, read_json, require_run
from nlq2sql.run import live as run_live
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.endpoint_facts import EndpointFacts
from nlq2sql.run.models import DEFAULT_MODEL
from nlq2sql.run.repeats import MAX_REPEATS, repeat_dirs
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.view.discover import discover

__all__ = ["compact", "compare", "compare_dirs", "gate", "load_check", "matrix"]


@app.command("load-check")
@handled
@spec_options(max_tokens=96)
def load_check(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointsOpt = None,
    api_key_env: KeyOpt = None,
    concurrency: Annotated[str, typer.Option(help="Comma-separated levels.", rich_help_panel=LOAD_PANEL)] = "1,16,32",
    endpoints_file: EndpointsFileOpt = None,
    across_replicas: Annotated[bool, typer.Option(
        help="Send every item to every replica (--endpoint given several times) at each level, and "
             "report byte-identity across replicas beside identity across concurrency.",
        rich_help_panel=LOAD_PANEL)] = False,
    repeats: Annotated[int, typer.Option(help="Runs per level.", rich_help_panel=LOAD_PANEL)] = 1,
    limit: LimitOpt = None,
    out: Annotated[Path, typer.Option(help="Output directory.", rich_help_panel=OUTPUT_PANEL)
                   ] = Path("runs/load-check"),
    runs: Annotated[list[Path] | None, typer.Option(help="Compare these recorded run dirs instead "
                                                   "of querying.", rich_help_panel=OUTPUT_PANEL)] = None,
    allow_diff: Annotated[bool, typer.Option(help="Exit 0 even when outputs diverge.",
                                             rich_help_panel=OUTPUT_PANEL)] = False,
    batch_invariant: BatchInvariantOpt = False,
    spec: Any = None,  # the run spec (spec_options)
) -> None:
    """Quality under load: are outputs byte-identical at each concurrency (and, with --repeats,
    run to run at one concurrency)? Exit 1 if not."""

    output_dir(out, create=False)
    if runs:
        dirs = list(runs)
        if len(dirs) < 2:
            raise InputError(f"needs at least 2 runs to compare, got {len(dirs)}", field="--runs")
    else:
        levels = parse_levels(concurrency, "--concurrency")
        if repeats < 1:
            raise InputError(f"must be at least 1, got {repeats}", field="--repeats")
        at_most(repeats, 1000, "--repeats")
        first, replicas = fleet_args(endpoint, endpoints_file)
        check_local_only(first, "auto", batch_invariant)
        if across_replicas and not replicas:
            raise InputError("needs at least two endpoints (--endpoint A --endpoint B)", field="--across-replicas")
        if len(levels) * repeats * (1 + len(replicas) if across_replicas else 1) < 2:
            raise InputError(f"needs at least 2 runs to compare: {len(levels)} level(s) × {repeats} "
                             "repeat(s); give two levels or --repeats 2", field="--concurrency")
        base = spec.apply(EvalConfig(evalset=evalset, out=out, endpoint=first, replicas=replicas,
                                     api_key_env=api_key_env, limit=limit))
        base = replace(base, server=replace(base.server, batch_invariant=batch_invariant))
        lc = loadcheck.LoadCheckConfig(base, levels, repeats, across_replicas=across_replicas)
        if across_replicas:
            result = loadcheck.run_across_replicas(lc)
        else:
            with run_live.bound_endpoint(base) as (bound, info):  # one local server for every level, when started here
                dirs = loadcheck.run_levels(replace(lc, base=bound))
                result = loadcheck.compare_runs(dirs).with_split(loadcheck.split_identity(dirs))
                result.server = EndpointFacts.model_validate({  # these keys, in this order
                    "started_by_us": info.started_by_us, "batch_invariant": info.batch_invariant,
                    "structured_outputs": info.structured_outputs})
    if runs:
        result = loadcheck.compare_runs(dirs).with_split(loadcheck.split_identity(dirs))
    loadcheck.write_result(out, result)
    Console().print(loadcheck.render_markdown(result), markup=False, highlight=False)
    if result.divergent and not allow_diff:
        err.print(f"{len(result.divergent)} item(s) diverged across runs")
        raise typer.Exit(1)


@app.command("compact")
@handled
def compact(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None, model: ModelOpt = DEFAULT_MODEL,
    api_key_env: KeyOpt = None, prompt: PromptOpt = "baseline",
    limit: LimitOpt = None, max_tokens: MaxTokOpt = 160,
    concurrency: Annotated[int, typer.Option(help="Requests in flight.")] = 1,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("runs/compact"),
    semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None, schema: SchemaOpt = "flat",
) -> None:
    """Compact vs pretty output: tokens, bytes, latency, and whether compactness was honoured."""
    from dataclasses import replace


    output_dir(out, create=False)
    if concurrency < 1:
        raise InputError(f"must be at least 1, got {concurrency}", field="--concurrency")

    # A local server for this experiment allows whitespace, or the pretty arm could not be pretty;
    # grammar-compact then gets its whitespace-free grammar from the request itself.
    base = base_config(evalset, endpoint, model, api_key_env, prompt, limit, max_tokens, out,
                 semantic=(semantic_model, db, schema))
    base = replace(base, concurrency=concurrency, server=replace(base.server, compact=False))
    with exp_common.shared_endpoint(base) as bound:
        res = cx.run(cx.CompactConfig(bound))
    cx.write_result(out, res)
    Console().print(cx.render_markdown(res), markup=False, highlight=False)


@app.command("matrix")
@handled
@spec_options(max_tokens=96, exclude=("prompt", "guardrails"))
def matrix(
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None,
    api_key_env: KeyOpt = None,
    prompts: Annotated[str | None, typer.Option(help="Comma-separated prompt names. Default: baseline,contrastive "
                                                "for --answer intent, else the spec's prompt.")] = None,
    guardrails: Annotated[str | None, typer.Option(help="Comma-separated conditions; '+' joins sets (rule set names "
                                                   "or learned:NAME). Default: none and the spec's guardrails "
                                                   "(none,ranking for --answer intent).")] = None,
    limit: LimitOpt = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "--max-concurrency", help="Requests in flight.",
                                             rich_help_panel=LOAD_PANEL)] = 8,
    out: Annotated[Path, typer.Option(help="Output directory.", rich_help_panel=OUTPUT_PANEL)] = Path("runs/matrix"),
    runs: Annotated[list[Path] | None, typer.Option(help="Re-score these recorded runs (one per "
                                                   "prompt) instead of querying.", rich_help_panel=OUTPUT_PANEL)
                    ] = None,
    answers: Annotated[str | None, typer.Option(help="Answer arms side by side instead (--prompts and --guardrails "
                                                "then do not apply): comma-separated query (the v2 sets' intent; "
                                                "'intent' is read as query), sql, sql-grammar.")] = None,
    gpu_cost_per_hour: Annotated[float | None, typer.Option(help="--answers: for cost per 1,000 questions.",
                                                            rich_help_panel=OUTPUT_PANEL)] = None,
    timeout: Annotated[float, typer.Option(help="Per-request timeout, seconds.", rich_help_panel=LOAD_PANEL)] = 120.0,
    repeats: Annotated[int, typer.Option(help="Run each prompt N times in seeded orders (OUT/EVALSET-PROMPT/r0 …): "
                                         "accuracy and latency mean ± CI across repeats, pairs compared item "
                                         "by item over repeats (SE clustered by pair_id).",
                                         rich_help_panel=LOAD_PANEL)] = 1,
    spec: Any = None,  # the run spec, less prompt and guardrails (the matrix's axes) (spec_options)
) -> None:
    """Prompt × guardrail matrix with CIs and exact McNemar tests; guardrails re-scored offline.  With
    --answers: the answer arms side by side (accuracy, McNemar per pair, tokens, latency, cost, errors)."""

    if not 1 <= repeats <= MAX_REPEATS:
        raise InputError(f"must be between 1 and {MAX_REPEATS}, got {repeats}", field="--repeats")
    if repeats > 1 and (answers is not None or runs):
        raise InputError("repeats the prompt × guardrail matrix's live runs: not with --answers or --runs "
                         "(give --runs a repeated run's directory instead)", field="--repeats")

    def spec_base(prompt: str) -> EvalConfig:
        return replace(spec.apply(EvalConfig(evalset=evalset, out=out, endpoint=endpoint, api_key_env=api_key_env,
                                             limit=limit)), prompt=prompt, concurrency=concurrency, timeout_s=timeout)

    if answers is not None:
        if spec.answer != "intent":
            raise InputError("--answers gives each arm its answer kind: drop --answer", field="--answer")
        md = matrix_arms(answers, runs, out, lambda: spec_base("baseline"), gpu_cost_per_hour,
                         f"Answer arms · {evalset} · {spec.model}")
        Console().print(md, markup=False, highlight=False)
        return

    output_dir(out, create=False)
    resolved = spec.resolved()
    if prompts is None:
        prompts = "baseline,contrastive" if spec.prompt is None and spec.answer == "intent" else resolved.prompt
    if guardrails is None:
        guardrails = ",".join(dict.fromkeys(["none", "+".join(resolved.guardrails) or "none"]))
    conds = tuple(g.strip() for g in guardrails.split(",") if g.strip())
    if not conds:
        raise InputError(f"give at least one condition, got {guardrails!r}", field="--guardrails")
    if runs:
        dirs = {read_json(require_run((repeat_dirs(d) or [d])[0]) / "manifest.json").get("prompt", d.name)
                + f"@{d.name}": d for d in runs}  # a repeated run (OUT/r0 …) is re-scored repeat by repeat
    else:
        names = tuple(p.strip() for p in prompts.split(","))
        if not prompts.strip() or not all(names):
            raise InputError(f"give comma-separated prompt names, none empty, got {prompts!r}", field="--prompts")
        for name in names:  # a bad prompt is refused before any server starts
            load_prompt(name, "default", None)  # the file only (the run renders it for its warehouse)
        with exp_common.shared_endpoint(spec_base(names[0])) as bound:
            dirs = mx.run_prompts(mx.MatrixConfig(bound, names, conds, repeats))
    table = mx.condition_table(dirs, conds)
    mx.write_result(out, table, f"Condition matrix · {evalset} · {spec.model}")
    Console().print(mx.render_markdown(table, f"Condition matrix · {evalset} · {spec.model}"),
                    markup=False, highlight=False)


def compare_dirs(args: list[Path]) -> list[Path]:
    """The runs ``compare`` reads: the viewer's discovery (a run directory, or a folder of runs at any
    depth; its refusals), what it skipped told on stderr, and a repeated run (``OUT/r0`` …) found by
    walking kept as its folder, so the report pairs it over all its repeats."""

    found = discover(args)
    for note in found.skipped:
        err.print(f"note: skipped {note}", markup=False, highlight=False)
    dirs: list[Path] = []
    for f in found.found:
        d = f.path.parent if not f.direct and f.path in repeat_dirs(f.path.parent) else f.path
        if d not in dirs:
            dirs.append(d)
    return dirs


@app.command("compare")
@handled
def compare(
    run_dirs: Annotated[list[Path], typer.Argument(
        help="Run directories, or folders holding runs at any depth (as `view` takes them); the first "
             "run found is the baseline of the paired comparison.")],
    out: Annotated[Path, typer.Option(help="Report directory (report.md + report.html).")] = Path("report"),
    gpu_cost_per_hour: Annotated[float | None, typer.Option(help="For cost per 1,000 questions.")] = None,
    title: Annotated[str, typer.Option(help="Report title.")] = "nlq2sql comparison",
) -> None:
    """Side-by-side report of recorded runs: Markdown + self-contained HTML with plots."""
    paths = render(compare_dirs(list(run_dirs)), out, gpu_cost_per_hour, title)
    Console().print(f"wrote {paths['markdown']} and {paths['html']}")


@app.command("gate")
@handled
def gate(
    baseline: Annotated[Path, typer.Option(help="The baseline run directory (what is known to be good).")],
    candidate: Annotated[Path, typer.Option(help="The candidate run directory (the change under test).")],
    max_drop: Annotated[float, typer.Option(help="Fail when final accuracy on the paired items drops by "
                                            "MORE than this many percentage points (equal passes).")] = 5.0,
    alpha: Annotated[float, typer.Option(help="Fail when the one-sided exact McNemar p-value of the drop "
                                         "is below this.")] = 0.05,
    max_p95_rise: Annotated[float | None, typer.Option(help="Fail when p95 latency rises by more than this "
                                                       "percentage (needs latency for ≥ 5 items in both "
                                                       "runs; default: reported, not judged).")] = None,
    require_identical: Annotated[bool, typer.Option(help="Fail when any paired item's raw output bytes "
                                                    "changed (default: reported only).")] = False,
    out: Annotated[Path | None, typer.Option(help="Write gate.md, junit.xml and gate.json here "
                                             "(default: print only).")] = None,
) -> None:
    """Regression gate for CI: exit 1 when the candidate run is worse than the baseline, 2 on bad input."""
    cfg = gt.config_from_options(baseline=baseline, candidate=candidate, max_drop=max_drop, alpha=alpha,
                                 max_p95_rise=max_p95_rise, require_identical=require_identical)
    if out is not None:
        output_dir(out, create=False)  # refused before anything is read
    result = run_gate(cfg)  # two repeated runs (eval --repeats): also paired over every repeat
    if out is not None:
        write_outputs(result, out)
    Console().print(render_markdown(result), markup=False, highlight=False, soft_wrap=True, end="")
    if result.exit_code:
        err.print(f"gate failed: {', '.join(c.id for c in result.failed)}", highlight=False)
        raise typer.Exit(result.exit_code)


# -- load generation and sweeps (nlq2sql.load) -------------------------------------------
