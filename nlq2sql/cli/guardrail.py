"""``nlq2sql guardrail``: train and inspect the learned guardrail (``--guardrails learned:NAME``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from nlq2sql.cli._common import app, handled
from nlq2sql.errors import InputError
from nlq2sql.semantic.catalog import display_path
from nlq2sql.stages import learned_guardrail as lg
from nlq2sql.stages import learned_training as lt
from nlq2sql.stages.learned_artefact import Proportion

__all__ = ["guardrail_app", "show", "train"]

guardrail_app = typer.Typer(help="Guardrails: train and inspect the learned guardrail (learned:NAME).",
                            no_args_is_help=True)
app.add_typer(guardrail_app, name="guardrail")


def _pct(w: Proportion) -> str:
    if w.value is None:
        return "n/a"
    ci = w.ci95 or [w.value, w.value]
    return f"{100 * w.value:.1f} % [{100 * ci[0]:.1f}–{100 * ci[1]:.1f}] ({w.k}/{w.n})"


@guardrail_app.command("train")
@handled
def train(
    train: Annotated[Path | None, typer.Option(
        "--train", help="Training set JSONL (id, question, label ranking|breakdown, optional row_count, sort). "
        "Default: guardrails/training/ranking-train.jsonl.")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Artefact to write (JSON). Default: guardrails/learned/NAME.json.")] = None,
    name: Annotated[str | None, typer.Option(
        help="Artefact name (used as --guardrails learned:NAME). Default: --out's stem, else 'ranking'.")] = None,
    threshold: Annotated[float, typer.Option(
        help="A rule fires when the classifier gives its target label at least this probability "
        "(0.5 ≤ t < 1; stored in the artefact).")] = 0.5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the artefact's metadata as JSON.")] = False,
) -> None:
    """Train the learned guardrail (logistic regression on word and character n-grams) and save a
    versioned JSON artefact with the training set's sha256 and 5-fold cross-validated accuracy."""

    if out is not None and out.suffix != ".json":
        raise InputError("the artefact is JSON (never pickle): give a path ending in .json", field="--out")
    name = name or (out.stem if out is not None else lg.DEFAULT_NAME)
    if not lg.SAFE_NAME.match(name):
        raise InputError(f"must be letters, digits, '_' or '-', got {name!r}", field="--name")
    artefact = lt.train(train or lg.DEFAULT_TRAINING, name, threshold)
    path = lt.save(artefact, out or lg.LEARNED_DIR / f"{name}.json")
    meta = {k: v for k, v in artefact.to_json().items() if k not in ("features", "heads")}
    if as_json:
        sys.stdout.write(json.dumps(meta, indent=2) + "\n")
        return
    cv = artefact.cv
    Console().print(
        f"wrote {path} (learned:{name if out is None else path}); n={artefact.training.n} "
        f"{artefact.training.kind}, training sha256 {artefact.training.sha256[:12]}…, "
        f"scikit-learn {artefact.sklearn_version}\n"
        f"{cv.folds}-fold stratified CV accuracy: ranking/breakdown {_pct(cv.kind_accuracy)}; "
        f"sort of a breakdown {_pct(cv.sort_breakdown_accuracy)}; sort of a ranking "
        f"{_pct(cv.sort_ranking_accuracy)}; row count {_pct(cv.count_accuracy)}\n"
        f"artefact sha256 {artefact.artefact_sha256}", highlight=False, markup=False, soft_wrap=True)


@guardrail_app.command("show")
@handled
def show(
    ref: Annotated[str, typer.Argument(help="A learned guardrail: NAME (guardrails/learned/NAME.json) or a "
                                       ".json path.")] = "ranking",
    question: Annotated[list[str] | None, typer.Option(
        "--question", help="Classify this question too (repeatable).")] = None,
) -> None:
    """A learned guardrail's metadata (verified), and its predictions for the given questions."""

    model = lg.load_model(ref.removeprefix(lg.PREFIX))
    a = model.artefact
    meta = {k: v for k, v in a.to_json().items() if k not in ("features", "heads")}
    meta["n_features"] = {k: len(v.vocabulary) for k, v in a.features.items()}
    out: dict[str, Any] = {"artefact": display_path(Path(model.source)), **meta}
    if question:
        preds = []
        for q in question:
            p = model.predict(q)
            label = "breakdown" if p.p_breakdown >= p.p_ranking else "ranking"
            preds.append({"question": q, "label": label, "p_breakdown": round(p.p_breakdown, 4),
                          "p_ranking": round(p.p_ranking, 4), "breakdown_sort": p.breakdown_sort,
                          "ranking_sort": p.ranking_sort, "count": p.count,
                          "ranking_limit": p.ranking_limit, "breakdown_limit": p.breakdown_limit,
                          "opens_rule": model.gate(p)})
        out["predictions"] = preds
    sys.stdout.write(json.dumps(out, indent=2) + "\n")
