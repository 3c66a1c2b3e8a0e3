"""Typed load results, the same files: every load mode's ``STEM.json``/``STEM.md`` and level stats,
rendered from committed runs (``tests/load_cases.py``), are byte for byte those pinned in
``tests/fixtures/load-golden.json``, captured before the results were typed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from load_cases import GOLDEN, cases


def test_every_load_result_is_byte_identical_to_the_golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    golden = json.loads(GOLDEN.read_text())
    pinned = golden["sha256"]
    seen: list[str] = []
    for name, text in cases(tmp_path, golden["commit"], monkeypatch):
        seen.append(name)
        assert name in pinned, f"{name}: not in the golden"
        assert hashlib.sha256(text.encode()).hexdigest() == pinned[name], name
    assert sorted(seen) == sorted(pinned), "a pinned case is no longer produced"
    assert len(seen) > 600 and any(n.endswith(":rate-sweep-slo.json") for n in seen)
