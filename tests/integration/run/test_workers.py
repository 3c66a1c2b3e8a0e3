"""``--workers N`` and ``--engine ray``: the same records as one process, resume still exact.

Against the fault suite's fake server (deterministic answers, a scripted 500 so the shared
retry budget is exercised); a local Ray (2 CPUs) for the Ray engine.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, by_ids, script

from nlq2sql.errors import InputError
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval
from nlq2sql.run.workers import shares

MODEL = "fake-model"
#: Fields that measure time or effort, not results (as in test_killcycles).
TIMING = {"latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks", "attempts", "retry_waits_s"}


SPEC = {"ho-003": ["500", "ok"], "ho-010": ["context_overflow"]}


def results(out: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: {k: v for k, v in r.items() if k not in TIMING} for r in iter_records(out / "records.jsonl")}


def evaluate(tmp: Path, name: str, **kw: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One run against a fresh fake (its scripted faults are consumed per question)."""
    with FakeServer(tmp / f"fake-{name}", script(by_question=by_ids("heldout", SPEC)), model=MODEL,
                    delay_s=0.02) as f:
        summary = run_eval(EvalConfig(evalset="heldout", out=tmp / name, endpoint=f.url, model=MODEL, limit=24,
                                      concurrency=4, timeout_s=10.0, load=LoadShape(metrics_interval_s=0.1),
                                      **kw)).to_json()
    return summary, results(tmp / name)


@pytest.mark.parametrize(("engine", "workers"),
                         [("local", 2), ("local", 4), pytest.param("ray", 2, marks=pytest.mark.slow)])
def test_engines_write_the_records_one_process_writes(engine: str, workers: int, tmp_path: Path) -> None:
    _, single = evaluate(tmp_path, "single")
    summary, got = evaluate(tmp_path, "run", workers=workers, engine=engine)
    assert got.keys() == single.keys()
    for item_id, rec in single.items():
        assert got[item_id] == rec, item_id
    assert got["ho-010"]["outcome"] == "context_overflow" and got["ho-003"]["outcome"] == "ok"
    assert summary["load"]["workers"] == workers and summary["load"]["engine"] == engine
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["engine"] == {"name": engine, "workers": workers, "ray_address": None}
    assert json.loads((tmp_path / "single" / "manifest.json").read_text()).get("engine") is None
    assert summary["n"] == 24 and summary["throughput"]["items_this_session"] == 24
    assert summary["retries_used"] == 1  # ho-003's 500, retried once, on the shared budget
    # The records went through the one writer: one line per item.
    assert len((tmp_path / "run" / "records.jsonl").read_text().splitlines()) == 24


def test_the_retry_budget_is_one_for_all_workers(tmp_path: Path) -> None:
    # Every request fails with a retryable 500: the whole run may retry at most its budget.
    spec = script(default="500")
    with FakeServer(tmp_path / "fake", spec, model=MODEL) as f:
        summary = run_eval(EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint=f.url, model=MODEL,
                                      limit=10, concurrency=4, workers=2, retry_budget=0.3, timeout_s=10.0,
                                      load=LoadShape(metrics_interval_s=0.1))).to_json()
        assert summary["outcomes"] == {"http_5xx": 10}
        assert summary["retries_used"] == 3 and len(f.chat_requests()) == 13


def test_worker_options_are_validated(tmp_path: Path) -> None:
    assert shares(10, 4) == [3, 3, 2, 2] and sum(shares(7, 7)) == 7
    for kw, field in (({"workers": 0}, "--workers"), ({"workers": 9, "concurrency": 8}, "--workers"),
                      ({"workers": 2, "load": LoadShape(rate=1.0)}, "--workers"), ({"engine": "spark"}, "--engine"),
                      ({"ray_address": "auto"}, "--ray-address")):
        with pytest.raises(InputError, match=field):
            run_eval(EvalConfig(endpoint="http://127.0.0.1:9/v1", out=tmp_path / "x", **kw))  # type: ignore[arg-type]
    assert not (tmp_path / "x").exists()


