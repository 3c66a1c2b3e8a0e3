"""Sweep analysis on synthetic numbers, including seed 002's published tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from retail import retail_wh

from nlq2sql.errors import InputError
from nlq2sql.load import analysis as an
from nlq2sql.load import render as rn
from nlq2sql.load import sweep as sw
from nlq2sql.load.contract import LevelStats as Level
from nlq2sql.load.levels import client_stats, expand_evalset, inflight, intervals, level_stats
from nlq2sql.load.output import write_outputs
from nlq2sql.load.results import SweepResult
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.run_parts import ServerMetrics
from nlq2sql.stages.evalset import load_evalset

TH = an.Thresholds()

# Seed 002, "The Operating Knee" table (after the fix): concurrency → (req/s, p95 s).
SEED_KNEE = {1: (0.31, 3.24), 8: (2.22, 3.62), 16: (4.21, 3.91), 18: (4.29, 4.16), 24: (5.63, 4.32),
             32: (6.87, 4.6)}
SEED_EFFICIENCY = {1: 1.00, 8: 0.89, 16: 0.85, 18: 0.77, 24: 0.75, 32: 0.69}
SEED_COST = {8: 0.125, 16: 0.066, 18: 0.065, 24: 0.049, 32: 0.04}
# Before the fix: flat throughput, p95 growing linearly.
SEED_BEFORE = {1: (0.31, 3.6), 2: (0.31, 6.3), 4: (0.31, 12.8), 8: (0.31, 25.6), 16: (0.31, 50.9),
               32: (0.31, 102.0)}
# Beyond 32: throughput plateaus while p95 jumps.
SEED_BEYOND = {32: (6.63, 5.16), 40: (6.94, 8.54), 48: (6.93, 8.67)}


def pts(table: dict[int, tuple[float, float]]) -> list[an.Point]:
    return [an.Point(concurrency=c, req_per_s=t, p95=p, n=150) for c, (t, p) in sorted(table.items())]


def test_efficiency_matches_seed_table() -> None:
    rows = an.scaling([(c, t) for c, (t, _) in SEED_KNEE.items()])
    for r in rows:
        assert r.efficiency == pytest.approx(SEED_EFFICIENCY[r.concurrency], abs=0.01)
    # The seed's worked example: at 16, perfect scaling would be 4.96 req/s; 4.21 is ~85 %.
    r16 = next(r for r in rows if r.concurrency == 16)
    assert r16.req_per_s / r16.efficiency == pytest.approx(4.96)


def test_efficiency_with_external_baseline_matches_repeated_sweep() -> None:
    # The seed's clean repeat at 12/16/20/24 used thr(1) = 0.31 from the main sweep.
    rows = an.scaling([(12, 3.19), (16, 4.06), (20, 4.64), (24, 5.26)], baseline=(1, 0.31))
    assert [round(r.efficiency, 2) for r in rows] == [0.86, 0.82, 0.75, 0.71]


def test_baseline_is_lowest_level_when_one_is_missing() -> None:
    rows = an.scaling([(4, 2.0), (8, 3.0)])
    assert rows[0].efficiency == pytest.approx(1.0)
    assert rows[1].efficiency == pytest.approx(3.0 * 4 / (8 * 2.0))
    assert rows[1].marginal == pytest.approx((3.0 - 2.0) / (4 * 0.5))
    a = an.analyse([_level(4, 2.0, 1.0), _level(8, 3.0, 1.2)], TH)
    assert a.baseline_level == 4 and "c=4" in a.baseline_note


def test_knee_on_seed_numbers() -> None:
    rows = an.scaling([(c, t) for c, (t, _) in SEED_KNEE.items()])
    knee = an.find_knee(rows, TH)
    # Efficient through 16, bends at 18 (77 % < 80 %; 16→18 bought only 0.13 of a lane per request).
    assert knee.level == 18 and knee.last_efficient == 16
    assert any("efficiency 77% < 80%" in r for r in knee.reasons)
    assert any("marginal" in r for r in knee.reasons)
    # Without the dense 18 point, the knee is 24 (75.7 %), still after 16.
    rows = an.scaling([(c, t) for c, (t, _) in SEED_KNEE.items() if c != 18])
    assert an.find_knee(rows, TH).level == 24


def test_knee_by_marginal_gain_alone() -> None:
    # Efficiency stays high but the last step buys almost nothing.
    rows = an.scaling([(1, 1.0), (2, 2.0), (4, 3.9), (5, 4.0)])
    knee = an.find_knee(rows, an.Thresholds(efficiency=0.5))
    assert knee.level == 5 and knee.reasons == ["marginal gain 0.10 < 0.50 lane/request"]


def test_knee_none_and_single_level() -> None:
    rows = an.scaling([(1, 1.0), (2, 1.95), (4, 3.8)])
    assert an.find_knee(rows, TH).level is None
    assert an.find_knee(rows, TH).last_efficient == 4
    assert an.find_knee(an.scaling([(1, 1.0)]), TH).level is None


def test_serialized_curve_knees_at_two_and_saturates_at_one() -> None:
    rows = an.scaling([(c, t) for c, (t, _) in SEED_BEFORE.items()])
    assert an.find_knee(rows, TH).level == 2
    sat = an.find_saturation(pts(SEED_BEFORE), TH)
    assert sat.level == 1 and sat.next == 2 and sat.p95_rise > 0.5
    sig = an.serialized_signature(pts(SEED_BEFORE), TH)
    assert sig.present and sig.speedup == pytest.approx(1.0) and sig.p95_ratio > 25
    assert not an.serialized_signature(pts(SEED_KNEE), TH).present


def test_saturation_beyond_32() -> None:
    sat = an.find_saturation(pts(SEED_BEYOND), TH)
    assert sat.level == 32 and sat.next == 40
    assert sat.throughput_gain == pytest.approx(6.94 / 6.63 - 1)
    assert an.find_saturation(pts(SEED_KNEE), TH).level is None


def test_slo_policy_reproduces_seed() -> None:
    pol = an.slo_policy(pts(SEED_KNEE), [4.0, 4.5, 5.0, 3.0], cost_per_hour=1.0)
    by = {p.p95_target_s: p for p in pol}
    assert by[4.0].level == 16  # "p95 below 4 seconds: use the 16-request region"
    assert by[4.5].level == 24  # "below 4.5 seconds: the 20-24 request region"
    assert by[5.0].level == 32  # "lowest cost per query with p95 below 5 seconds: 32"
    assert by[5.0].cost_per_1k == pytest.approx(0.0404, abs=0.0005)
    assert by[3.0].level is None and "lowest p95 3.24 s at c=1" in by[3.0].note


def test_cost_per_1k_matches_seed() -> None:
    for c, expected in SEED_COST.items():
        assert an.cost_per_1k(SEED_KNEE[c][0], 1.0) == pytest.approx(expected, abs=0.0015)
    assert an.cost_per_1k(0.311, 1.0) == pytest.approx(0.893, abs=0.001)
    assert an.cost_per_1k(None, 1.0) is None and an.cost_per_1k(1.0, None) is None
    assert an.cost_per_1k(0.0, 1.0) is None


NOT_OBSERVED = {"n": 0, "peak": None, "mean": None, "note": "not observed"}


def _level(c: int, thr: float, p95: float, observed: bool = True) -> Level:
    """A synthetic level in level_stats' shape (the declared LevelStats contract)."""
    n = 32
    server = {"observed": observed, "samples": 40 if observed else 0, "interval_s": 0.25,
              "running": {"n": 40, "peak": c, "mean": c * 0.9} if observed else NOT_OBSERVED,
              "waiting": {"n": 40, "peak": 0, "mean": 0.0} if observed else NOT_OBSERVED,
              "kv_cache_usage": {"n": 40, "peak": 0.02, "mean": 0.01} if observed else NOT_OBSERVED,
              "prefix_cache_hit_rate": 0.9 if observed else None}
    return Level.from_json({"concurrency": c, "n": n, "ok": n, "good": n // 2, "schema_valid": n, "wall_s": n / thr,
            "req_per_s": thr, "goodput_per_s": thr / 2, "output_tok_per_s": thr * 40, "output_tokens": 40 * n,
            "errors": {}, "finish_reasons": {"stop": n},
            "latency_s": {"n": n, "p50": p95 * 0.8, "p95": p95, "p99": p95 * 1.1, "mean": p95 * 0.8},
            "ttft_s": {"n": n, "p50": 0.05, "p95": 0.1, "p99": 0.12, "mean": 0.06},
            "itl_s": {"n": n, "p50": 0.02, "p95": 0.03, "p99": 0.04, "mean": 0.02},
            "completion_tokens": {"n": n, "p50": 40, "p95": 44, "p99": 45, "mean": 40},
            "prompt_tokens": {"n": n, "p50": 300, "p95": 310, "p99": 311, "mean": 300},
            "server": server, "run_dir": f"levels/c{c}",
            "client": {"cpu_s": 1.0, "wall_s": n / thr, "cpu_share_of_core": 0.1, "cpu_ms_per_request": 30.0,
                       "n": n, "inflight_peak": c, "inflight_mean": c * 0.95, "inflight_n": n}})


