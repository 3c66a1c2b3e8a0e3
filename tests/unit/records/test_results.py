"""The run results contract (``nlq2sql.records.results``): declared keys, a version, old runs load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from snapshot import assert_same_json

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.errors import RecordError
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.results import Manifest, Summary
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import RECORD_VERSION

COMMITTED = sorted((PROJECT_ROOT / "reports").rglob("summary.json"))


def test_there_are_committed_runs_to_check() -> None:
    assert len(COMMITTED) >= 20


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(PROJECT_ROOT / "reports")))
def test_every_committed_run_loads(path: Path) -> None:
    """Runs recorded by earlier versions (no summary hash, no harness figures…) still load."""
    run = RunDir(path.parent)
    s, m = run.summary(), run.manifest(REGISTRY.manifest_model())
    assert s.record_version == m.record_version == RECORD_VERSION
    assert s.n == s.raw_accuracy.n and 0 <= s.final_accuracy.k <= s.n
    assert m.n_items >= s.n or m.limit is not None or m.kind != "eval"
    # the typed summary is the file as parsed: every value, ints and floats, absent keys absent
    assert_same_json(s.to_json(), json.loads(path.read_text(encoding="utf-8")), path)


def test_an_undeclared_key_fails_the_write_not_a_reader() -> None:
    """Summaries and manifests are built as their models: an undeclared or missing key is refused
    where the writer builds it, not found by a reader later."""
    s = json.loads(COMMITTED[0].read_text())
    assert Summary.model_validate(s).to_json() == s
    with pytest.raises(ValidationError, match="surprise"):
        Summary.model_validate(dict(s, surprise=1))
    with pytest.raises(ValidationError, match="harness_version"):
        Manifest(kind="eval")  # type: ignore[call-arg]


def test_a_bad_file_names_file_and_field(tmp_path: Path) -> None:
    s = json.loads(COMMITTED[0].read_text())
    s["raw_accuracy"]["k"] = "many"
    (tmp_path / "summary.json").write_text(json.dumps(s))
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(RecordError, match=r"summary.json: field 'raw_accuracy.k'"):
        RunDir(tmp_path).summary()
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(RecordError, match="manifest.json:1: malformed JSON"):
        RunDir(tmp_path).manifest()
