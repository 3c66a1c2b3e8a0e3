"""Serialization verdict rules on synthetic evidence, the staircase index, /metrics snapshots."""

from __future__ import annotations

import pytest

from nlq2sql.load.contract import LevelStats as Level
from nlq2sql.load.metrics import counter_delta, hist_delta, hit_rate, parse_snapshot
from nlq2sql.load.serialization import VerdictThresholds, decide, evidence, staircase_index
from nlq2sql.load.server_results import Evidence, Staircase

TH = VerdictThresholds()


def ev(**kw: object) -> Evidence:
    base: dict[str, object] = dict.fromkeys(Evidence.model_fields)  # the figures no rule reads: None
    base |= {"level": 8, "n_1": 6, "n_k": 24, "speedup": 3.5, "inflight_mean": 7.6, "inflight_peak": 8,
             "server_observed": True, "running_peak": 8, "running_mean": 7.2, "waiting_peak": 0, "waiting_mean": 0.0,
             "client_cpu_share": 0.2, "staircase_index": 0.05}
    base.update(kw)
    return Evidence.model_validate(base)


def test_batched() -> None:
    d = decide(ev(), TH)
    assert d.verdict == "batched" and "×3.50" in d.rule and not d.caveats


def test_serialized_at_engine() -> None:
    # max-num-seqs 1: the engine runs one, the rest wait inside it.
    d = decide(ev(speedup=1.02, running_peak=1, running_mean=0.98, waiting_peak=7, waiting_mean=6.4,
                  staircase_index=0.97), TH)
    assert d.verdict == "serialized-at-engine" and "6.4 waited" in d.rule and not d.caveats
    d = decide(ev(speedup=3.0, running_peak=1, running_mean=0.75, waiting_mean=2.3, staircase_index=0.99), TH)
    assert d.verdict == "serialized-at-engine" and "load curve disagrees" in d.caveats[0]


def test_serialized_upstream() -> None:
    # A lock in front: the client holds 7.5 in flight, the engine sees one and queues nothing.
    d = decide(ev(speedup=0.98, running_peak=1, running_mean=0.9, waiting_peak=0, waiting_mean=0.0,
                  staircase_index=1.01), TH)
    assert d.verdict == "serialized-upstream" and "saw only 0.9" in d.rule


def test_seed_before_fix_without_metrics_is_serialized_but_unplaced() -> None:
    # Seed 002 before the fix: flat 0.31 req/s, staircase 1x/2x/3x, no scheduler metrics.
    d = decide(ev(speedup=1.0, server_observed=False, running_peak=None, running_mean=None,
                  waiting_peak=None, waiting_mean=None, staircase_index=1.0), TH)
    assert d.verdict == "inconclusive" and "serialized somewhere beyond the client" in d.rule
    assert any("not observed" in c for c in d.caveats)


def test_batched_without_metrics() -> None:
    d = decide(ev(server_observed=False, running_peak=None, running_mean=None), TH)
    assert d.verdict == "batched" and "endpoint-level" in d.rule


def test_client_bound_by_cpu_and_by_missing_concurrency() -> None:
    d = decide(ev(speedup=1.1, client_cpu_share=0.97, running_peak=2, running_mean=1.1), TH)
    assert d.verdict == "client-bound" and "97% of a core" in d.rule
    d = decide(ev(inflight_mean=1.0, speedup=1.0), TH)
    assert d.verdict == "client-bound" and "did not issue" in d.rule
    # A busy harness that still scaled is a caveat, not the verdict.
    d = decide(ev(client_cpu_share=0.9), TH)
    assert d.verdict == "batched" and any("may cap" in c for c in d.caveats)


def test_contradicting_staircase_makes_it_inconclusive() -> None:
    assert decide(ev(staircase_index=0.95), TH).verdict == "inconclusive"
    d = decide(ev(speedup=1.0, running_peak=1, running_mean=1.0, waiting_mean=6.0, staircase_index=0.05), TH)
    assert d.verdict == "inconclusive" and "disagrees" in d.rule


def test_engine_batches_but_does_not_gain() -> None:
    d = decide(ev(speedup=1.2, running_mean=7.0), TH)
    assert d.verdict == "batched" and any("engine itself is the limit" in c for c in d.caveats)


