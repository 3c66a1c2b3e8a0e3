"""Open-loop rate sweep and duration-bounded levels: analysis on synthetic numbers, then the
CLI end to end against the scripted fake server (fixed service time, so the sustainable
rate is known: two slots × 1 / 0.2 s = 10 req/s)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeserver import FakeServer
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.load.contract import ClientSeen, LevelStats
from nlq2sql.load.levels import level_stats
from nlq2sql.load.openloop import analyse_rates, arrival_stats
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.summary_parts import Percentiles

runner = CliRunner()


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with FakeServer(tmp_path_factory.mktemp("fake"), delay_s=0.2) as f:
        yield f


def _items(recs: list[dict]) -> list[ItemRecord]:
    """Records as read back from a run (each with an id and a question)."""
    return [ItemRecord.from_json({"id": str(i), "question": "q", **r}) for i, r in enumerate(recs)]


def _level(rate: float, growth_late: float, n: int = 9, ok: int | None = None, p95: float = 1.0,
           peak: int = 2) -> LevelStats:
    recs = [{"scheduled": 100.0 + i, "latency_from_arrival_s": 1.0 if i < n // 3 else growth_late}
            for i in range(n)]
    client = ClientSeen(cpu_s=None, cpu_share_of_core=None, cpu_ms_per_request=None, inflight_peak=peak,
                        inflight_mean=None, inflight_n=n)
    st = level_stats([], None, None, 2, run_dir="r", client=client)
    return st.model_copy(update={"offered_rate": rate, "n": n, "ok": n if ok is None else ok, "req_per_s": rate * 0.9,
                                 "arrivals": arrival_stats(_items(recs)),
                                 "latency_from_arrival_s": Percentiles(n=n, p95=p95)})


def test_arrival_stats_growth_and_realised_rate() -> None:
    a = arrival_stats(_items([{"scheduled": 10.0 + 0.5 * i, "latency_from_arrival_s": 1.0 + i} for i in range(9)]))
    assert a.realised_rate == pytest.approx(2.0)
    assert a.early_median_s == 2.0 and a.late_median_s == 8.0 and a.growth == pytest.approx(4.0)
    assert list(a.model_dump()) == ["n", "realised_rate", "early_median_s", "late_median_s", "growth"]  # as written
    assert arrival_stats([]).growth is None


def test_analyse_rates_picks_highest_sustained_and_slo() -> None:
    levels = [_level(0.5, 1.1, p95=2.0), _level(1.0, 1.4, p95=3.0), _level(2.0, 3.0, p95=9.0),
              _level(4.0, 1.0, ok=8, p95=1.0), _level(8.0, 1.0, peak=9)]
    a = analyse_rates(levels, growth=1.5, slo=(2.5, 5.0, 0.5), cost_per_hour=3.6)
    # 4.0: one failed; 8.0: all 9 arrivals in flight at once (one batch) — too short to judge.
    assert [r.sustained for r in a.rows] == [True, True, False, False, None]
    assert a.too_short == [8.0]
    assert a.max_sustained_rate == 1.0 and a.first_unsustained_rate == 2.0
    assert a.cost_per_1k_at_max_sustained == pytest.approx(3.6 / (0.9 * 3600) * 1000)
    assert [p.rate for p in a.slo_policy] == [0.5, 1.0, None]


def test_rate_sweep_cli_finds_the_known_capacity(fake: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "rs"
    res = runner.invoke(app, ["sweep", "--endpoint", fake.url, "--model", "fake-model", "--evalset", "dev",
                              "--rate", "3,30", "--concurrency", "2", "--requests", "15", "--warmup", "0",
                              "--slo-p95", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "rate-sweep.json").read_text())
    rows = {r["offered"]: r for r in data["analysis"]["rows"]}
    assert rows[3.0]["sustained"] and not rows[30.0]["sustained"]
    assert data["analysis"]["max_sustained_rate"] == 3.0
    hi = next(s for s in data["levels"] if s["offered_rate"] == 30.0)
    assert hi["n"] == hi["ok"] == 15
    assert hi["queued_s"]["p95"] > 0.3  # arrivals waited for one of the two slots
    assert hi["server"]["observed"] is False
    md = (out / "rate-sweep.md").read_text()
    assert "Highest sustained offered rate: 3 req/s" in md and "not observed" in md
    assert (out / "rate_vs_latency.png").stat().st_size > 1000


def test_closed_loop_sweep_with_duration(fake: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    res = runner.invoke(app, ["sweep", "--endpoint", fake.url, "--model", "fake-model", "--evalset", "dev",
                              "--concurrency", "1,2", "--requests", "200", "--duration", "1",
                              "--warmup", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "sweep.json").read_text())
    n = {s["concurrency"]: s["n"] for s in data["levels"]}
    assert 1 <= n[1] <= 7 and n[2] >= n[1] and n[2] <= 12  # loose: CI machines are busy
    assert all(s["not_sent"] == 200 - s["n"] for s in data["levels"])
    assert "at most 200 requests or 1 s per level" in (out / "sweep.md").read_text()


@pytest.mark.parametrize("args", [["--rate", "0"], ["--rate", "x"], ["--rate", "1", "--requests", "2"],
                                  ["--duration", "-1"], ["--rate", "1", "--reanalyse"]])
def test_bad_rate_options_exit_2(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "bad"
    res = runner.invoke(app, ["sweep", "--endpoint", "http://127.0.0.1:9/v1", "--out", str(out), *args])
    assert res.exit_code == 2, res.output
    assert not out.exists()


# -- grid (same module: same fake server) ---------------------------------------------------------

def test_parse_classes_and_context_block() -> None:
    from nlq2sql.errors import InputError
    from nlq2sql.load.grid import LengthClass, context_block, parse_classes

    assert parse_classes("short,huge:1500:256") == (LengthClass("short", 0, 0), LengthClass("huge", 1500, 256))
    for bad in ("nope", "x:1", "x:-1:2", "short,short", ""):
        with pytest.raises(InputError):
            parse_classes(bad)
    block = context_block("dev", 200, "retail")
    assert 800 <= len(block) <= 1100 and block.startswith("\n\nFor context only")
    assert context_block("dev", 0, "retail") == ""


def test_grid_cli_end_to_end(fake: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "grid"
    res = runner.invoke(app, ["grid", "--endpoint", fake.url, "--model", "fake-model", "--evalset", "dev",
                              "--concurrency", "1,2", "--classes", "short,tiny:64:16", "--requests", "3",
                              "--warmup", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "grid.json").read_text())
    assert {(c["class"], c["concurrency"]) for c in data["cells"]} == {
        ("short", 1), ("short", 2), ("tiny", 1), ("tiny", 2)}
    assert all(c["n"] == 3 for c in data["cells"])
    # The tiny class carried its context block and asked for a fixed output length.
    tiny_dir = Path(next(c["run_dir"] for c in data["cells"] if c["class"] == "tiny"))
    manifest = json.loads((tiny_dir / "manifest.json").read_text())
    assert manifest["context_suffix_chars"] > 200
    assert manifest["sampling"]["ignore_eos"] is True and manifest["sampling"]["max_tokens"] == 16
    md = (out / "grid.md").read_text()
    assert "| tiny (+64 context tokens, 16 free-text tokens (ignore_eos))" in md and "not observed" in md
    assert (out / "grid.png").stat().st_size > 1000


def test_grid_and_rate_sweeps_refuse_resume_with_force_before_any_server(tmp_path: Path) -> None:
    """Refused by the driver before a local server would start (no endpoint here), one check for all."""
    from nlq2sql.errors import InputError
    from nlq2sql.load import grid as gr
    from nlq2sql.load import openloop as ol
    from nlq2sql.load.modes import run_mode
    from nlq2sql.run.config import EvalConfig

    base = EvalConfig(evalset="dev", out=tmp_path / "out")
    for name, cfg in (("grid", gr.GridConfig(base=base, resume=True, force=True)),
                      ("rate-sweep", ol.RateSweepConfig(base=base, rates=(1.0,), resume=True, force=True))):
        with pytest.raises(InputError) as exc:
            run_mode(name, cfg)
        assert exc.value.field == "--force"
    assert not (tmp_path / "out").exists()
