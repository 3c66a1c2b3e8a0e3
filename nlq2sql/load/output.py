"""The one output layer of the load tools: every mode writes ``STEM.json`` (atomically),
``STEM.md`` and its plots from the same typed result, so the files never disagree; a result
whose ``kind`` has a declared model (:mod:`.results`) is checked against it and versioned
before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from nlq2sql.load.results import checked
from nlq2sql.records.store import RECORD_VERSION, write_json_atomic
from nlq2sql.records.typed import Typed

__all__ = ["Plot", "write_outputs"]

R = TypeVar("R", bound=Typed)
#: The key the plots' file names go under, and what draws them from the typed result into a directory.
Plot = tuple[str, Callable[[R, Path], object]]


def write_outputs(out: Path, stem: str, result: R, render: Callable[[R], str], plot: Plot[R] | None = None, *,
                  elapsed_s: float | None = None) -> R:
    """Checked, then plots (their file names go into the JSON under ``plot[0]``), the JSON and the
    Markdown; returns the result as written (versioned, timed, with its plots' names).

    This is the one place a result becomes JSON.  ``elapsed_s``: the driver's timing, added when
    the mode did not time itself."""
    data = result.to_json()
    if elapsed_s is not None:
        data.setdefault("elapsed_s", elapsed_s)
    if "kind" in data:
        data["record_version"] = RECORD_VERSION
    # Checked before the first file is written; a plot's file names are filled in after (each
    # model gives that key a default, so the result is checked without it).
    checked(data if plot is None else {k: v for k, v in data.items() if k != plot[0]})
    model = type(result)
    out.mkdir(parents=True, exist_ok=True)
    if plot is not None:
        key, draw = plot
        data[key] = draw(model.model_validate({k: v for k, v in data.items() if k != key}), out)
    write_json_atomic(out / f"{stem}.json", data)
    written = model.model_validate(data)
    (out / f"{stem}.md").write_text(render(written))
    return written
