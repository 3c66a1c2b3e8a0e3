"""Where the tests find the repository: its root and the tests' fixtures (test modules live at
several depths under ``tests/``, so none computes these from its own ``__file__``)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["FIXTURES", "ROOT", "TESTS"]

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
