"""The one output layer of the load tools: every mode writes ``STEM.json`` (atomically),
``STEM.md`` and its plots from the same result dict, so the files never disagree; a result
whose ``kind`` has a declared model (:mod:`.results`) is checked against it and versioned
before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nlq2sql.load.contract import _M
from nlq2sql.load.figures import Fig, plain
from nlq2sql.load.results import checked
from nlq2sql.records.store import RECORD_VERSION, write_json_atomic

__all__ = ["write_outputs"]

Plot = tuple[str, Callable[[dict[str, Any], Path], Any]]


def write_outputs(out: Path, stem: str, result: dict[str, Any] | Fig | _M, render: Callable[[dict[str, Any]], str],
                  plot: Plot | None = None) -> dict[str, Any]:
    """Checked, then plots (their file names go into the JSON under ``plot[0]``), the JSON and the Markdown.

    This is where a typed result becomes JSON (a dict's typed values too, the dict kept as the one
    returned); the renderers and plots read that JSON through the result's contract."""
    if isinstance(result, Fig | _M):
        result = result.to_json()
    for k, v in result.items():
        result[k] = plain(v)
    if "kind" in result:
        result["record_version"] = RECORD_VERSION
    # Checked before the first file is written; a plot's file names are filled in after (each
    # model gives that key a default, so the result is checked without it).
    checked(result if plot is None else {k: v for k, v in result.items() if k != plot[0]})
    out.mkdir(parents=True, exist_ok=True)
    if plot is not None:
        key, draw = plot
        result[key] = draw(result, out)
    write_json_atomic(out / f"{stem}.json", result)
    (out / f"{stem}.md").write_text(render(result))
    return result
