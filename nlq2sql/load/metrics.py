"""One-shot ``/metrics`` scrapes for probes: gauges, counters and histogram ``_sum`` / ``_count``.

Snapshots at chosen moments whose deltas give means over exactly the probe's requests. An endpoint
without ``/metrics`` yields ``None``: the caller reports "not observed", never zero."""

from __future__ import annotations

from dataclasses import dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from nlq2sql.records.typed import Num, Typed
from nlq2sql.transport.server_metrics import parse_metrics

__all__ = ["EXTRA_COUNTERS", "HISTOGRAMS", "HistMean", "PrefixCache", "Snapshot", "counter_delta", "hist_delta",
           "hit_rate", "parse_snapshot", "root_url", "scrape"]

#: logical name → accepted histogram names (first found wins).
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
    "prefill": ("vllm:request_prefill_time_seconds",),
    "decode": ("vllm:request_decode_time_seconds",),
    "inference": ("vllm:request_inference_time_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
}
EXTRA_COUNTERS = {"prompt_tokens_cached": ("vllm:prompt_tokens_cached",)}


def root_url(base_url: str) -> str:
    """``http://h:p/v1`` → ``http://h:p``."""
    return base_url.rstrip("/").removesuffix("/v1")


@dataclass(frozen=True)
class Snapshot:
    """One ``/metrics`` page as the probes read it: gauges and counters by logical name
    (``transport.server_metrics``' names plus ``EXTRA_COUNTERS``), each summed over its label
    sets, and the ``HISTOGRAMS`` found as (sum, count) pairs; a name the page lacks is absent."""

    values: dict[str, float] = field(default_factory=dict)
    hist: dict[str, tuple[float, float]] = field(default_factory=dict)


def parse_snapshot(text: str) -> Snapshot:
    """Prometheus text → gauges/counters (logical names) plus ``hist`` {name: (sum, count)}."""
    values = dict(parse_metrics(text))
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    totals: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_sum"):
                sums[s.name[:-4]] = sums.get(s.name[:-4], 0.0) + float(s.value)
            elif s.name.endswith("_count"):
                counts[s.name[:-6]] = counts.get(s.name[:-6], 0.0) + float(s.value)
            elif s.name.endswith("_total"):
                totals[s.name[:-6]] = totals.get(s.name[:-6], 0.0) + float(s.value)
    hist: dict[str, tuple[float, float]] = {}
    for logical, names in HISTOGRAMS.items():
        for n in names:
            if n in sums and n in counts:
                hist[logical] = (sums[n], counts[n])
                break
    for logical, names in EXTRA_COUNTERS.items():
        for n in names:
            if n in totals:
                values[logical] = totals[n]
                break
    return Snapshot(values=values, hist=hist)


async def scrape(session: aiohttp.ClientSession, base_url: str) -> Snapshot | None:
    """One snapshot, or ``None`` when the endpoint has no readable ``/metrics``."""
    try:
        async with session.get(root_url(base_url) + "/metrics") as resp:
            if resp.status != 200:
                return None
            return parse_snapshot(await resp.text())
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None


def counter_delta(before: Snapshot | None, after: Snapshot | None, name: str) -> float | None:
    """A counter's increase between two snapshots; ``None`` when either lacks it."""
    if before is None or after is None or name not in before.values or name not in after.values:
        return None
    return float(after.values[name]) - float(before.values[name])


class HistMean(Typed):
    """Mean of a server histogram over the requests between two snapshots, with its count."""

    n: int
    mean: Num | None
    note: str | None = None  # "not observed"


class PrefixCache(Typed):
    """Prefix-cache hit rate in tokens, from the server's counters (hits / queries)."""

    rate: Num | None
    hits: int | None
    queries: int | None
    note: str | None = None  # "not observed"


def hist_delta(before: Snapshot | None, after: Snapshot | None, name: str) -> HistMean:
    """Mean of a server histogram over the requests between two snapshots, with its count."""
    b = before.hist.get(name) if before is not None else None
    a = after.hist.get(name) if after is not None else None
    if a is None or b is None:
        return HistMean(n=0, mean=None, note="not observed")
    n = a[1] - b[1]
    return HistMean(n=int(n), mean=(a[0] - b[0]) / n if n > 0 else None)


def hit_rate(before: Snapshot | None, after: Snapshot | None) -> PrefixCache:
    """Prefix-cache hit rate (tokens) from counter deltas: hits / queries."""
    q = counter_delta(before, after, "prefix_cache_queries")
    h = counter_delta(before, after, "prefix_cache_hits")
    if q is None or h is None:
        return PrefixCache(rate=None, hits=None, queries=None, note="not observed")
    return PrefixCache(rate=h / q if q > 0 else None, hits=int(h), queries=int(q))