def check_killed_run(f: FakeServer, out: Path) -> None:
    before = len((out / "records.jsonl").read_text().splitlines())
    assert 6 <= before < 30
    time.sleep(3)
    sent = len(f.chat_requests())
    time.sleep(2)
    assert len(f.chat_requests()) == sent, "workers kept sending after the driver died"


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_resume_after_sigkill_is_exact(engine: str, tmp_path: Path) -> None:
    """The driver is SIGKILLed mid-run; its workers stop; ``--resume`` ends every item once,
    with the records an uninterrupted run writes."""
    spec = script()
    with FakeServer(tmp_path / "fake", spec, model=MODEL, delay_s=0.3) as f:
        base = ["eval", "--endpoint", f.url, "--model", MODEL, "--limit", "30", "--concurrency", "4",
                "--workers", "2", "--engine", engine, "--timeout", "20"]
        out = tmp_path / "run"
        proc = subprocess.Popen([sys.executable, "-m", "nlq2sql.cli", *base, "--out", str(out)], cwd=PROJECT_ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        records = out / "records.jsonl"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if records.exists() and len(records.read_text().splitlines()) >= 6:
                break
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: its workers must notice and stop
        proc.wait()
        try:
            check_killed_run(f, out)
        finally:
            # What the driver left in its process group (Ray's per-node agents outlive a SIGKILLed
            # driver by design; the workers themselves are checked above).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        res = subprocess.run([sys.executable, "-m", "nlq2sql.cli", *base, "--out", str(out), "--resume"],
                             cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        resumed = results(out)
        ids = [r["id"] for r in iter_records(records)]
        assert len(ids) == len(set(ids)) == 30
        whole = tmp_path / "whole"
        res = subprocess.run([sys.executable, "-m", "nlq2sql.cli", *base, "--out", str(whole)],
                             cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        assert resumed == results(whole)


def test_workers_sample_every_replicas_metrics(tmp_path: Path) -> None:
    """With workers the driver samples /metrics: of every replica, labelled as the records are."""
    from nlq2sql.run.endpoints import ReplicaSpec

    spec = script()
    with FakeServer(tmp_path / "a", spec, model=MODEL) as a, FakeServer(tmp_path / "b", spec, model=MODEL) as b:
        summary = run_eval(EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint=a.url, model=MODEL,
                                      replicas=(ReplicaSpec(b.url),), limit=12, concurrency=4, workers=2,
                                      load=LoadShape(metrics_interval_s=0.05))).to_json()
    per = summary["fleet"]["server_metrics"]
    assert set(per) == {"r0", "r1"}
    # The fake serves no /metrics: each replica's sampler tried (and says so), none was skipped.
    assert all(m["observed"] is False and m["errors"] > 0 for m in per.values())
    assert {m["url"] for m in per.values()} == {a.url.rstrip("/").removesuffix("/v1") + "/metrics",
                                                 b.url.rstrip("/").removesuffix("/v1") + "/metrics"}


def test_each_worker_answers_the_golds_before_its_first_request(tmp_path: Path, memo_at_start: set[object]) -> None:
    """As in one process (``ItemRunner.prepare``): a worker has every distinct gold answer in
    its memo when it starts sending, and the driver hands each worker one case per gold."""
    import asyncio

    from nlq2sql.run import worker, workers
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.evalset import load_evalset
    from nlq2sql.stages.intent import canonicalise
    from nlq2sql.stages.sqlbuild import build_sql
    from nlq2sql.transport.client import RetryBudget

    wh = open_warehouse("retail")
    cases = list(load_evalset("heldout", wh).cases[:5])
    repeated = cases + [c.model_copy(update={"id": f"{c.id}-again"}) for c in cases]
    golds = workers.distinct_golds(repeated)
    assert [c.id for c in golds] == [c.id for c in cases]  # one per gold, first seen first
    mine, theirs = multiprocessing.Pipe()
    for c in repeated:
        mine.send(c)
    mine.send(None)
    got: list[Any] = []

    def drain() -> None:  # as the driver does: a pipe nobody reads fills, and the worker's send waits
        while not got or got[-1][0] != "done":
            got.append(mine.recv())

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    with FakeServer(tmp_path / "fake", script(), model=MODEL) as f:
        cfg = EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint=f.url, model=MODEL, limit=5)
        asyncio.run(worker._serve(cfg, (f.url, MODEL, ""), 1, theirs, RetryBudget(10, 0.1), golds))
    reader.join(timeout=30)
    assert [k for k, _ in got] == ["ready"] + ["rec"] * len(repeated) + ["done"]
    assert got[-1][1].sent == len(repeated)
    assert memo_at_start == {build_sql(canonicalise(c.gold), wh.catalog) for c in cases}


