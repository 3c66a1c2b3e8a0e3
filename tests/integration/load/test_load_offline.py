"""Sweep, serialization probe and serializing proxy end to end against the scripted fake server.

The fake server answers every request concurrently after a fixed delay and has no
``/metrics``, so these tests pin the plumbing and the "not observed" paths; the verdicts
on a real engine are tested in ``tests/live/test_load_live.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from fakeserver import FakeServer
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.load.proxy import Proxy

runner = CliRunner()
DELAY = 0.3


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with FakeServer(tmp_path_factory.mktemp("fake"), delay_s=DELAY) as f:
        yield f


async def _together(url: str, n: int) -> float:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "Sales by region"}]}
    async with aiohttp.ClientSession() as s:
        async def one() -> int:
            async with s.post(url + "/chat/completions", json=body) as r:
                await r.read()
                return r.status
        t0 = time.perf_counter()
        statuses = await asyncio.gather(*(one() for _ in range(n)))
        assert statuses == [200] * n
        return time.perf_counter() - t0


def test_proxy_serializes_generation_but_not_metrics_or_health(fake: FakeServer) -> None:
    assert asyncio.run(_together(fake.url, 4)) < 3 * DELAY
    with Proxy(fake.base_url, serialize=True) as px:
        assert asyncio.run(_together(px.url, 4)) >= 4 * DELAY * 0.95
        assert px.get("/health") == b""
        assert json.loads(px.get("/v1/models"))["data"][0]["id"] == "fake-model"
    with Proxy(fake.base_url, serialize=False) as px:
        assert asyncio.run(_together(px.url, 4)) < 3 * DELAY


def test_sweep_cli_end_to_end(fake: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    args = ["sweep", "--endpoint", fake.url, "--model", "fake-model", "--evalset", "dev",
            "--concurrency", "1,4", "--requests", "8", "--warmup", "1", "--slo-p95", "1,0.1",
            "--gpu-cost-per-hour", "2", "--out", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    data = json.loads((out / "sweep.json").read_text())
    assert [s["concurrency"] for s in data["levels"]] == [1, 4]
    assert all(s["n"] == 8 and s["ok"] == 8 for s in data["levels"])
    lvl1, lvl4 = data["levels"]
    assert lvl4["req_per_s"] > 2 * lvl1["req_per_s"]  # the fake serves in parallel
    assert lvl4["client"]["inflight_peak"] == 4 and lvl4["client"]["cpu_share_of_core"] is not None
    assert lvl1["server"]["observed"] is False
    pol = {p["p95_target_s"]: p for p in data["analysis"]["slo_policy"]}
    assert pol[1.0]["level"] == 4 and pol[0.1]["level"] is None
    md = (out / "sweep.md").read_text()
    assert "not observed" in md and "Cost assumes $2" in md
    assert (out / "throughput_vs_p95.png").stat().st_size > 0 and (out / "efficiency.png").exists()
    ids = [json.loads(x)["id"] for x in (out / "levels" / "c4" / "records.jsonl").read_text().splitlines()]
    assert len(set(ids)) == 8 and any("#" in i for i in ids)
    # An existing output directory is refused without --force; --reanalyse needs no server.
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--force" in again.output
    re = runner.invoke(app, ["sweep", "--out", str(out), "--reanalyse", "--slo-p95", "2",
                             "--efficiency-threshold", "0.99"])
    assert re.exit_code == 0, re.output
    assert json.loads((out / "sweep.json").read_text())["analysis"]["thresholds"]["efficiency"] == 0.99


def test_bad_input_is_rejected(tmp_path: Path) -> None:
    for args in (["sweep", "--concurrency", "0,2"], ["sweep", "--slo-p95", "x"],
                 ["sweep", "--endpoint", "http://127.0.0.1:9/v1", "--server-sweep", "max-num-seqs=1"],
                 ["sweep", "--endpoint", "http://127.0.0.1:9/v1", "--max-num-seqs", "1"],
                 ["probe", "serialization", "--expect", "maybe"]):
        res = runner.invoke(app, [*args, "--out", str(tmp_path / "x")])
        assert res.exit_code == 2, (args, res.output)


def test_serialization_probe_offline(fake: FakeServer, tmp_path: Path) -> None:
    common = ["probe", "serialization", "--model", "fake-model", "--evalset", "dev", "--level", "4",
              "--requests-single", "3", "--requests-level", "8", "--staircase", "3"]
    res = runner.invoke(app, [*common, "--endpoint", fake.url, "--out", str(tmp_path / "direct"),
                              "--expect", "batched"])
    assert res.exit_code == 0, res.output
    direct = json.loads((tmp_path / "direct" / "serialization.json").read_text())
    assert direct["evidence"]["speedup"] > 2 and direct["staircase"]["index"] < 0.35
    assert "not observed" in (tmp_path / "direct" / "serialization.md").read_text()
    with Proxy(fake.base_url, serialize=True) as px:
        res = runner.invoke(app, [*common, "--endpoint", px.url, "--out", str(tmp_path / "locked")])
    assert res.exit_code == 0, res.output
    locked = json.loads((tmp_path / "locked" / "serialization.json").read_text())
    # Without /metrics the queue cannot be placed: serialized, but where is not observed.
    assert locked["verdict"] == "inconclusive", locked["rule"]
    assert "serialized somewhere beyond the client" in locked["rule"]
    assert locked["staircase"]["index"] > 0.6 and locked["evidence"]["speedup"] < 1.3


def test_server_sweep_restarts_a_local_server_per_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--server-sweep`` with the fake server standing in for vLLM (it ignores --max-num-seqs)."""
    import sys

    from nlq2sql.paths import PROJECT_ROOT

    model = tmp_path / "fakemodel"
    model.mkdir()
    (model / "config.json").write_text("{}")
    wrapper = tmp_path / "fake-vllm-python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {PROJECT_ROOT / 'tests' / 'fakeserver.py'} "
                       f"--delay 0.1 \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("NLQ2SQL_VLLM_PYTHON", str(wrapper))
    out = tmp_path / "seqs"
    res = runner.invoke(app, ["sweep", "--model", str(model), "--evalset", "dev", "--concurrency", "1,2",
                              "--requests", "4", "--warmup", "0", "--server-sweep", "max-num-seqs=1,2",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    combined = json.loads((out / "server-sweep.json").read_text())
    assert [s["value"] for s in combined["settings"]] == [1, 2]
    for v in (1, 2):
        sub = json.loads((out / f"max-num-seqs-{v}" / "sweep.json").read_text())
        args = sub["server"]["args"]
        assert args[args.index("--max-num-seqs") + 1] == str(v)
        assert f"(max-num-seqs {v})" in sub["endpoint_label"] and sub["cpu_label"]
    assert "| max-num-seqs | peak req/s" in (out / "server-sweep.md").read_text()


def test_a_resumed_sweep_keeps_finished_levels_and_reruns_the_rest(tmp_path: Path) -> None:
    """An interrupted sweep resumes: a finished level (its level.json) is kept as measured, a
    level without one runs again from its start, and the result lists both; another sweep's
    directory (other settings) is refused without touching it."""

    from nlq2sql.errors import InputError
    from nlq2sql.load import sweep as sw
    from nlq2sql.load.modes import run_mode
    from nlq2sql.load.results import SweepResult, load_result
    from nlq2sql.run.config import EvalConfig, LoadShape
    from nlq2sql.transport.client import Sampling

    with FakeServer(tmp_path / "fake", delay_s=0.05) as srv:
        base = EvalConfig(evalset="heldout", out=tmp_path / "sw", endpoint=srv.url, model="fake-model",
                          sampling=Sampling(max_tokens=32), load=LoadShape(metrics_interval_s=0.05))
        cfg = sw.SweepConfig(base=base, levels=(1, 2), requests=4, warmup=0)
        first = run_mode("sweep", cfg)
        c1 = json.loads((tmp_path / "sw" / "levels" / "c1" / "level.json").read_text())
        # The session "died" during c=2: its level never finished.
        (tmp_path / "sw" / "levels" / "c2" / "level.json").unlink()
        sent = len(srv.chat_requests())
        again = run_mode("sweep", cfg.but(resume=True))
        assert len(srv.chat_requests()) - sent == 4  # only c=2's four requests were sent again
        assert json.loads((tmp_path / "sw" / "levels" / "c1" / "level.json").read_text()) == c1
        assert [lv.concurrency for lv in again.levels] == [1, 2]
        assert again.levels[0].to_json() == first.levels[0].to_json()  # kept exactly as measured
        assert any(n.startswith("Resumed: 1 level(s)") and "levels/c1" in n for n in again.notes)
        assert load_result(tmp_path / "sw" / "sweep.json", expect=SweepResult).levels[1].n == 4

        before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "sw").rglob("*"))
        with pytest.raises(InputError, match=r"other settings \(differs in: requests\)"):
            run_mode("sweep", cfg.but(requests=8, resume=True))
        with pytest.raises(InputError, match="pass one of them"):
            run_mode("sweep", cfg.but(resume=True, force=True))
        assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "sw").rglob("*")) == before
