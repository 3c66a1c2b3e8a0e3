"""Ctrl-C against a real vLLM: in-flight requests are cancelled *on the server*.

``nlq2sql eval`` runs long generations (``--structured none --max-tokens 400``) at
concurrency 8; once the server's own ``/metrics`` shows requests running, the harness gets
SIGINT.  It must exit 130 with its finished records whole on disk, and the server's
``vllm:num_requests_running`` must fall to 0 within seconds: closing the streams made
vLLM abort the requests, rather than generating 400 tokens for nobody.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run.server import LocalServer
from nlq2sql.transport.server_metrics import parse_metrics

CANCEL_DEADLINE_S = 5.0


def _gauges(server: LocalServer) -> dict[str, float]:
    with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=5) as resp:
        return parse_metrics(resp.read().decode())


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_sigint_cancels_in_flight_requests_on_vllm(vllm_server: LocalServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    records = out / "records.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nlq2sql.cli", "eval", "--evalset", "heldout",
         "--endpoint", vllm_server.url, "--model", vllm_server.model_name,
         "--concurrency", "8", "--max-tokens", "400", "--structured", "none",
         "--limit", "40", "--out", str(out), "--max-failure-rate", "1"],
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        # Wait for the server to be busy with our requests (and, if it comes soon, a record).
        deadline = time.monotonic() + 240
        busy_since = None
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the server never showed running requests"
            running = _gauges(vllm_server).get("running", 0.0)
            if running >= 1 and busy_since is None:
                busy_since = time.monotonic()
            if running >= 1 and (_lines(records) >= 1 or time.monotonic() - busy_since > 60):
                break
            time.sleep(0.1)
        before = _lines(records)
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        # Measure how long the server keeps working on requests nobody waits for.
        zero_at = None
        while time.monotonic() - t0 < 60:
            g = _gauges(vllm_server)
            if g.get("running", 0.0) == 0 and g.get("waiting", 0.0) == 0:
                zero_at = time.monotonic()
                break
            time.sleep(0.05)
        _, stderr = proc.communicate(timeout=60)
        exited = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    took = None if zero_at is None else zero_at - t0
    print(f"\nSIGINT with {int(running)} requests running and {before} records on disk: "
          f"num_requests_running -> 0 in {took if took is None else round(took, 2)} s; "
          f"harness exited {proc.returncode} after {exited:.2f} s")
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    assert took is not None and took <= CANCEL_DEADLINE_S, f"still running after {took} s"
    time.sleep(1.0)
    assert _gauges(vllm_server).get("running", 0.0) == 0  # and it stays idle
    # Finished records are whole and unique; nothing was written for cancelled items.
    data = records.read_bytes() if records.exists() else b""
    assert data == b"" or data.endswith(b"\n")
    recs = [json.loads(line) for line in data.splitlines()]
    assert len(recs) >= before and len({r["id"] for r in recs}) == len(recs) < 40
    assert all(r["outcome"] == "ok" for r in recs)