def _result(levels: list[Level], cost: float | None = 1.0, slo: tuple[float, ...] = (4.0,)) -> SweepResult:
    return SweepResult.from_json({"kind": "sweep", "model": "m", "evalset": "heldout", "endpoint_label": "http://x/v1",
            "cpu_label": "CPU-only", "server": {"endpoint": "http://x/v1"},
            "config": {"levels": [s.concurrency for s in levels], "requests": 32, "slo_p95": list(slo),
                       "gpu_cost_per_hour": cost, "max_tokens": 96, "structured": "json", "prompt": "baseline",
                       "warmup": 0},
            "levels": levels, "analysis": an.analyse(levels, TH, slo, cost), "notes": ["a note"]})


def test_render_and_plots_from_synthetic_levels(tmp_path: Path) -> None:
    levels = [_level(c, t, p) for c, (t, p) in SEED_KNEE.items()]
    res = write_outputs(tmp_path, "sweep", _result(levels), rn.render_markdown, sw.SweepMode.plot)
    md = (tmp_path / "sweep.md").read_text()
    assert "**Knee: c=18**" in md and "last efficient level c=16" in md
    assert "Thresholds: knee = first level where scaling efficiency < 80%" in md
    assert "| ≤ 4 s | c=16 | 4.21 | 3.91 s | 150" not in md  # n comes from the level (32), not the seed
    assert "| ≤ 4 s | c=16 | 4.21 | 3.91 s | 32 |" in md
    assert "(n=40)" in md  # server gauges carry their sample counts
    assert "**CPU-only**" in md and "- a note" in md
    assert res.plots is not None
    for p in res.plots.values():
        assert Path(p).stat().st_size > 5000
    on_disk = json.loads((tmp_path / "sweep.json").read_text())
    assert on_disk["analysis"]["knee"]["level"] == 18


