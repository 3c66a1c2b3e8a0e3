"""Versioned prompt templates (``prompts/NAME.txt``) → chat messages for one question.

``{{vocabulary}}`` becomes the warehouse's metrics, dimensions, known values and years; ``{{metric:N}}``,
``{{metric_label:N}}``, ``{{dimension:N}}``, ``{{dimension_label:N}}``, ``{{group_by:N}}`` and
``{{year}}`` name its N-th entries and latest year, so one prompt renders for every semantic model.
The question is data in its own user message: it cannot change the enforced schema or the SQL run."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from nlq2sql.errors import InputError
from nlq2sql.inputs import read_text, regular_file
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.semantic import Warehouse
from nlq2sql.semantic.schema_text import schema_text

__all__ = ["PROMPT_DIR", "SLOT", "STYLES", "Prompt", "load_prompt", "render"]

PROMPT_DIR = PROJECT_ROOT / "prompts"

#: Output-style suffixes used by the compact-vs-pretty experiment.
STYLES = {
    "default": "",
    "pretty": "\nWrite the JSON pretty-printed, indented with two spaces, one key per line.",
    "compact": "\nWrite the JSON minified on one line, with no spaces or newlines.",
}


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str
    style: str = "default"

    @property
    def sha256(self) -> str:
        return hashlib.sha256((self.text + STYLES[self.style]).encode()).hexdigest()

    def messages(self, question: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.text + STYLES[self.style]},
                {"role": "user", "content": question}]


SLOT = re.compile(r"\{\{\s*(sql_schema|query_vocabulary|vocabulary|year|metric|metric_label|group_by|dimension"
                  r"|dimension_label)(?::(\d+))?\s*\}\}")


def render(template: str, wh: Warehouse) -> str:
    """Fill a prompt template's slots from a bound warehouse (see the module docstring)."""
    cat = wh.catalog
    metrics, dims = list(cat.metrics.values()), list(cat.dimensions.values())

    def fill(m: re.Match[str]) -> str:
        slot, n = m.group(1), int(m.group(2) or 0)
        if slot == "vocabulary":
            return wh.vocabulary_text()
        if slot == "query_vocabulary":
            return wh.query_vocabulary_text()
        if slot == "sql_schema":  # the direct-SQL answer: tables and columns the layer reads
            return schema_text(cat, wh)
        if slot == "year":
            return wh.years[-1] if wh.years else ""
        if slot.startswith("metric"):
            metric = metrics[n % len(metrics)]
            return metric.name if slot == "metric" else metric.label.lower()
        dim = dims[n % len(dims)]
        if slot == "group_by":
            return dim.group_by
        return dim.name if slot == "dimension" else dim.label.lower()

    return SLOT.sub(fill, template)


def load_prompt(name_or_path: str | Path, style: str, wh: Warehouse | None) -> Prompt:
    """A shipped prompt by name (``baseline``, ``contrastive``) or a text file path, rendered
    for the bound warehouse ``wh``; ``wh=None`` (no default warehouse) reads and checks the file
    only: its slots stay unfilled (a preflight check; never sent)."""
    if style not in STYLES:
        raise InputError(f"unknown prompt style {style!r} (known: {', '.join(STYLES)})")
    path = Path(name_or_path)
    if os.path.lexists(path) and not path.is_file():
        regular_file(path, "prompt")  # a directory, FIFO or dangling link: say so, not "no prompt"
    if not path.is_file():
        path = PROMPT_DIR / f"{name_or_path}.txt"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROMPT_DIR.glob("*.txt")))
        raise InputError(f"no prompt '{name_or_path}' (shipped: {known})")
    text = read_text(path, "prompt").strip()
    if not text:
        raise InputError("prompt file is empty", path=str(path))
    if wh is not None and SLOT.search(text):
        text = render(text, wh)
    return Prompt(name=path.stem, text=text, style=style)
