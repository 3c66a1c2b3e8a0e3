"""LocalServer start-up failure paths, with a stand-in process instead of vLLM."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nlq2sql.errors import ServerError
from nlq2sql.run.server import LocalServer, ServerConfig, free_port


def test_engine_failure_is_reported_at_once_even_if_the_api_process_lingers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "fakemodel"
    model.mkdir()
    (model / "config.json").write_text("{}")
    wrapper = tmp_path / "fake-vllm-python"
    # Like vLLM when its engine dies on start-up: log the failure, keep the API process alive.
    wrapper.write_text("#!/bin/sh\necho 'ERROR [core.py:1510] EngineCore failed to start.'\nexec sleep 300\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("NLQ2SQL_VLLM_PYTHON", str(wrapper))
    srv = LocalServer(ServerConfig(model=str(model), port=free_port(), startup_timeout_s=120))
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="engine failed to start"):
        srv.start()
    assert time.monotonic() - t0 < 30
    assert srv.proc is None or srv.proc.poll() is not None  # stopped, not left behind


def test_compile_cache_disabled_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_DISABLE_COMPILE_CACHE", raising=False)
    env = LocalServer(ServerConfig(model="x", port=free_port())).build_env()
    assert env["VLLM_DISABLE_COMPILE_CACHE"] == "1"
