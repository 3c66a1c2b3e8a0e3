"""The sweep command's modes are decided in the library: a caller gets the CLI's refusals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nlq2sql.errors import InputError
from nlq2sql.load.modes import SweepJob, run_job, validate_job
from nlq2sql.load.sweep import SweepConfig
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.endpoints import ReplicaSpec


def _job(tmp_path: Path, **kw: object) -> SweepJob:
    base = EvalConfig(evalset="dev", out=tmp_path / "out", endpoint="http://127.0.0.1:9/v1", model="m")
    return replace(SweepJob(SweepConfig(base=base)), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw, field", [
    ({"rates": (1.0,), "server_sweep": "max-num-seqs=1"}, "--server-sweep"),
    ({"rates": (), "reanalyse": True}, "--reanalyse"),
    ({"server_sweep": "max-num-seqs=1", "reanalyse": True}, "--reanalyse"),
    ({"reanalyse": True}, "--out"),
])
def test_impossible_combinations_name_the_option(tmp_path: Path, kw: dict, field: str) -> None:
    with pytest.raises(InputError) as exc:
        run_job(_job(tmp_path, **kw))
    assert exc.value.field == field
    assert not (tmp_path / "out").exists()  # refused before anything was touched


def test_a_fleet_is_a_closed_loop_sweep_only(tmp_path: Path) -> None:
    job = _job(tmp_path)
    fleet = replace(job, sweep=job.sweep.but(base=replace(job.sweep.base,
                                                          replicas=(ReplicaSpec("http://127.0.0.1:8/v1"),))))
    validate_job(fleet)  # alone it is fine
    for kw in ({"rates": (1.0,)}, {"server_sweep": "max-num-seqs=1"}, {"reanalyse": True}):
        with pytest.raises(InputError) as exc:
            validate_job(replace(fleet, **kw))  # type: ignore[arg-type]
        assert exc.value.field == "--endpoint"


@pytest.mark.parametrize("kw, sweep_kw, field", [
    ({"server_sweep": "max-num-seqs=1"}, {}, "--server-sweep"),
    ({"reanalyse": True}, {}, "--reanalyse"),
    ({}, {"force": True}, "--force"),
])
def test_resume_is_for_closed_loop_and_rate_sweeps(tmp_path: Path, kw: dict, sweep_kw: dict, field: str) -> None:
    job = _job(tmp_path, **kw)
    job = replace(job, sweep=job.sweep.but(resume=True, **sweep_kw))
    with pytest.raises(InputError) as exc:
        run_job(job)
    assert exc.value.field == field
    assert not (tmp_path / "out").exists()