def test_render_without_metrics_says_not_observed(tmp_path: Path) -> None:
    levels = [_level(1, 1.0, 1.0, observed=False), _level(2, 1.9, 1.1, observed=False)]
    md = rn.render_markdown(_result(levels, cost=None, slo=()))
    assert "not observed" in md and "| 0 /" not in md
    assert "Cost assumes" not in md and "SLO policy" not in md


def test_level_stats_from_records() -> None:
    recs = []
    for i in range(4):
        recs.append({"outcome": "ok", "raw_intent": {"intent": "x"}, "correct_final": i < 2,
                     "completion_tokens": 10, "prompt_tokens": 100, "latency_s": 1.0 + i, "ttft_s": 0.1,
                     "itl_mean_s": 0.02, "started": 100.0 + i * 0.5, "finish_reason": "stop"})
    recs.append({"outcome": "timeout", "raw_intent": None, "correct_final": False, "completion_tokens": None,
                 "latency_s": None, "started": 100.0, "finish_reason": None})
    recs.append({"outcome": "ok", "raw_intent": None, "correct_final": False, "completion_tokens": 96,
                 "latency_s": 2.0, "ttft_s": 0.1, "started": 101.0, "finish_reason": "length"})
    recs = [ItemRecord.from_json({"id": str(i), "question": "q", **r}) for i, r in enumerate(recs)]
    unseen = ServerMetrics(observed=False, note="no /metrics samples: not observed")
    st = level_stats(recs, 10.0, unseen, 4, run_dir="r",
                     client=client_stats(None, None, len(recs), inflight(intervals(recs))))
    assert st.n == 6 and st.ok == 5 and st.good == 2 and st.schema_valid == 4
    assert st.req_per_s == pytest.approx(0.5) and st.goodput_per_s == pytest.approx(0.2)
    assert st.output_tok_per_s == pytest.approx((40 + 96) / 10)
    assert st.errors == {"timeout": 1} and st.finish_reasons["length"] == 1
    assert st.latency_s.n == 5
    assert st.server.observed is False and st.server.running.note == "not observed"
    assert inflight(intervals(recs)).inflight_peak == 4


