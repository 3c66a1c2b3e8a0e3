"""Issue 27: ``--ray-address`` to a real ``ray start --head`` cluster, and the addresses refused.

Ray 2.60 turns token authentication on for the clusters it starts, and a driver given an
explicit address sent no token: it retried for 30 s, failed with ``InvalidAuthToken`` and left
an output folder holding only ``manifest.json``.  ``ray://`` (Ray Client) gave a 23-frame
traceback.  Now the token is sent when one is available, and what cannot work is refused in
one line, exit 2, before ``--out`` exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeserver import FakeServer, free_port, script

from nlq2sql.paths import PROJECT_ROOT

MODEL = "fake-model"


def eval_cmd(url: str, out: Path, address: str) -> list[str]:
    return [sys.executable, "-m", "nlq2sql.cli", "eval", "--endpoint", url, "--model", MODEL, "--limit", "8",
            "--concurrency", "2", "--workers", "2", "--engine", "ray", "--ray-address", address, "--out", str(out)]


@pytest.mark.parametrize(("address", "says"), [
    ("ray://127.0.0.1:10001", "ray:// (Ray Client) is not supported"),
    ("127.0.0.1:9", "nothing answers at 127.0.0.1:9"),
    ("head-without-port", "expected HOST:PORT"),
])
def test_addresses_that_cannot_work_are_refused_in_one_line(address: str, says: str, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "run"
    res = subprocess.run(eval_cmd("http://127.0.0.1:9/v1", out, address), cwd=PROJECT_ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert says in res.stderr and "Traceback" not in res.stderr
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("error:")] == [
        next(ln for ln in res.stderr.splitlines() if says in ln)]
    assert not out.exists()


@pytest.fixture
def head() -> Iterator[str]:
    """A real ``ray start --head`` on loopback (2 CPUs), stopped with its process group."""
    pytest.importorskip("ray")
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    proc = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
                             f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats",
                             f"--ray-client-server-port={free_port()}", f"--temp-dir={temp}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, "ray start --head exited"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, "the Ray head did not come up"
            time.sleep(0.5)
        time.sleep(2)  # the raylet registers after the GCS listens
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_eval_joins_a_ray_start_head_cluster(head: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with FakeServer(tmp_path / "fake", script(), model=MODEL) as f:
        res = subprocess.run(eval_cmd(f.url, out, head), cwd=PROJECT_ROOT, capture_output=True, text=True,
                             timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "InvalidAuthToken" not in res.stderr
    ids = [json.loads(x)["id"] for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 8
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine"] == {"name": "ray", "workers": 2, "ray_address": head}
