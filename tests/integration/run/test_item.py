"""The in-process item runner reuses what the run loaded for its manifest (nlq2sql.run.item)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import nlq2sql.run.item as item
from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval


def test_in_process_runs_load_warehouse_prompt_guardrails_and_bank_once(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from fakeserver import FakeServer, script

    def loaded_again(*_: Any, **__: Any) -> Any:
        raise AssertionError("loaded a second time by the item runner")

    for name in ("open_warehouse", "load_guardrails", "load_prompt", "load_conditions"):
        monkeypatch.setattr(item, name, loaded_again)
    with FakeServer(tmp_path / "fake", script(), model="fake-model") as fake:
        summary = run_eval(EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint=fake.url, model="fake-model",
                                      limit=3, concurrency=2,
                                      conditions=REGISTRY.from_options(examples=2, link_values="both"),
                                      load=LoadShape(metrics_interval_s=0.05))).to_json()
    assert summary["n"] == 3 and summary["outcomes"] == {"ok": 3}


def test_gold_answers_are_computed_before_the_clock_starts(tmp_path: Path, memo_at_start: set[object]) -> None:
    """Gold rows are the warehouse's cost, not the endpoint's: all are in the memo before the first
    request is sent (``start``), and none is executed again while items are scored."""
    from fakeserver import FakeServer, script

    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.evalset import load_evalset
    from nlq2sql.stages.intent import canonicalise
    from nlq2sql.stages.sqlbuild import build_sql

    wh = open_warehouse("retail")
    golds = {build_sql(canonicalise(c.gold), wh.catalog) for c in load_evalset("heldout", wh).cases[:6]}
    with FakeServer(tmp_path / "fake", script(), model="fake-model") as fake:
        summary = run_eval(EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint=fake.url, model="fake-model",
                                      limit=6, concurrency=2, load=LoadShape(metrics_interval_s=0.05))).to_json()
    assert summary["n"] == 6
    assert memo_at_start == golds
