"""The load tools' typed results: written checked and versioned, read back typed, old ones load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakeserver import FakeServer
from repo_paths import ROOT
from snapshot import assert_same_json
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import RecordError
from nlq2sql.load.output import write_outputs
from nlq2sql.load.results import FleetSweepResult, SweepResult, checked, load_result
from nlq2sql.load.tune_results import TuneResult
from nlq2sql.records.store import RECORD_VERSION

runner = CliRunner()


def test_committed_sweep_from_before_versioning_loads_typed() -> None:
    res = load_result(ROOT / "reports" / "sweep-cpu-smollm2" / "sweep.json")
    assert isinstance(res, SweepResult) and res.record_version is None
    assert [lv.concurrency for lv in res.levels] == res.config.levels
    assert all(lv.latency_s.n == lv.ok for lv in res.levels)
    assert res.analysis.knee.level in res.config.levels


def test_committed_tune_reports_load_as_their_declared_model() -> None:
    for p in sorted((ROOT / "reports" / "tune").rglob("tune.json")):
        typed = load_result(p)
        assert isinstance(typed, TuneResult) and typed.record_version == RECORD_VERSION, p
        assert_same_json(typed.to_json(), json.loads(p.read_text()), p)  # every key declared, every value as written


def test_fleet_sweep_writes_typed_versioned_results(tmp_path: Path) -> None:
    with FakeServer(tmp_path / "a", model="fake-model") as a, FakeServer(tmp_path / "b", model="fake-model") as b:
        out = tmp_path / "fleet"
        res = runner.invoke(app, ["sweep", "--endpoint", a.url, "--endpoint", b.url, "--model", "fake-model",
                                  "--evalset", "dev", "--concurrency", "1,2", "--requests", "4", "--warmup", "0",
                                  "--out", str(out)])
        assert res.exit_code == 0, res.output
    fleet = load_result(out / "fleet-sweep.json")
    assert isinstance(fleet, FleetSweepResult) and fleet.record_version == RECORD_VERSION
    assert set(fleet.rows) == {"whole", "r0", "r1"} and [r.label for r in fleet.replicas] == ["r0", "r1"]
    whole = load_result(out / "whole" / "sweep.json")
    assert whole.record_version == RECORD_VERSION and all(lv.n == 4 == lv.ok for lv in whole.levels)
    assert fleet.rows["whole"].peak_req_per_s == max(lv.req_per_s for lv in whole.levels)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_an_undeclared_key_fails_before_anything_is_written(tmp_path: Path) -> None:
    good = json.loads((ROOT / "reports" / "sweep-cpu-smollm2" / "sweep.json").read_text())
    out = tmp_path / "out"
    # The output layer takes the typed result; the JSON it makes is checked against the kind's contract.
    with pytest.raises(AssertionError, match="SweepResult"):
        checked(dict(good, surprise=1))
    with pytest.raises(AssertionError, match="req_per_s"):
        checked(dict(good, levels=[dict(good["levels"][0], req_per_s="fast")]))
    typed = SweepResult.from_json(good)
    typed.notes.append(42)  # type: ignore[arg-type]  # a list mutated in place is not re-validated
    with pytest.raises(AssertionError, match="notes"):
        write_outputs(out, "sweep", typed, lambda r: "md", ("plots", lambda r, o: {}))
    assert not out.exists()
    written = write_outputs(out, "sweep", SweepResult.from_json(good), lambda r: f"md {r.model}")
    assert json.loads((out / "sweep.json").read_text())["record_version"] == RECORD_VERSION == written.record_version
    assert (out / "sweep.md").read_text() == f"md {good['model']}"


def test_a_bad_result_file_names_its_field(tmp_path: Path) -> None:
    good = json.loads((ROOT / "reports" / "sweep-cpu-smollm2" / "sweep.json").read_text())
    p = tmp_path / "sweep.json"
    p.write_text(json.dumps(dict(good, config=dict(good["config"], requests="many"))))
    with pytest.raises(RecordError) as exc:
        load_result(p)
    assert exc.value.field == "config.requests" and exc.value.path == str(p)
    p.write_text(json.dumps(good))
    with pytest.raises(RecordError, match="not a fleet-sweep result") as exc:
        load_result(p, FleetSweepResult)  # a reader that wants one kind names it
    assert exc.value.field == "kind"
    p.write_text(json.dumps({"kind": "mystery"}))
    with pytest.raises(RecordError, match="not a load result"):
        load_result(p)