def test_staircase_index() -> None:
    assert staircase_index([1.0, 2.0, 3.0, 4.0], 1.0) == pytest.approx(1.0)
    assert staircase_index([2.1, 2.0, 2.2, 2.05], 1.0) == pytest.approx(0.065)
    assert staircase_index([1.0], 1.0) is None and staircase_index([1.0, 2.0], 0.0) is None


METRICS_A = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.05
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 400.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 50.0
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 2.0
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 2.0
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 0.5
"""
METRICS_B = (METRICS_A.replace("1000.0", "2000.0").replace("400.0", "1300.0").replace("} 50.0", "} 80.0")
             .replace("_count{engine=\"0\",model_name=\"m\"} 2.0", "_count{engine=\"0\",model_name=\"m\"} 6.0")
             .replace("_sum{engine=\"0\",model_name=\"m\"} 0.5", "_sum{engine=\"0\",model_name=\"m\"} 1.7"))


def test_snapshot_deltas() -> None:
    a, b = parse_snapshot(METRICS_A), parse_snapshot(METRICS_B)
    assert a.values["running"] == 2 and a.values["waiting"] == 1 and a.values["kv_cache_usage"] == pytest.approx(0.05)
    assert counter_delta(a, b, "generation_tokens") == 30
    assert hit_rate(a, b).to_json() == {"rate": pytest.approx(0.9), "hits": 900, "queries": 1000}
    assert hist_delta(a, b, "prefill").to_json() == {"n": 4, "mean": pytest.approx(0.3)}
    assert hist_delta(a, b, "decode").note == "not observed"
    assert hit_rate(None, b).rate is None and counter_delta(a, None, "generation_tokens") is None


def _level(c: int, n: int, thr: float, p95: float, server: dict | None = None, client: dict | None = None) -> Level:
    off = {"n": 0, "peak": None, "mean": None, "note": "not observed"}
    pct = {"n": n, "mean": 1.0, "p50": 1.0, "p95": p95, "p99": p95}
    return Level.from_json({
        "concurrency": c, "n": n, "ok": n, "good": n, "schema_valid": n, "wall_s": n / thr, "req_per_s": thr,
        "goodput_per_s": thr, "output_tok_per_s": thr, "output_tokens": n, "errors": {}, "finish_reasons": {},
        "latency_s": pct, "ttft_s": pct, "itl_s": pct, "completion_tokens": pct, "prompt_tokens": pct,
        "server": server or {"observed": False, "samples": 0, "interval_s": None, "running": off, "waiting": off,
                             "kv_cache_usage": off, "prefix_cache_hit_rate": None},
        "run_dir": f"levels/c{c}",
        "client": client or {"cpu_s": None, "cpu_share_of_core": None, "cpu_ms_per_request": None,
                             "inflight_peak": None, "inflight_mean": None, "inflight_n": 0}})


def test_evidence_is_written_as_the_flat_figures_it_was() -> None:
    """The typed evidence dumps to the keys, order and values the result has always had."""
    gauge = {"n": 5, "peak": 3.0, "mean": 1.5}
    off = {"n": 0, "peak": None, "mean": None, "note": "not observed"}
    single = _level(1, 6, 0.5, 2.0)
    loaded = _level(8, 24, 1.75, 4.0,
                    server={"observed": True, "samples": 9, "interval_s": 0.5, "running": gauge, "waiting": off,
                            "kv_cache_usage": off, "prefix_cache_hit_rate": None},
                    client={"cpu_s": 1.0, "cpu_share_of_core": 0.25, "cpu_ms_per_request": 3.5, "inflight_peak": 8,
                            "inflight_mean": 7.5, "inflight_n": 24})
    stair = Staircase(n=4, ok=4, errors=[], solo_n=2, index=0.1)
    assert evidence(single, loaded, stair).model_dump() == {
        "level": 8, "thr_1": 0.5, "thr_k": 1.75, "n_1": 6, "n_k": 24, "speedup": 3.5, "p95_1": 2.0, "p95_k": 4.0,
        "p95_ratio": 2.0, "inflight_mean": 7.5, "inflight_peak": 8, "server_observed": True, "server_samples": 9,
        "running_peak": 3.0, "running_mean": 1.5, "running_n": 5, "waiting_peak": None, "waiting_mean": None,
        "waiting_n": 0, "client_cpu_share": 0.25, "client_cpu_ms_per_request": 3.5, "staircase_index": 0.1}
    assert list(evidence(single, loaded, None).model_dump()) == list(Evidence.model_fields)
