"""Sample the server's own ``/metrics`` while a run is in flight.

The run records what the server said (running / waiting requests, KV-cache usage, prefix-cache
hits), each with its sample count; without ``/metrics``: not observed, never zero. Both metric names
vLLM has used (``gpu_cache_usage_perc`` and today's) are accepted."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp

from nlq2sql.records.run_parts import Gauge, ServerMetrics

__all__ = ["COUNTERS", "GAUGES", "MetricsSampler", "parse_metrics"]

#: logical name → accepted metric names (first found wins), newest first.
GAUGES = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}
COUNTERS = {
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "generation_tokens": ("vllm:generation_tokens",),
    "prompt_tokens": ("vllm:prompt_tokens",),
}


#: every metric name the sampler reads (a counter's ``_total`` sample is matched by its base name).
_WANTED = frozenset(n for names in {**GAUGES, **COUNTERS}.values() for n in names)


def _sample(line: str) -> tuple[str, float] | None:
    """(base name, value) of one exposition line when it is a sample the sampler reads.

    Only the name is looked at before the value is parsed: vLLM's ``/metrics`` is hundreds of
    histogram bucket lines per scrape, four scrapes a second, and none of them is read."""
    brace, space = line.find("{"), line.find(" ")
    end = brace if brace != -1 and (space == -1 or brace < space) else space
    if end <= 0:
        return None
    name = line[:end]
    base = name[:-6] if name.endswith("_total") else name
    if base not in _WANTED:
        return None
    rest = line[line.rindex("}") + 1:] if end == brace else line[end:]
    fields = rest.split()
    if not fields:
        raise ValueError(f"no value for {name}")
    return base, float(fields[0])  # a trailing timestamp is ignored


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text → {logical name: value summed over label sets}.

    Read line by line for the names in ``GAUGES`` and ``COUNTERS`` only: equal to
    ``prometheus_client``'s parser on those names (``tests/unit/transport/test_server_metrics.py``, on a real
    vLLM page) at ~30-50x less CPU per page (``benchmarks/bench_metrics_parse.py``) -- the full
    parser was most of the harness's own CPU in a CPU-server sweep."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        hit = _sample(line.strip())
        if hit is not None:
            totals[hit[0]] = totals.get(hit[0], 0.0) + hit[1]
    out: dict[str, float] = {}
    for logical, names in {**GAUGES, **COUNTERS}.items():
        for n in names:
            if n in totals:
                out[logical] = totals[n]
                break
    return out


class MetricsSampler:
    """Background scraper: start() before the load, stop() after; result() summarises."""

    def __init__(self, base_url: str, interval_s: float = 0.25) -> None:
        self.url = base_url.rstrip("/").removesuffix("/v1") + "/metrics"
        self.interval_s = interval_s
        # Running aggregates, not a list of samples: memory stays flat for a run of any length
        # (4 samples a second for hours against a real vLLM).
        self.n_samples = 0
        self._gauges: dict[str, list[float]] = {}  # name → [count, peak, sum]
        self.errors = 0
        self._task: asyncio.Task[None] | None = None
        self._first: dict[str, float] | None = None
        self._last: dict[str, float] | None = None

    async def _loop(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as sess:
            while True:
                try:
                    async with sess.get(self.url) as resp:
                        if resp.status != 200:
                            self.errors += 1
                        else:
                            parsed = parse_metrics(await resp.text())
                            parsed["t"] = time.time()
                            if self._first is None:
                                self._first = parsed
                            self._last = parsed
                            self.add(parsed)
                except (TimeoutError, aiohttp.ClientError, ValueError):
                    self.errors += 1
                await asyncio.sleep(self.interval_s)

    def add(self, parsed: dict[str, float]) -> None:
        self.n_samples += 1
        for name in GAUGES:
            if name in parsed:
                agg = self._gauges.setdefault(name, [0, float("-inf"), 0.0])
                agg[0] += 1
                agg[1] = max(agg[1], parsed[name])
                agg[2] += parsed[name]

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def result(self) -> ServerMetrics:
        """Peaks and means with sample counts; counter deltas over the sampled window (built as
        the summary's ``server_metrics`` section)."""
        if not self.n_samples:
            return ServerMetrics(observed=False, url=self.url, errors=self.errors,
                                 note="no /metrics samples: not observed")

        def gauge(name: str) -> Gauge:
            agg = self._gauges.get(name)
            return Gauge(n=int(agg[0]), peak=agg[1], mean=agg[2] / agg[0]) if agg else Gauge(n=0, note="not observed")

        first, last = self._first or {}, self._last or {}
        deltas = {k: last[k] - first[k] for k in COUNTERS if k in first and k in last}
        q = deltas.get("prefix_cache_queries")
        return ServerMetrics(observed=True, url=self.url, samples=self.n_samples, errors=self.errors,
                             interval_s=self.interval_s, running=gauge("running"), waiting=gauge("waiting"),
                             kv_cache_usage=gauge("kv_cache_usage"), counter_deltas=deltas,
                             prefix_cache_hit_rate=deltas["prefix_cache_hits"] / q
                             if q and "prefix_cache_hits" in deltas else None)
