"""Issue 27: replicas that are up but sick.  Each replica's circuit breaker (``nlq2sql.run.pool``):
consecutive failures or timeouts open it, a half-open probe is a real small chat request
(not ``/models``) on an exponential back-off, and only a probe chat that succeeds closes it.
And the accounting across failover: every attempt on every replica is in the record.

Against the fault suite's fake server (``tests/fakeserver.py``): a replica that hangs, one
that answers ``/models`` but fails every chat request, one that is slow but correct.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import fakeserver
import pytest
from fakeserver import FakeServer, script
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.records.store import iter_records
from nlq2sql.run import pool, pool_probe
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.endpoints import ReplicaSpec
from nlq2sql.run.live import run_eval
from nlq2sql.run.pool import FAILURE_THRESHOLD, PROBE_BACKOFF_MAX_S, Replica
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.transport.client import EndpointConfig

MODEL = "fake-model"
IDS = [c.id for c in load_evalset("heldout", retail_wh()).cases]


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    started: list[FakeServer] = []
    yield started
    for f in started:
        f.kill()


def fake(fakes: list[FakeServer], tmp_path: Path, spec: dict[str, Any] | None = None, **kw: Any) -> FakeServer:
    f = FakeServer(tmp_path / "fake", spec or script(), model=MODEL, **kw)
    fakes.append(f)
    return f.start()


def run(tmp_path: Path, urls: list[str], n: int, **kw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    out = tmp_path / "run"
    cfg = EvalConfig(evalset="heldout", out=out, endpoint=urls[0], replicas=tuple(ReplicaSpec(u) for u in urls[1:]),
                     model=MODEL, limit=n, load=LoadShape(metrics_interval_s=0.2), **kw)
    summary = run_eval(cfg).to_json()
    recs = list(iter_records(out / "records.jsonl"))
    assert sorted(r["id"] for r in recs) == sorted(IDS[:n])  # never an item lost or counted twice
    return summary, recs


def assert_accounting(recs: list[dict[str, Any]], summary: dict[str, Any], servers: dict[str, FakeServer]) -> None:
    """Every request an item made, on every replica, is in its record, and the counts add up."""
    for r in recs:
        log = r["attempt_log"]
        assert r["attempts"] == len(log), r
        assert log[-1]["replica"] == r["replica"] and log[-1]["outcome"] == r["outcome"], r
        # The replicas it failed over from, in order: where each earlier run of attempts was.
        runs = [a["replica"] for i, a in enumerate(log) if i == 0 or log[i - 1]["replica"] != a["replica"]]
        assert runs == [*r["failed_over_from"], r["replica"]], r
        # Retries (each charged to the budget, one wait each) are the attempts that were neither
        # the item's first nor a failover's first.
        assert len(r["retry_waits_s"]) == len(log) - len(runs), r
        assert [a["at_s"] for a in log] == sorted(a["at_s"] for a in log) and log[0]["at_s"] < 0.05
        # End to end: from its first request to its last one's end, covering every attempt.
        assert r["latency_e2e_s"] >= log[-1]["at_s"] + log[-1]["took_s"] - 0.01, r
        if r["latency_s"] is not None:
            assert r["latency_e2e_s"] >= r["latency_s"] - 0.01
    # The servers saw exactly the attempts the records hold (probes apart), replica by replica.
    per = Counter(a["replica"] for r in recs for a in r["attempt_log"])
    for label, server in servers.items():
        assert len(server.chat_requests()) == per[label], (label, per)
    assert summary["retries_used"] == sum(len(r["retry_waits_s"]) for r in recs)
    assert summary["retries_used"] <= summary["retry_budget"]["total"]


def events(summary: dict[str, Any], label: str) -> dict[str, Any]:
    return {r["label"]: r for r in summary["fleet"]["replicas"]}[label]


def test_fake_server_marks_the_pools_probe() -> None:
    assert fakeserver.PROBE_QUESTION == pool_probe.PROBE_QUESTION


def test_a_hanging_replica_is_failed_over_and_nothing_is_lost(tmp_path: Path, fakes: list[FakeServer]) -> None:
    """It answers /models, but every chat request hangs: before, timeouts were retried on it
    (30 of 60 items lost under round-robin, exit 1); now each times out once, fails over, exit 0."""
    a = fake(fakes, tmp_path, delay_s=0.05)
    b = fake(fakes, tmp_path, script(default={"kind": "hang", "seconds": 60}))
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["eval", "--endpoint", a.url, "--endpoint", b.url, "--model", MODEL,
                                   "--limit", "30", "--routing", "round-robin", "--concurrency", "4",
                                   "--timeout", "1.5", "--out", str(out)])
    assert res.exit_code == 0, res.output
    from nlq2sql.records.store import read_json

    summary = read_json(out / "summary.json")
    recs = list(iter_records(out / "records.jsonl"))
    assert sorted(r["id"] for r in recs) == sorted(IDS[:30])
    assert summary["outcomes"] == {"ok": 30}
    assert all(r["replica"] == "r0" for r in recs)
    moved = [r for r in recs if r["failed_over_from"]]
    assert moved and all(r["failed_over_from"] == ["r1"] for r in moved)
    for r in moved:  # one timeout on the hung replica (not retried there), then the answer
        assert [(x["replica"], x["outcome"]) for x in r["attempt_log"]] == [("r1", "timeout"), ("r0", "ok")]
        assert r["attempts"] == 2 and r["retry_waits_s"] == []
        assert r["attempt_log"][0]["took_s"] >= 1.4 and r["latency_e2e_s"] >= 1.4 > r["latency_s"]
    # The breaker opened after FAILURE_THRESHOLD timeouts in a row; the hung replica never came back.
    r1 = events(summary, "r1")
    assert [e["event"] for e in r1["events"]] == ["out"] and r1["in_rotation_at_end"] is False
    assert "timeout" in r1["events"][0]["reason"]
    assert FAILURE_THRESHOLD <= len(b.chat_requests()) == len(moved) <= FAILURE_THRESHOLD + 4
    assert_accounting(recs, summary, {"r0": a, "r1": b})


@pytest.mark.parametrize("fault", ["500", "reset"])
def test_a_replica_failing_every_chat_leaves_and_stays_out(fault: str, tmp_path: Path,
                                                           fakes: list[FakeServer]) -> None:
    """/models is fine, every chat request is an HTTP 500 (or a reset mid-stream): before, the
    /models check took it back within a second (11 flaps in 15 s); now its probes are chats,
    which fail, so it stays out."""
    a = fake(fakes, tmp_path, delay_s=0.2)
    b = fake(fakes, tmp_path, script(default=fault))
    t0 = time.monotonic()
    summary, recs = run(tmp_path, [a.url, b.url], 40, routing="round-robin", concurrency=2, timeout_s=10.0,
                        retry_budget=0.2)
    wall = time.monotonic() - t0
    assert summary["outcomes"] == {"ok": 40}
    r1 = events(summary, "r1")
    assert [e["event"] for e in r1["events"]] == ["out"], r1["events"]  # out once, never back: no flap
    reason = r1["events"][0]["reason"]
    assert r1["in_rotation_at_end"] is False
    assert "http_5xx" in reason if fault == "500" else reason.startswith(("stream_error", "connection_error"))
    # Probes were sent (real chats, on a doubling back-off), and every one failed.
    probes = b.probe_requests()
    assert probes and all(p["behaviour"] == ("status" if fault == "500" else "reset") for p in probes)
    assert len(probes) <= 2 + wall.__ceil__().bit_length()  # 1 s, 2 s, 4 s, ... apart: logarithmic in the wall
    # Only a few items ever reached the sick replica; each failed over to the healthy one.
    assert len(b.chat_requests()) <= FAILURE_THRESHOLD + 4
    assert_accounting(recs, summary, {"r0": a, "r1": b})
    on_b = [r for r in recs if r["failed_over_from"]]
    if fault == "500":  # retries spent on the sick replica before failing over are counted, not lost
        assert summary["retries_used"] == sum(len(r["retry_waits_s"]) for r in on_b) > 0
    else:  # a reset is not retried there: the item fails over at once
        assert summary["retries_used"] == 0 and all(r["attempts"] == 2 for r in on_b)


def test_a_replica_passing_probes_but_failing_items_backs_off_instead_of_flapping(
        tmp_path: Path, fakes: list[FakeServer]) -> None:
    """Its probe chats succeed but the items' requests fail: it comes back, fails, goes out again
    -- each time for twice as long (the flap window keeps the back-off), not every second."""
    from fakeserver import by_ids

    a = fake(fakes, tmp_path, delay_s=0.3)
    b = fake(fakes, tmp_path, script(by_question=by_ids("heldout", {i: ["500"] * 10 for i in IDS[:40]})))
    t0 = time.monotonic()
    summary, recs = run(tmp_path, [a.url, b.url], 40, routing="round-robin", concurrency=2, timeout_s=10.0,
                        retry_budget=0.2)
    wall = time.monotonic() - t0
    assert summary["outcomes"] == {"ok": 40}
    evs = events(summary, "r1")["events"]
    outs = [e for e in evs if e["event"] == "out"]
    spells = [(o["t"], next((e["t"] for e in evs if e["event"] == "back" and e["t"] > o["t"]), None)) for o in outs]
    assert len(outs) >= 2, evs  # it did come back (its probe chats are answered) and went out again
    assert len(outs) <= 2 + wall.__ceil__().bit_length(), evs  # 1, 2, 4, ... s out: not every second
    for i, (out_t, back_t) in enumerate(spells):
        if back_t is not None:
            assert back_t - out_t >= 0.95 * 2 ** i, spells
    assert_accounting(recs, summary, {"r0": a, "r1": b})


def test_a_slow_but_correct_replica_stays_in_rotation(tmp_path: Path, fakes: list[FakeServer]) -> None:
    a = fake(fakes, tmp_path, delay_s=0.05)
    b = fake(fakes, tmp_path, delay_s=1.0)  # slow, well inside the timeout
    summary, recs = run(tmp_path, [a.url, b.url], 12, routing="round-robin", concurrency=4, timeout_s=8.0)
    assert summary["outcomes"] == {"ok": 12}
    assert Counter(r["replica"] for r in recs) == {"r0": 6, "r1": 6}
    r1 = events(summary, "r1")
    assert r1["events"] == [] and r1["in_rotation_at_end"] is True and r1["out_of_rotation_s"] == 0
    assert all(r["failed_over_from"] == [] and r["attempts"] == 1 for r in recs)
    assert not b.probe_requests() and summary["fleet"]["failovers_this_session"] == 0
    assert all(r["latency_s"] >= 0.9 for r in recs if r["replica"] == "r1")
    assert_accounting(recs, summary, {"r0": a, "r1": b})


def test_a_replica_back_only_after_its_probe_chat_succeeds(tmp_path: Path, fakes: list[FakeServer]) -> None:
    """It dies; a standby binds the port: the breaker closes on a successful probe chat, and the
    back event says so."""
    a = fake(fakes, tmp_path, delay_s=0.2)
    b = fake(fakes, tmp_path, script(sequence=["ok", "die"]), delay_s=0.2)
    standby = FakeServer(tmp_path / "fake", script(), model=MODEL, port=b.port, bind_retry_s=60, delay_s=0.2)
    fakes.append(standby)
    standby.start(wait=False)
    summary, recs = run(tmp_path, [a.url, b.url], 40, concurrency=2, timeout_s=10.0)
    assert summary["outcomes"] == {"ok": 40}
    r1 = events(summary, "r1")
    back = [e for e in r1["events"] if e["event"] == "back"]
    assert back and back[0]["reason"] == "probe chat ok" and back[0]["probes"] >= 1
    assert standby.probe_requests()  # the probe that brought it back was a chat, answered by the standby
    assert any(r["replica"] == "r1" and r["started"] > back[0]["t"] for r in recs)


def test_worker_processes_keep_the_accounting_across_failover(tmp_path: Path, fakes: list[FakeServer]) -> None:
    """``--workers 2``: each worker has its own breakers; the records still hold every attempt."""
    a = fake(fakes, tmp_path, delay_s=0.1)
    b = fake(fakes, tmp_path, script(default="500"))
    summary, recs = run(tmp_path, [a.url, b.url], 24, routing="round-robin", concurrency=4, workers=2,
                        timeout_s=10.0, retry_budget=0.25)
    assert summary["outcomes"] == {"ok": 24} and summary["load"]["workers"] == 2
    r1 = events(summary, "r1")
    kinds = [e["event"] for e in r1["events"]]
    assert "back" not in kinds and 1 <= kinds.count("out") <= 2 and r1["in_rotation_at_end"] is False
    assert len(b.chat_requests()) <= 2 * (FAILURE_THRESHOLD + 4)
    assert_accounting(recs, summary, {"r0": a, "r1": b})


# ---------------------------------------------------------------------------------------
# The breaker itself (no server)
# ---------------------------------------------------------------------------------------

def replica() -> Replica:
    return Replica("r1", EndpointConfig(base_url="http://127.0.0.1:9/v1", model=MODEL), client=None)


def test_breaker_opens_on_consecutive_faults_and_any_answer_resets_the_count() -> None:
    r = replica()
    for outcome in ("timeout", "http_5xx", "ok", "timeout", "http_5xx", "context_overflow", "http_429"):
        r.observe(outcome, None, 1.0)
    assert r.healthy and r.failures == 0  # an answer (even a 4xx) resets; a 429 is neither
    for _ in range(FAILURE_THRESHOLD - 1):
        r.observe("timeout", "slow", 1.0)
    assert r.healthy
    r.observe("http_5xx", "HTTP 500", 1.0)
    assert r.state == "open" and [e.event for e in r.events] == ["out"]
    assert f"({FAILURE_THRESHOLD} in a row)" in r.events[0].reason
    r.observe("ok", None, 1.0)  # an item sent before it opened answers: still out (only a probe closes it)
    assert r.state == "open"
    dead = replica()
    dead.observe("connection_error", "refused", 1.0)  # no server there: out at once
    assert dead.state == "open"


def test_probe_back_off_doubles_is_capped_and_a_flapping_replica_keeps_it() -> None:
    r = replica()
    r.trip("test", 1.0)
    waits = [r.next_probe - time.monotonic()]
    for _ in range(7):
        r.state = "half-open"
        r.probe_failed(1.0)
        waits.append(r.next_probe - time.monotonic())
    assert [round(w) for w in waits] == [1, 2, 4, 8, 16, PROBE_BACKOFF_MAX_S, PROBE_BACKOFF_MAX_S,
                                         PROBE_BACKOFF_MAX_S]
    fresh = replica()
    fresh.trip("first", 1.0)
    fresh.close()
    assert fresh.healthy and [e.event for e in fresh.events] == ["out", "back"]
    fresh.trip("again, at once", 1.0)  # back and out within the flap window: the back-off grows
    assert round(fresh.next_probe - time.monotonic()) == 2
    fresh.closed_at = time.monotonic() - pool.FLAP_WINDOW_S - 1
    fresh.state = "closed"
    fresh.trip("much later", 1.0)  # long after it came back: a fresh start
    assert round(fresh.next_probe - time.monotonic()) == 1


def test_a_stranger_on_a_dead_replicas_port_is_not_taken_back(tmp_path: Path, fakes: list[FakeServer]) -> None:
    """Issue 27: a replica is killed and its port re-bound by another server -- one serving
    another model that ignores the requested model name, so it answers the half-open probe's
    chat with HTTP 200.  The probe checks who answered (every chunk names the run's model): the
    stranger stays out and no item goes to it (before, a probe answered with HTTP 200 closed the
    breaker whoever answered)."""
    a = fake(fakes, tmp_path, delay_s=0.2)
    b = fake(fakes, tmp_path, script(sequence=["ok", "die"]), delay_s=0.2)
    stranger = FakeServer(tmp_path / "fake", {**script(), "any_model": True}, model="someone-elses-model", port=b.port,
                          bind_retry_s=60, delay_s=0.2)
    fakes.append(stranger)
    stranger.start(wait=False)
    summary, recs = run(tmp_path, [a.url, b.url], 40, concurrency=2, timeout_s=10.0)
    assert summary["outcomes"] == {"ok": 40}
    r1 = events(summary, "r1")
    assert stranger.probe_requests(), "the stranger was never probed: the test did not test"
    assert not stranger.chat_requests(), "an item was sent to the stranger"
    assert [e["event"] for e in r1["events"]] == ["out"] and not r1["in_rotation_at_end"]
    assert all(r["replica"] == "r0" for r in recs if r["started"] > r1["events"][0]["t"])


def test_the_probe_needs_the_runs_model_in_every_chunk(tmp_path: Path, fakes: list[FakeServer]) -> None:
    import asyncio

    ours = fake(fakes, tmp_path)
    cfg = EndpointConfig(base_url=ours.url, model=MODEL, api_key="k", timeout_s=5.0)
    assert asyncio.run(pool_probe.probe_answer(cfg)) == "ok"
    other = FakeServer(tmp_path / "fake", {**script(), "any_model": True}, model="other")
    fakes.append(other)
    other.start()
    assert (asyncio.run(pool_probe.probe_answer(replace(cfg, base_url=other.url)))
            == "answered by another model ('other', not 'fake-model')")
    strict = FakeServer(tmp_path / "fake", script(), model="other")  # vLLM's way: 404 for a model it lacks
    fakes.append(strict)
    strict.start()
    assert asyncio.run(pool_probe.probe_answer(replace(cfg, base_url=strict.url))) == "HTTP 404"
    dead = fake(fakes, tmp_path, script(default="reset"))
    assert asyncio.run(pool_probe.probe_answer(replace(cfg, base_url=dead.url))) != "ok"
