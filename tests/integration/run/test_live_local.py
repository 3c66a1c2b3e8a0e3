"""A run with no endpoint starts its local server the one way (``live.bound_endpoint``), with
``EvalConfig.server``'s settings; the fake server stands in for vLLM (``NLQ2SQL_VLLM_PYTHON``)."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
from fakeserver import free_port

from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run import live
from nlq2sql.run.config import EvalConfig, LoadShape, LocalServerSettings


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_run_without_endpoint_starts_a_server_with_its_settings(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "fakemodel"
    model.mkdir()
    (model / "config.json").write_text("{}")
    pid_file = tmp_path / "server.pid"
    wrapper = tmp_path / "fake-vllm-python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {PROJECT_ROOT / 'tests' / 'fakeserver.py'}"
                       f" --pid-file {pid_file} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("NLQ2SQL_VLLM_PYTHON", str(wrapper))
    port = free_port()
    cfg = EvalConfig(evalset="heldout", out=tmp_path / "run", model=str(model), limit=3, concurrency=2,
                     timeout_s=10.0, server=LocalServerSettings(compact=False, max_num_seqs=3, port=port),
                     load=LoadShape(metrics_interval_s=0.05))
    interrupts = live.Interrupts()  # not installed: only its hooks are looked at
    summary = live._run_eval(cfg, None, interrupts).to_json()
    assert summary["n"] == 3
    manifest = json.loads((cfg.out / "manifest.json").read_text())
    assert manifest["endpoint"] == "local" and manifest["server_started_by_us"] is True
    args = manifest["server_args"]
    assert args[args.index("--port") + 1] == str(port) and args[args.index("--max-num-seqs") + 1] == "3"
    assert "--structured-outputs-config" not in args  # compact=False
    assert args[0] == "fake-vllm-python" and args[args.index("--model") + 1] == "fakemodel"  # names, no machine path
    assert str(tmp_path) not in json.dumps(manifest)
    assert manifest["load"] == {"rate": None, "duration_s": None, "arrival_seed": None}
    # A second Ctrl-C would have SIGKILLed the server's process group; the run stopped it.
    pid = int(pid_file.read_text())
    kill = interrupts.kill_server
    assert isinstance(kill, functools.partial) and kill.func is live._kill_group and kill.args[0].pid == pid
    assert not _alive(pid)


def test_a_bound_endpoint_starts_nothing() -> None:
    cfg = EvalConfig(endpoint="http://127.0.0.1:9/v1", server=LocalServerSettings(max_num_seqs=2))
    seen: list[object] = []
    with live.bound_endpoint(cfg, on_server=seen.append) as (bound, info):
        assert bound is cfg and info.to_json() == {"started_by_us": False, "endpoint": cfg.endpoint}
    assert seen == []
