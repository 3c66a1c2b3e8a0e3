"""``nlq2sql examples synth``: a solved-example bank generated from a semantic layer alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from nlq2sql.cli._common import CLI_WAREHOUSE, DbOpt, SemanticModelOpt, app, handled
from nlq2sql.conditions.synth import write_bank
from nlq2sql.errors import InputError
from nlq2sql.semantic import open_warehouse

__all__ = ["examples_app"]

examples_app = typer.Typer(help="Banks of solved examples for --example-bank.", no_args_is_help=True)
app.add_typer(examples_app, name="examples")


@examples_app.command("synth")
@handled
def examples_synth(
    out: Annotated[Path, typer.Option("--out", help="Write the bank (JSONL, a v2 eval set's format) here.")],
    semantic_model: SemanticModelOpt = CLI_WAREHOUSE, db: DbOpt = None,
    n: Annotated[int, typer.Option("--n", help="How many examples (fewer when the layer cannot make so many "
                                               "distinct ones).")] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: the same seed, layer and data give the "
                                                     "same bytes.")] = 0,
    force: Annotated[bool, typer.Option(help="Overwrite --out.")] = False,
) -> None:
    """Generate solved questions from the semantic layer and its data (never from an eval set): each
    gold a MetricFlow query that compiles and returns rows; distinct questions and queries."""

    if n <= 0:
        raise InputError(f"must be at least 1, got {n}", field="--n")
    if out.exists() and not force:
        raise InputError("exists; pass --force to overwrite", path=str(out), field="--out")
    if out.is_dir() or (out.parent.exists() and not out.parent.is_dir()):
        raise InputError("not a file path", path=str(out), field="--out")
    wh = open_warehouse(semantic_model, db)
    written = write_bank(wh, out, n, seed)
    note = "" if written == n else f" (asked for {n}: the layer gave no more distinct examples)"
    Console().print(f"wrote {written} examples to {out}{note}", highlight=False)
