"""nlq2sql backends, offline: one local server per backend (the fake server stands in for vLLM and
logs vLLM's start-up line for the backend it was given); a backend whose server cannot start is
reported with its error and the others still run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fakeserver import free_port

from nlq2sql.experiments import backends as exp
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run.config import EvalConfig, LoadShape, LocalServerSettings


def test_each_backend_on_its_own_server_and_a_failed_start_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "fakemodel"
    model.mkdir()
    (model / "config.json").write_text("{}")
    wrapper = tmp_path / "fake-vllm-python"
    wrapper.write_text("#!/bin/sh\n"  # like vLLM when a backend's library is missing: the engine dies
                       'case "$*" in *outlines*) echo "ERROR EngineCore failed to start: no outlines"; exit 1;; esac\n'
                       f"exec {sys.executable} {PROJECT_ROOT / 'tests' / 'fakeserver.py'} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("NLQ2SQL_VLLM_PYTHON", str(wrapper))
    base = EvalConfig(evalset="heldout", out=tmp_path / "b", model=str(model), limit=4, concurrency=1,
                      timeout_s=10.0, server=LocalServerSettings(port=free_port()),
                      load=LoadShape(metrics_interval_s=0.05))
    result = exp.run_backends(exp.BackendsConfig(base, ("xgrammar", "outlines", "guidance"), compact=False))
    rows = {r.backend: r for r in result.backends}
    failed = rows["outlines"]
    assert isinstance(failed, exp.BackendError)
    assert "EngineCore failed to start" in failed.error and not (tmp_path / "b" / "outlines" /
                                                                 "records.jsonl").exists()
    for name in ("xgrammar", "guidance"):
        row = rows[name]
        assert isinstance(row, exp.BackendRow), row
        assert row.effective_backend == name and row.whitespace_free is False and row.canary is True
        assert row.n == 4 and row.json_schema_valid.n == 4  # the fake's answers fit the intent schema
        assert row.json_schema_valid.k == 4 and row.first_request_compile_s is not None
    md = exp.render_markdown(result)
    assert "| xgrammar → xgrammar | 4 | passed |" in md and "**outlines** did not run" in md
    exp.write_result(tmp_path / "b", result)
    again = exp.summarise_backends(tmp_path / "b", ("xgrammar", "outlines", "guidance"),
                                   {"outlines": failed.error})
    assert again == result  # the figures come from the records


def test_compact_needs_a_backend_that_can_drop_whitespace(tmp_path: Path) -> None:
    base = EvalConfig(evalset="heldout", out=tmp_path / "b", server=LocalServerSettings(port=free_port()))
    result = exp.run_backends(exp.BackendsConfig(base, ("lm-format-enforcer",), compact=True))
    row = result.backends[0]
    assert isinstance(row, exp.BackendError) and "cannot drop whitespace" in row.error