def test_workers_die_with_their_driver(tmp_path: Path) -> None:
    """Issue 27: the driver (``--workers 2``) is SIGKILLed mid-run: within ~2 s no worker
    process is left, and from 1 s after the kill the server sees no request at all.  The items
    in flight at the kill hang 2 s, then fail with a retryable 504: a worker that finished its
    requests before looking for its driver would still be there, and would retry them."""
    import psutil

    slow = {f"ho-{i:03d}": [{"kind": "hang", "seconds": 2}] * 4 for i in range(5, 61)}
    with FakeServer(tmp_path / "fake", script(by_question=by_ids("heldout", slow)), model=MODEL, delay_s=1.0) as f:
        out = tmp_path / "run"
        proc = subprocess.Popen([sys.executable, "-m", "nlq2sql.cli", "eval", "--endpoint", f.url, "--model", MODEL,
                                 "--limit", "60", "--concurrency", "4", "--workers", "2", "--timeout", "20",
                                 "--out", str(out)], cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            records = out / "records.jsonl"
            deadline = time.monotonic() + 240
            while not (records.exists() and len(records.read_text().splitlines()) >= 4):
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "no records from the workers"
                time.sleep(0.05)
            children = psutil.Process(proc.pid).children(recursive=True)
            workers = [c for c in children if "spawn_main" in " ".join(c.cmdline())]
            assert len(workers) == 2, [c.cmdline() for c in children]
            killed_at = time.time()
            os.kill(proc.pid, signal.SIGKILL)  # the driver only
            proc.wait()
            gone, alive = psutil.wait_procs(children, timeout=2.5)
            assert not alive, f"outlived their driver: {[(p.pid, p.cmdline()) for p in alive]}"
            time.sleep(max(0.0, killed_at + 3.0 - time.time()))
            late = [e for e in f.entries() if e.get("path", "").startswith("/v1/") and e["t"] > killed_at + 1.0]
            assert not late, f"{len(late)} requests reached the server more than 1 s after the driver died"
            assert len(list(iter_records(records))) < 60  # it really was killed mid-run
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.slow)])
def test_every_engine_reports_the_compiles_one_process_reports(engine: str, tmp_path: Path) -> None:
    """``compiles`` (distinct MetricFlow compiles the run needed) was written by an in-process run
    only: worker processes and Ray actors compile in their own catalogs, and the driver's count
    saw none of it.  Now each worker reports the shapes it compiled and the driver counts their
    union: the same figure as one process, on the same items.  Each run is its own process (the
    CLI), so both start from an empty compile cache."""
    if engine == "ray":
        pytest.importorskip("ray")
    with FakeServer(tmp_path / "fake", script(), model=MODEL, delay_s=0.02) as f:  # (every item answered: exit 0)
        compiles = {}
        for name, extra in (("single", []), ("workers", ["--workers", "2", "--engine", engine])):
            out = tmp_path / name
            res = subprocess.run([sys.executable, "-m", "nlq2sql.cli", "eval", "--endpoint", f.url, "--model", MODEL,
                                  "--limit", "12", "--concurrency", "4", "--timeout", "20", *extra, "--out", str(out)],
                                 cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600,
                                 env=dict(os.environ, PYTHONPATH=str(PROJECT_ROOT)))
            assert res.returncode == 0, res.stderr[-3000:]
            compiles[name] = json.loads((out / "summary.json").read_text()).get("compiles")
    assert isinstance(compiles["single"], int) and compiles["single"] > 0, compiles
    assert compiles["workers"] == compiles["single"], compiles
