"""Typed load results, the same files: every load mode's ``STEM.json``/``STEM.md`` and level stats,
rendered from committed runs (``tests/load_cases.py``), are their per-case snapshots under
``tests/snapshots/test_load_golden/``: JSON compared as parsed, the rendered Markdown as text (the
text is the product); ``pytest --snapshot-update`` rewrites them, see ``docs/testing.md``."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from load_cases import COMMIT, cases
from snapshot import Snapshots


def as_case(name: str, text: str) -> tuple[str, Any]:
    """The snapshot case of one produced text: Markdown as text, the health loop's ``repr`` and
    every other file as the value it holds."""
    if name.endswith(".md"):
        return name, text
    if name.endswith(":md"):
        return name.removesuffix(":md") + ":report.md", text
    if name.endswith(":health-loop"):
        return name, ast.literal_eval(text)
    return name, json.loads(text)


def test_every_load_result_is_its_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           snapshot: Snapshots) -> None:
    names = []
    for name, text in cases(tmp_path, COMMIT, monkeypatch):
        names.append(name)
        snapshot.check(*as_case(name, text))
    snapshot.assert_complete()
    assert len(names) == len(set(names)) > 600 and any(n.endswith(":rate-sweep-slo.json") for n in names)
    assert sum(n.endswith(("md", ".md")) for n in names) > 80
