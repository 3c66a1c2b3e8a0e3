"""Versioned prompt files (``prompts/NAME.txt``) → chat messages for one question.

The question is passed as data in its own user message; nothing in it can change the
schema the server enforces or the SQL that is executed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .paths import PROJECT_ROOT

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


def load_prompt(name_or_path: str | Path, style: str = "default") -> Prompt:
    """A shipped prompt by name (``baseline``, ``contrastive``) or a text file path."""
    if style not in STYLES:
        raise InputError(f"unknown prompt style {style!r} (known: {', '.join(STYLES)})")
    path = Path(name_or_path)
    if not path.is_file():
        path = PROMPT_DIR / f"{name_or_path}.txt"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in PROMPT_DIR.glob("*.txt")))
        raise InputError(f"no prompt '{name_or_path}' (shipped: {known})")
    text = path.read_text(encoding="utf-8").strip()
    if not text:
        raise InputError("prompt file is empty", path=str(path))
    return Prompt(name=path.stem, text=text, style=style)
