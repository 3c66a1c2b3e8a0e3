"""Load shapes in ``run_eval``: open-loop Poisson arrivals and a duration bound (fake server)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, by_ids, script

from nlq2sql.errors import InputError
from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval

MODEL = "fake-model"


def _fake(tmp_path: Path, delay_s: float) -> FakeServer:
    return FakeServer(tmp_path / "fake", script(by_question=by_ids("heldout", {})), model=MODEL,
                      delay_s=delay_s).start()


def _run(fake: FakeServer, tmp_path: Path, load: LoadShape | None = None,
         **kw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    cfg = EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint=fake.url, model=MODEL,
                     timeout_s=10.0, load=replace(load or LoadShape(), metrics_interval_s=0.05), **kw)
    summary = run_eval(cfg).to_json()
    return summary, list(iter_records(cfg.out / "records.jsonl"))


def test_open_loop_follows_the_seeded_poisson_schedule(tmp_path: Path) -> None:
    fake = _fake(tmp_path, 0.02)
    try:
        summary, recs = _run(fake, tmp_path, LoadShape(rate=25.0, arrival_seed=7), concurrency=64, limit=12)
    finally:
        fake.kill()
    assert len(recs) == 12 and all(r["outcome"] == "ok" for r in recs)
    sched = sorted(r["scheduled"] for r in recs)
    rng = random.Random(7)
    draws = [rng.expovariate(25.0) for _ in range(12)]
    gaps = [b - a for a, b in zip(sched, sched[1:], strict=False)]
    assert gaps == pytest.approx(draws[1:], abs=1e-6)
    # No cap was hit: each request left soon after its arrival (loose: CI machines are busy).
    assert max(r["queued_s"] for r in recs) < 2.0
    assert summary["load"]["mode"] == "open-loop Poisson" and summary["load"]["offered_rate"] == 25.0
    assert summary["throughput"]["not_sent"] == 0


def test_open_loop_cap_delays_arrivals_and_counts_it(tmp_path: Path) -> None:
    fake = _fake(tmp_path, 0.3)
    try:
        _, recs = _run(fake, tmp_path, LoadShape(rate=50.0), concurrency=1, limit=6)
    finally:
        fake.kill()
    recs.sort(key=lambda r: r["scheduled"])
    # One slot, 0.3 s per request, arrivals every ~20 ms: the queue grows with each arrival.
    assert recs[-1]["queued_s"] > 0.8
    for r in recs:
        assert r["latency_from_arrival_s"] == pytest.approx(r["queued_s"] + r["latency_s"])
    starts = sorted(r["started"] for r in recs)
    assert all(b - a >= 0.25 for a, b in zip(starts, starts[1:], strict=False))


def test_duration_stops_new_requests_and_says_how_many_were_not_sent(tmp_path: Path) -> None:
    fake = _fake(tmp_path, 0.25)
    try:
        summary, recs = _run(fake, tmp_path, LoadShape(duration_s=1.5), concurrency=1, limit=40)
    finally:
        fake.kill()
    # No request started after the deadline (one more may finish after it), and it stopped early.
    starts = sorted(r["started"] for r in recs)
    assert 1 <= len(recs) < 40 and starts[-1] - starts[0] < 1.5
    assert summary["throughput"]["items_this_session"] == len(recs)
    assert summary["throughput"]["not_sent"] == 40 - len(recs)
    assert summary["load"]["duration_s"] == 1.5


def test_duration_bounds_an_open_loop_schedule(tmp_path: Path) -> None:
    fake = _fake(tmp_path, 0.01)
    try:
        summary, recs = _run(fake, tmp_path, LoadShape(rate=10.0, duration_s=1.0, arrival_seed=3),
                             concurrency=8, limit=60)
    finally:
        fake.kill()
    rng, at, expected = random.Random(3), 0.0, 0
    while True:
        at += rng.expovariate(10.0)
        if at >= 1.0:
            break
        expected += 1
    assert len(recs) == expected and summary["throughput"]["not_sent"] == 60 - expected


@pytest.mark.parametrize(("field", "kw"), [("--rate", {"load": LoadShape(rate=0.0)}),
                                         ("--duration", {"load": LoadShape(duration_s=-1.0)})])
def test_bad_load_shape_is_refused(tmp_path: Path, field: str, kw: dict[str, Any]) -> None:
    with pytest.raises(InputError) as e:
        run_eval(EvalConfig(evalset="heldout", out=tmp_path / "x", endpoint="http://127.0.0.1:9/v1", **kw))
    assert e.value.field == field
    assert not (tmp_path / "x").exists()
