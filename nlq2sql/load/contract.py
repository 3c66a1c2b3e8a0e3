"""The parts every typed load result shares (:mod:`.results`, :mod:`.probe_results`,
:mod:`.server_results`): the base models, percentiles and one load level's stats."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Arrivals", "ClientSeen", "Gauge", "LevelStats", "Machine", "Pct", "ServerSeen"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Pct(_M):
    """Percentiles of one measured quantity, with the sample count (``score.percentiles``)."""

    n: int
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None  # capacity's token lengths


class _Result(_M):
    record_version: int | None = None  # absent: written before results were versioned
    created: float | None = None
    elapsed_s: float | None = None


class Gauge(_M):
    """A server gauge sampled from ``/metrics`` during a level: peak and mean over n samples."""

    n: int
    peak: float | None
    mean: float | None
    note: str | None = None  # "not observed"


class ServerSeen(_M):
    observed: bool
    samples: int
    interval_s: float | None
    running: Gauge
    waiting: Gauge
    kv_cache_usage: Gauge
    prefix_cache_hit_rate: float | None


class ClientSeen(_M):
    """The harness's own CPU during the level and the requests it had in flight."""

    cpu_s: float | None
    wall_s: float | None = None
    cpu_share_of_core: float | None
    cpu_ms_per_request: float | None
    n: int | None = None
    note: str | None = None  # a re-read run: CPU not measured
    inflight_peak: int | None
    inflight_mean: float | None
    inflight_n: int


class Machine(_M):
    loadavg_1m_start: float
    loadavg_1m_end: float
    cpus: int | None


class Arrivals(_M):
    """Open loop: realised arrival rate and the late/early latency growth of one level."""

    n: int
    realised_rate: float | None
    early_median_s: float | None
    late_median_s: float | None
    growth: float | None


class LevelStats(_M):
    """One load level (an ordinary run directory) as every load mode reports it."""

    concurrency: int
    n: int
    ok: int
    good: int
    schema_valid: int
    wall_s: float | None
    req_per_s: float | None
    goodput_per_s: float | None
    # Correct answers per second whose request met every per-request SLO (--slo); absent: no SLO given.
    correct_goodput_per_s: float | None = None
    output_tok_per_s: float | None
    output_tokens: int
    errors: dict[str, int]
    finish_reasons: dict[str, int]
    latency_s: Pct
    ttft_s: Pct
    itl_s: Pct
    completion_tokens: Pct
    prompt_tokens: Pct
    latency_from_arrival_s: Pct | None = None  # absent in sweeps from before the open loop
    queued_s: Pct | None = None
    server: ServerSeen
    run_dir: str
    offered_rate: float | None = None
    duration_s: float | None = None
    not_sent: int = 0
    client: ClientSeen
    machine: Machine | None = None
    arrivals: Arrivals | None = None  # rate sweeps
