"""``nlq2sql tune``: build the settings, call the load driver's ``tune`` mode, render."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from nlq2sql.cli._common import (
    LOAD_PANEL,
    OUTPUT_PANEL,
    EndpointOpt,
    EvalsetOpt,
    KeyOpt,
    ResumeLevelsOpt,
    app,
    err,
    handled,
)
from nlq2sql.cli._spec import spec_options
from nlq2sql.load import modes
from nlq2sql.load.slo import parse_slo
from nlq2sql.load.tune import render_markdown
from nlq2sql.load.tune_results import TuneResult
from nlq2sql.run.config import EvalConfig

__all__ = ["tune_cmd"]


@app.command("tune")
@handled
@spec_options
def tune_cmd(
    slo: Annotated[list[str], typer.Option(help="Per-request SLO, METRIC_pNN<=VALUE[s|ms] with METRIC e2e, "
                                           "ttft or itl (repeat: every one must hold), e.g. e2e_p95<=8s.",
                                           rich_help_panel=LOAD_PANEL)],
    by: Annotated[str, typer.Option(help="concurrency (closed loop, from c=1) | rate (open loop, Poisson, "
                                    "from --lo).", rich_help_panel=LOAD_PANEL)] = "concurrency",
    min_accuracy: Annotated[float, typer.Option(help="Accuracy bound a probe must meet.")] = 0.0,
    alpha: Annotated[float, typer.Option(help="One-sided McNemar level for 'significantly below the "
                                         "baseline'.")] = 0.05,
    lo: Annotated[float, typer.Option(help="--by rate: the lowest (baseline) rate; concurrency starts at 1.",
                                      rich_help_panel=LOAD_PANEL)] = 1.0,
    hi: Annotated[float, typer.Option(help="The highest load tried.", rich_help_panel=LOAD_PANEL)] = 16.0,
    probes: Annotated[int, typer.Option(help="At most this many probes (baseline and --hi included).",
                                        rich_help_panel=LOAD_PANEL)] = 6,
    requests: Annotated[int, typer.Option(help="Scored requests per probe (eval items repeated in a "
                                          "seeded order when the set is shorter).", rich_help_panel=LOAD_PANEL)] = 32,
    seed: Annotated[int, typer.Option(help="Seed of the items' order (the same at every probe).",
                                      rich_help_panel=LOAD_PANEL)] = 0,
    max_in_flight: Annotated[int, typer.Option(help="--by rate: cap on requests in flight.",
                                               rich_help_panel=LOAD_PANEL)] = 32,
    evalset: EvalsetOpt = "heldout", endpoint: EndpointOpt = None,
    api_key_env: KeyOpt = None,
    warmup: Annotated[int, typer.Option(help="Uncounted warm-up requests at c=1 first.",
                                        rich_help_panel=LOAD_PANEL)] = 2,
    out: Annotated[Path, typer.Option(help="Output directory (tune.json, tune.md, tune.png, probe runs).",
                                      rich_help_panel=OUTPUT_PANEL)] = Path("runs/tune"),
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.",
                                        rich_help_panel=OUTPUT_PANEL)] = False,
    resume: ResumeLevelsOpt = False,
    spec: Any = None,  # the run spec (spec_options)
) -> None:
    """The load to deploy at: most correct answers per second within the SLO, accuracy held."""

    slos = tuple(parse_slo(s) for s in slo)  # a bad SLO is refused before anything starts
    base = spec.apply(EvalConfig(evalset=evalset, out=out, endpoint=endpoint, api_key_env=api_key_env))
    res = modes.run_mode("tune", dict(base=base, slo=slos, by=by, min_accuracy=min_accuracy, alpha=alpha, lo=lo, hi=hi,
                                probes=probes, requests=requests, order_seed=seed, max_in_flight=max_in_flight,
                                warmup=warmup, force=force, resume=resume),
                   lambda m: err.print(m, markup=False, highlight=False))

    assert isinstance(res, TuneResult)  # the tune mode's result
    Console().print(render_markdown(res), markup=False, highlight=False)
    err.print(f"wrote {out / 'tune.json'}, {out / 'tune.md'} and {out / 'tune.png'}")
