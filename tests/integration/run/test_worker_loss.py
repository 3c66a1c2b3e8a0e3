"""Issue 27: a client worker (process or Ray actor) SIGKILLed mid-run is replaced, and the run
ends as an uninterrupted one does.

The driver sees the loss at once (the process's sentinel; the actor's failed task), puts the
items the worker held back on the queue, starts a replacement and finishes: exit 0, every item
recorded exactly once, records equal to an uninterrupted run's (timings aside), and the summary
says what was lost and re-run.  Kill points: as soon as the worker exists (still starting),
mid-run, and near the end.  Before, the driver noticed only at the end and failed with the
dead worker's items missing (or waited forever); a killed Ray actor left 2,985/3,000 items and
exit 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
from fakeserver import FakeServer, script

from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.store import iter_records

MODEL, N = "fake-model", 30
TIMING = {"latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks", "attempts", "retry_waits_s"}
#: When to kill: as soon as a worker exists, or after this many records are on disk.
KILL_POINTS = {"immediately": 0, "mid-run": N // 2, "near-the-end": N - 4}


def results(out: Path) -> dict[str, dict[str, Any]]:
    recs = list(iter_records(out / "records.jsonl"))
    ids = [r["id"] for r in recs]
    assert len(ids) == len(set(ids)), f"recorded twice: {[i for i, n in Counter(ids).items() if n > 1]}"
    return {r["id"]: {k: v for k, v in r.items() if k not in TIMING} for r in recs}


def argv(url: str, out: Path, engine: str) -> list[str]:
    return [sys.executable, "-m", "nlq2sql.cli", "eval", "--endpoint", url, "--model", MODEL, "--limit", str(N),
            "--concurrency", "4", "--workers", "2", "--engine", engine, "--timeout", "30", "--out", str(out)]


def lines(out: Path) -> int:
    try:
        return (out / "records.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def workers_of(engine: str, driver: int) -> list[psutil.Process]:
    """The driver's client workers: its spawned processes, or (Ray) the processes running our actor.

    Only the driver's own descendants (the local Ray it starts -- raylet, its workers -- are
    too): this machine may run other Ray clusters at the same time (other test runs), and an
    actor of theirs, killed here, is no loss this driver can see (it failed, flakily, that way)."""
    mark = "spawn_main" if engine == "local" else "ray::_Worker"
    found = []
    with contextlib.suppress(psutil.NoSuchProcess):
        for c in psutil.Process(driver).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                cmd = " ".join(c.cmdline())
                if (mark in cmd) if engine == "local" else cmd.startswith(mark):
                    found.append(c)
    return found


@pytest.fixture(scope="module")
def env(cache_root: Path, small_warehouse: Path) -> dict[str, str]:
    """The test's small warehouse for every subprocess (module fixtures run before the autouse one)."""
    return dict(os.environ, NLQ2SQL_CACHE_DIR=str(cache_root))


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # Each answer takes 0.3 s: a worker always holds items when it is killed mid-run.
    with FakeServer(tmp_path_factory.mktemp("fake"), script(), model=MODEL, delay_s=0.3) as f:
        yield f


@pytest.fixture(scope="module")
def reference(fake: FakeServer, env: dict[str, str],
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """An uninterrupted run's records (one process)."""
    out = tmp_path_factory.mktemp("ref") / "run"
    cmd = [a for a in argv(fake.url, out, "local") if a not in ("--workers", "--engine", "local")]
    cmd.remove("2")
    res = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    ref = results(out)
    assert len(ref) == N
    return ref


def kill_one_worker(engine: str, point: str, fake: FakeServer, env: dict[str, str],
                    tmp_path: Path) -> tuple[dict[str, Any], Path, int]:
    out = tmp_path / "run"
    proc = subprocess.Popen(argv(fake.url, out, engine), cwd=PROJECT_ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        victim = None
        while victim is None:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "no worker to kill"
            found = workers_of(engine, proc.pid)
            if found and lines(out) >= KILL_POINTS[point]:
                victim = found[0]
            else:
                time.sleep(0.02)
        at = lines(out)
        victim.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        assert "Traceback" not in err
        return json.loads((out / "summary.json").read_text()), out, at
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def check(summary: dict[str, Any], out: Path, at: int, point: str, reference: dict[str, dict[str, Any]]) -> None:
    got = results(out)
    assert got.keys() == reference.keys(), f"lost: {sorted(reference.keys() - got.keys())}"
    for item_id, rec in reference.items():
        assert got[item_id] == rec, item_id
    load = summary["load"]
    assert load["lost_workers"] == 1 and load["restarted_workers"] == 1, load
    (loss,) = load["worker_losses"]
    assert loss["requeued"] == load["requeued_items"] == len(loss["requeued_ids"])
    assert set(loss["requeued_ids"]) <= reference.keys()
    if point == "mid-run":
        assert loss["requeued"] >= 1, loss  # it held items, and they were re-run
    assert summary["n"] == N and summary["throughput"]["items_this_session"] == N
    print(f"\n{point}: killed at {at} records on disk; {loss}")


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_killed_worker_process_is_replaced_and_the_run_completes(point: str, fake: FakeServer, env: dict[str, str],
                                                                   reference: dict[str, dict[str, Any]],
                                                                   tmp_path: Path) -> None:
    summary, out, at = kill_one_worker("local", point, fake, env, tmp_path)
    check(summary, out, at, point, reference)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["immediately", "mid-run"])
def test_a_killed_ray_actor_is_replaced_and_the_run_completes(point: str, fake: FakeServer, env: dict[str, str],
                                                              reference: dict[str, dict[str, Any]],
                                                              tmp_path: Path) -> None:
    pytest.importorskip("ray")
    summary, out, at = kill_one_worker("ray", point, fake, env, tmp_path)
    check(summary, out, at, point, reference)
