"""Several endpoints in one run (``nlq2sql.run.pool``): routing, attribution, failover, health.

Fake servers here only because a replica must die or misbehave on cue; two real vLLM
replicas are in ``tests/live/test_replicas_live.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, script
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import InputError
from nlq2sql.records.store import iter_records, read_json
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.endpoints import ReplicaSpec, parse_endpoints_file
from nlq2sql.run.live import run_eval
from nlq2sql.stages.evalset import load_evalset

MODEL = "fake-model"
IDS = [c.id for c in load_evalset("heldout", retail_wh()).cases]


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[list[FakeServer]]:
    started: list[FakeServer] = []
    yield started
    for f in started:
        f.kill()


def fake(fakes: list[FakeServer], tmp_path: Path, spec: dict[str, Any] | None = None, **kw: Any) -> FakeServer:
    f = FakeServer(tmp_path / "fake", spec or script(), model=MODEL, **kw)
    fakes.append(f)
    return f.start()


def run(tmp_path: Path, urls: list[str], n: int, name: str = "run", **kw: Any
        ) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    out = tmp_path / name
    cfg = EvalConfig(evalset="heldout", out=out, endpoint=urls[0], replicas=tuple(ReplicaSpec(u) for u in urls[1:]),
                     model=MODEL, limit=n, concurrency=kw.pop("concurrency", 4), timeout_s=10.0,
                     load=LoadShape(metrics_interval_s=0.05), **kw)
    summary = run_eval(cfg).to_json()
    recs = list(iter_records(out / "records.jsonl"))
    # Never an item lost or counted twice.
    assert sorted(r["id"] for r in recs) == sorted(IDS[:n])
    return summary, recs, out


def test_two_replicas_both_used_and_every_record_attributed(tmp_path: Path, fakes: list[FakeServer]) -> None:
    a, b = fake(fakes, tmp_path, delay_s=0.05), fake(fakes, tmp_path, delay_s=0.05)
    summary, recs, out = run(tmp_path, [a.url, b.url], 20)
    by = Counter(r["replica"] for r in recs)
    assert set(by) == {"r0", "r1"} and sum(by.values()) == 20
    # What each server logged matches what the records attribute to it.
    assert len(a.chat_requests()) == by["r0"] and len(b.chat_requests()) == by["r1"]
    manifest = read_json(out / "manifest.json")
    assert [r["url"] for r in manifest["replicas"]] == [a.url, b.url] and manifest["routing"] == "least-inflight"
    fleet = {r["label"]: r for r in summary["fleet"]["replicas"]}
    assert fleet["r0"]["answered"] == by["r0"] and fleet["r1"]["ok"] == by["r1"]
    assert fleet["r0"]["latency_s"]["n"] == by["r0"] and fleet["r1"]["first_out_after_s"] is None
    assert summary["outcomes"] == {"ok": 20} and all(r["failed_over_from"] == [] for r in recs)


def test_sticky_routing_is_reproducible_and_round_robin_alternates(tmp_path: Path,
                                                                   fakes: list[FakeServer]) -> None:
    a, b = fake(fakes, tmp_path), fake(fakes, tmp_path)
    _, first, _ = run(tmp_path, [a.url, b.url], 12, "s1", routing="sticky")
    _, again, _ = run(tmp_path, [a.url, b.url], 12, "s2", routing="sticky", concurrency=1)
    home = {r["id"]: r["replica"] for r in first}
    assert home == {r["id"]: r["replica"] for r in again} and len(set(home.values())) == 2
    _, rr, _ = run(tmp_path, [a.url, b.url], 6, "rr", routing="round-robin", concurrency=1)
    assert [r["replica"] for r in sorted(rr, key=lambda r: r["started"])] == ["r0", "r1"] * 3


def test_a_replica_that_dies_mid_run_loses_no_item(tmp_path: Path, fakes: list[FakeServer]) -> None:
    a = fake(fakes, tmp_path, delay_s=0.05)
    # b answers three requests, then dies mid-stream on its fourth (the process exits).
    b = fake(fakes, tmp_path, script(sequence=["ok", "ok", "ok", "die"]), delay_s=0.05)
    summary, recs, _ = run(tmp_path, [a.url, b.url], 20, retry_budget=0.0)
    assert b.proc is not None and b.proc.poll() is not None  # it really died
    assert summary["outcomes"] == {"ok": 20}  # every item answered, by a
    moved = [r for r in recs if r["failed_over_from"]]
    assert [r["failed_over_from"] for r in moved] and all(r["failed_over_from"] == ["r1"] for r in moved)
    assert all(r["replica"] == "r0" for r in moved)
    # Every request b received was either answered by b (kept) or re-sent to a (once);
    # a request in flight on b when it died is one of the moved ones.
    answered_by_b = sum(r["replica"] == "r1" for r in recs)
    assert 1 <= answered_by_b <= 3 and answered_by_b + len(moved) == len(b.chat_requests())
    # A failover is not a retry: with a zero retry budget nothing was retried.
    assert summary["retries_used"] == 0
    fleet = {r["label"]: r for r in summary["fleet"]["replicas"]}
    assert fleet["r1"]["in_rotation_at_end"] is False and fleet["r1"]["first_out_after_s"] is not None
    assert fleet["r1"]["failed_then_resent"] == len(moved) and fleet["r0"]["first_out_after_s"] is None
    assert summary["fleet"]["failovers_this_session"] == len(moved)


def test_a_replica_comes_back_into_rotation(tmp_path: Path, fakes: list[FakeServer]) -> None:
    a = fake(fakes, tmp_path, delay_s=0.2)
    b = fake(fakes, tmp_path, script(sequence=["ok", "die"]), delay_s=0.2)
    standby = FakeServer(tmp_path / "fake", script(), model=MODEL, port=b.port, bind_retry_s=60, delay_s=0.2)
    fakes.append(standby)
    standby.start(wait=False)
    summary, recs, _ = run(tmp_path, [a.url, b.url], 40, concurrency=2)
    assert summary["outcomes"] == {"ok": 40}
    r1 = {r["label"]: r for r in summary["fleet"]["replicas"]}["r1"]
    kinds = [e["event"] for e in r1["events"]]
    assert kinds[:2] == ["out", "back"] and r1["out_of_rotation_s"] > 0
    back_at = next(e["t"] for e in r1["events"] if e["event"] == "back")
    # After it came back, it answered again (the standby process).
    assert any(r["replica"] == "r1" and r["started"] > back_at for r in recs)
    assert standby.chat_requests()


def test_every_replica_down_ends_items_as_failures_not_a_hang(tmp_path: Path, fakes: list[FakeServer]) -> None:
    a = fake(fakes, tmp_path, script(sequence=["die"]))
    b = fake(fakes, tmp_path, script(sequence=["die"]))
    cfg = EvalConfig(evalset="heldout", out=tmp_path / "dead", endpoint=a.url, replicas=(ReplicaSpec(b.url),),
                     model=MODEL, limit=4, concurrency=2, timeout_s=1.0, retry_budget=0.0,
                     load=LoadShape(metrics_interval_s=0.05))
    summary = run_eval(cfg).to_json()
    assert summary["n"] == 4 and "ok" not in summary["outcomes"]
    assert set(summary["outcomes"]) <= {"connection_error", "stream_error"}


def test_fleet_options_are_validated(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="routing"):
        run_eval(EvalConfig(endpoint="http://127.0.0.1:9/v1", routing="random", out=tmp_path / "x"))
    with pytest.raises(InputError, match="given twice"):
        run_eval(EvalConfig(endpoint="http://127.0.0.1:9/v1", replicas=(ReplicaSpec("http://127.0.0.1:9/v1"),),
                            out=tmp_path / "x"))
    with pytest.raises(InputError, match="first one as --endpoint"):
        run_eval(EvalConfig(replicas=(ReplicaSpec("http://127.0.0.1:9/v1"),), out=tmp_path / "x"))
    assert not (tmp_path / "x").exists()


def test_endpoints_file(tmp_path: Path) -> None:
    f = tmp_path / "fleet.txt"
    f.write_text("# replicas\nhttp://a:8000/v1\n\nhttp://b:8000/v1 other-name KEY_B  # comment\n")
    assert parse_endpoints_file(str(f)) == (ReplicaSpec("http://a:8000/v1"),
                                            ReplicaSpec("http://b:8000/v1", "other-name", "KEY_B"))
    f.write_text("http://a:8000/v1\nftp://b/v1\n")
    with pytest.raises(InputError, match=r"fleet.txt:2: field 'url'.*http"):
        parse_endpoints_file(str(f))
    f.write_text("http://a:8000/v1 m K extra\n")
    with pytest.raises(InputError, match=r"fleet.txt:1:.*URL \[MODEL \[KEY_ENV\]\]"):
        parse_endpoints_file(str(f))


def test_cli_eval_with_two_endpoints_and_a_file(tmp_path: Path, fakes: list[FakeServer]) -> None:
    a, b, c = fake(fakes, tmp_path), fake(fakes, tmp_path), fake(fakes, tmp_path)
    (tmp_path / "more.txt").write_text(f"{c.url}\n")
    res = CliRunner().invoke(app, ["eval", "--endpoint", a.url, "--endpoint", b.url, "--endpoints-file",
                                   str(tmp_path / "more.txt"), "--model", MODEL, "--limit", "9",
                                   "--routing", "round-robin", "--concurrency", "3",
                                   "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    assert "per replica" in res.output and "r2" in res.output
    assert {r["replica"] for r in iter_records(tmp_path / "cli" / "records.jsonl")} == {"r0", "r1", "r2"}


def test_load_check_across_replicas(tmp_path: Path, fakes: list[FakeServer]) -> None:
    a, b = fake(fakes, tmp_path), fake(fakes, tmp_path)
    out = tmp_path / "lc"
    res = CliRunner().invoke(app, ["load-check", "--endpoint", a.url, "--endpoint", b.url, "--model", MODEL,
                                   "--across-replicas", "--concurrency", "1,4", "--limit", "6",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    result = read_json(out / "loadcheck.json")
    assert result["across_replicas"]["c1"]["identical_items"] == 6
    assert result["across_replicas"]["c4"]["runs"] == 2
    assert result["across_concurrency"]["r1"]["identical_items"] == 6
    assert "across replicas at c1" in res.output
    # Each replica really answered every item at every level.
    assert len(a.chat_requests()) == 12 and len(b.chat_requests()) == 12
    res = CliRunner().invoke(app, ["load-check", "--endpoint", a.url, "--model", MODEL, "--across-replicas",
                                   "--out", str(tmp_path / "lc1")])
    assert res.exit_code == 2 and "two endpoints" in res.output


def test_sweep_over_a_fleet_measures_the_whole_and_each_replica(tmp_path: Path, fakes: list[FakeServer]) -> None:
    a, b = fake(fakes, tmp_path, delay_s=0.05), fake(fakes, tmp_path, delay_s=0.05)
    out = tmp_path / "sweep"
    res = CliRunner().invoke(app, ["sweep", "--endpoint", a.url, "--endpoint", b.url, "--model", MODEL,
                                   "--concurrency", "1,4", "--requests", "8", "--warmup", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    result = read_json(out / "fleet-sweep.json")
    assert set(result["rows"]) == {"whole", "r0", "r1"}
    assert all(result["rows"][k]["peak_req_per_s"] > 0 for k in result["rows"])
    assert result["fleet_scaling_efficiency"] is not None
    assert (out / "whole" / "sweep.md").exists() and (out / "replica1" / "sweep.json").exists()
    # Each replica's own sweep went to that replica only (2 levels × 8 requests), the whole to both.
    whole = list(iter_records(out / "whole" / "levels" / "c4" / "records.jsonl"))
    assert {r["replica"] for r in whole} == {"r0", "r1"}
    assert len(b.chat_requests()) == 16 + sum(r["replica"] == "r1" for lv in ("c1", "c4")
                                              for r in iter_records(out / "whole" / "levels" / lv / "records.jsonl"))
    assert "Fleet sweep" in res.output
