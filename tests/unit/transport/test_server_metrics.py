"""The sampler's line parser reads what prometheus_client's parser reads, on the names it uses."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from repo_paths import FIXTURES

from nlq2sql.transport import server_metrics as sm

FIXTURE = FIXTURES / "vllm_metrics_cpu_0.32.txt"  # a real CPU vLLM 0.32 page


def reference(text: str) -> dict[str, float]:
    """The previous implementation: the full Prometheus parser, then the same name lookup."""
    totals: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            base = s.name[:-6] if s.name.endswith("_total") else s.name
            totals[base] = totals.get(base, 0.0) + float(s.value)
    out: dict[str, float] = {}
    for logical, names in {**sm.GAUGES, **sm.COUNTERS}.items():
        for n in names:
            if n in totals:
                out[logical] = totals[n]
                break
    return out


def test_real_vllm_page_parses_as_the_reference_does() -> None:
    text = FIXTURE.read_text()
    got = sm.parse_metrics(text)
    assert got == reference(text)
    assert set(got) == set(sm.GAUGES) | set(sm.COUNTERS) and got["prefix_cache_queries"] > 0


@pytest.mark.parametrize("text", [
    # label values with spaces and braces, two label sets summed, a timestamp, NaN, _created skipped
    '# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n'
    'vllm:num_requests_running{model_name="a b}c",engine="0"} 3.0\n'
    'vllm:num_requests_running{model_name="d",engine="1"} 2 1700000000000\n',
    '# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{m="x"} 7\n'
    'vllm:prefix_cache_hits_created{m="x"} 1.7e9\n# TYPE vllm:kv_cache_usage_perc gauge\n'
    'vllm:kv_cache_usage_perc NaN\n',
    # the old metric name is still found when the new one is absent
    '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{e="0"} 0.25\n',
])
def test_edge_lines_match_the_reference(text: str) -> None:
    got, ref = sm.parse_metrics(text), reference(text)
    assert got.keys() == ref.keys()
    assert all(got[k] == ref[k] or (got[k] != got[k] and ref[k] != ref[k]) for k in got)  # NaN == NaN here


def test_a_sample_without_a_value_is_an_error_the_sampler_counts() -> None:
    with pytest.raises(ValueError):
        sm.parse_metrics("vllm:num_requests_running{a=\"b\"}\n")
