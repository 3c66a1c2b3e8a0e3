"""The one output layer of the load tools: every mode writes ``STEM.json`` (atomically),
``STEM.md`` and its plots from the same result dict, so the files never disagree."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..records import write_json_atomic

__all__ = ["write_outputs"]

Plot = tuple[str, Callable[[dict[str, Any], Path], Any]]


def write_outputs(out: Path, stem: str, result: dict[str, Any], render: Callable[[dict[str, Any]], str],
                  plot: Plot | None = None) -> dict[str, Any]:
    """Plots first (their file names go into the JSON under ``plot[0]``), then the JSON and Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    if plot is not None:
        key, draw = plot
        result[key] = draw(result, out)
    write_json_atomic(out / f"{stem}.json", result)
    (out / f"{stem}.md").write_text(render(result))
    return result