def test_inflight_timeline() -> None:
    assert inflight([(0, 2), (1, 3)]).to_json() == {"inflight_peak": 2, "inflight_mean": pytest.approx(4 / 3),
                                                    "inflight_n": 2}
    assert inflight([(0, 1), (1, 2)]).inflight_peak == 1  # back-to-back is not overlap
    assert inflight([]).inflight_peak is None


def test_expand_evalset_cycles_with_unique_ids(tmp_path: Path) -> None:
    path = expand_evalset("dev", 45, tmp_path, "retail")
    es = load_evalset(path, retail_wh())  # a valid eval set in its own right
    ids = [c.id for c in es.cases]
    n = len(load_evalset("dev", retail_wh()).cases)
    assert len(ids) == 45 == len(set(ids))
    assert ids[0].endswith("#1") and ids[n].endswith("#2") and ids[n].split("#")[0] == ids[0].split("#")[0]


def test_parse_server_sweep() -> None:
    assert sw.parse_server_sweep("max-num-seqs=1,4,16") == ("max_num_seqs", (1, 4, 16))
    for bad in ("max-num-seqs", "gpu=1", "max-num-seqs=a", "max-num-seqs=0"):
        with pytest.raises(InputError):
            sw.parse_server_sweep(bad)


def test_validate_rejects_bad_config() -> None:
    from nlq2sql.run.config import EvalConfig

    with pytest.raises(InputError) as exc:
        sw.SweepConfig(base=EvalConfig(), requests=0)
    assert exc.value.field == "--requests"
    with pytest.raises(InputError) as exc:
        sw.SweepConfig(base=EvalConfig(), slo_p95=(-1.0,))
    assert exc.value.field == "--slo-p95"


def test_a_library_caller_gets_the_threshold_checks_the_cli_has(tmp_path: Path) -> None:
    from nlq2sql.load.analysis import Thresholds
    from nlq2sql.load.sweep import SweepConfig
    from nlq2sql.run.config import EvalConfig

    base = EvalConfig(out=tmp_path / "s")
    SweepConfig(base=base, levels=(1, 2))  # the defaults pass
    for th, field in ((Thresholds(efficiency=1.5), "--efficiency-threshold"),
                      (Thresholds(marginal=-0.1), "--marginal-threshold"),
                      (Thresholds(flat_pct=float("nan")), "--flat-pct")):
        with pytest.raises(InputError) as exc:
            SweepConfig(base=base, levels=(1, 2), thresholds=th)
        assert exc.value.field == field
    assert not (tmp_path / "s").exists()
