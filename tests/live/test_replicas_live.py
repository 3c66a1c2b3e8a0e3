"""Two real vLLM replicas behind one run: both used, answers identical, one killed mid-run.

The session's shared server is replica r0; a second one with the same settings is started
here (``LocalFleet``, the code ``nlq2sql serve --replicas N`` uses) and killed by the last test.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from nlq2sql.experiments import loadcheck
from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.endpoints import ReplicaSpec
from nlq2sql.run.live import run_eval
from nlq2sql.run.server import LocalFleet, LocalServer, ServerConfig, free_port
from nlq2sql.transport.client import Sampling


@pytest.fixture(scope="module")
def second(vllm_server: LocalServer) -> Iterator[LocalServer]:
    fleet = LocalFleet(ServerConfig(model=vllm_server.config.model, port=free_port(), startup_timeout_s=900), 1)
    fleet.start()
    try:
        yield fleet.servers[0]
    finally:
        fleet.stop()


def cfg(a: LocalServer, b: LocalServer, out: Path, **kw: object) -> EvalConfig:
    return EvalConfig(evalset="heldout", out=out, endpoint=a.url, model=a.model_name,
                      replicas=(ReplicaSpec(b.url, b.model_name),), sampling=Sampling(max_tokens=64),
                      timeout_s=300.0, **kw)  # type: ignore[arg-type]


def test_two_replicas_serve_one_run_and_answer_identically(vllm_server: LocalServer, second: LocalServer,
                                                          tmp_path: Path) -> None:
    summary = run_eval(cfg(vllm_server, second, tmp_path / "run", limit=8, concurrency=4)).to_json()
    recs = list(iter_records(tmp_path / "run" / "records.jsonl"))
    assert summary["outcomes"] == {"ok": 8} and len({r["id"] for r in recs}) == 8
    assert set(Counter(r["replica"] for r in recs)) == {"r0", "r1"}
    fleet = {r["label"]: r for r in summary["fleet"]["replicas"]}
    assert fleet["r0"]["answered"] + fleet["r1"]["answered"] == 8
    # Each replica's own /metrics was sampled.
    assert all(m["observed"] for m in summary["fleet"]["server_metrics"].values())
    # Every item to both replicas: the same question gets the same bytes from each.
    result = loadcheck.run_across_replicas(loadcheck.LoadCheckConfig(
        cfg(vllm_server, second, tmp_path / "lc", limit=4), levels=(1,), repeats=1, across_replicas=True))
    print(loadcheck.render_markdown(result))
    across = result.across_replicas
    assert across is not None and across["c1"].runs == 2
    assert across["c1"].identical_items == 4, result.divergent


def test_a_replica_killed_mid_run_loses_nothing(vllm_server: LocalServer, second: LocalServer,
                                               tmp_path: Path) -> None:
    out = tmp_path / "kill"
    n = 16
    records = out / "records.jsonl"

    seen: dict[str, object] = {}  # what the killer did, for the message if it did not kill

    def kill_when_it_has_answered() -> None:
        deadline = time.monotonic() + 600
        try:
            while time.monotonic() < deadline:
                if records.exists() and any(r.get("replica") == "r1" for r in iter_records(records)):
                    assert second.pid is not None
                    os.killpg(second.pid, signal.SIGKILL)
                    seen["killed_at"] = time.monotonic()
                    return
                time.sleep(0.05)
        except BaseException as exc:  # a thread's exception is otherwise lost
            seen["error"] = repr(exc)

    killer = threading.Thread(target=kill_when_it_has_answered, daemon=True)
    killer.start()
    # Round-robin, so r1 is sent half the items whatever its speed. Under least-inflight a slow
    # (cold) r1 once held two requests while r0 answered the other 14 (CI, 2026-12-05): its
    # answers came at the run's end, the kill after it, and no request ever met the dead r1.
    summary = run_eval(cfg(vllm_server, second, out, limit=n, concurrency=4, retry_budget=0.0,
                           routing="round-robin")).to_json()
    seen["run_ended_at"] = time.monotonic()
    killer.join(timeout=5)
    if second.proc is not None and "killed_at" in seen:
        second.proc.wait(timeout=30)  # SIGKILL is delivered asynchronously: reap before looking
    by_replica = Counter(r.get("replica") for r in iter_records(records)) if records.exists() else {}
    assert second.proc is not None and second.proc.poll() is not None, (seen, by_replica)  # really killed
    recs = list(iter_records(records))
    assert sorted(r["id"] for r in recs) == sorted({r["id"] for r in recs}) and len(recs) == n
    assert summary["outcomes"] == {"ok": n}, summary["outcomes"]
    r1 = {r["label"]: r for r in summary["fleet"]["replicas"]}["r1"]
    killed_at, ended_at = seen.get("killed_at"), seen["run_ended_at"]
    assert isinstance(killed_at, float) and isinstance(ended_at, float) and killed_at < ended_at, (
        seen, by_replica)  # killed mid-run, not after
    assert r1["answered"] >= 1 and r1["first_out_after_s"] is not None, (r1, seen)  # it left the rotation
    # Only a successful probe chat brings a replica back. Once (CI, 2026-12-03) one came back 13 s
    # after its process group was SIGKILLed (a chat answered on its port: not understood yet, see
    # the closing note); the pool may then rightly count it in rotation, so the test asks that any
    # return was a probe's, after the replica went out.
    events = r1["events"]
    assert events[0]["event"] == "out", events
    if r1["in_rotation_at_end"]:
        assert events[-1]["event"] == "back" and events[-1]["reason"] == "probe chat ok", events
    print(summary["fleet"]["replicas"])
