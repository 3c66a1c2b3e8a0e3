"""Typed, versioned results of the serving-path probes (``probe cancel|health|prefix``).

The probes' ``STEM.json`` are contracts like every other load result (:mod:`.results`): the
one output layer validates each against its model before any file is written, the renderer
reads attributes, and :func:`.results.load_result` reads one back naming the file and field of
a bad one.  Server-side figures that ``/metrics`` did not show keep their sample count and a
note ("not observed"), never a zero.
"""

from __future__ import annotations

from typing import Literal

from nlq2sql.load.contract import _M, Pct, _Stamped

__all__ = ["CancelProbeResult", "CancelTrial", "HealthLoop", "HealthProbeResult", "HistMean", "PrefixCache",
           "PrefixProbeResult", "PrefixScenario", "PROBE_MODELS"]


class HistMean(_M):
    """Mean of a server histogram over the requests between two ``/metrics`` snapshots."""

    n: int
    mean: float | None
    note: str | None = None


class Unreported(_M):
    """A client-side count the server did not report (or reported as zero)."""

    n: int
    note: str


class _Probe(_Stamped):
    endpoint: str
    model: str


# -- cancel -------------------------------------------------------------------------------

class CancelTrial(_M):
    received_tokens: int
    disconnected: bool
    error: str | None
    finish_reason: str | None
    server_busy_before: bool
    to_idle_s: float | None
    polls: int
    tokens_after_disconnect: int | None
    note: str | None = None  # why a trial measured nothing (no /metrics, nothing to cancel)
    to_idle_lower_s: float | None = None
    generated_total: int | None = None
    would_have_generated: int | None = None


class CancelProbeResult(_Probe):
    kind: Literal["probe-cancel"] = "probe-cancel"
    probe: Literal["cancel"]
    k_tokens: int
    max_tokens: int
    trials: list[CancelTrial]
    poll_interval_s: float
    to_idle_s: Pct
    tokens_after_disconnect: Pct
    ignore_eos: bool


# -- health -------------------------------------------------------------------------------

class HealthLoop(_M):
    """``/health`` round trips: how many, how many answered 200, their latency."""

    n: int
    ok: int
    errors: int
    error_kinds: list[str]
    p50_s: float | None
    p95_s: float | None
    max_s: float | None


class PrefillRequests(_M):
    n: int
    ok: int
    parallel: int
    errors: list[str]
    prompt_tokens: Pct
    ttft_s: Pct
    load_wall_s: float


class HealthProbeResult(_Probe):
    kind: Literal["probe-health"] = "probe-health"
    probe: Literal["health"]
    interval_s: float
    idle: HealthLoop
    under_prefill: HealthLoop
    prefill_requests: PrefillRequests
    server_prefill_s: HistMean
    server_ttft_s: HistMean


# -- prefix -------------------------------------------------------------------------------

class PrefixCache(_M):
    """Prefix-cache hit rate in tokens, from the server's counters (hits / queries)."""

    rate: float | None
    hits: int | None
    queries: int | None
    note: str | None = None


class PrefixScenario(_M):
    n: int
    ok: int
    errors: list[str]
    client_ttft_s: Pct
    client_latency_s: Pct
    prompt_tokens: Pct
    cached_tokens_reported: Pct | Unreported
    prefix_cache: PrefixCache
    server_ttft_s: HistMean
    server_prefill_s: HistMean
    server_decode_s: HistMean
    server_queue_s: HistMean
    server_e2e_s: HistMean
    prefill_share: float | None


class PrefixProbeResult(_Probe):
    kind: Literal["probe-prefix"] = "probe-prefix"
    probe: Literal["prefix"]
    requests_per_scenario: int
    pad_words: int
    max_tokens: int
    concurrency: int
    scenarios: dict[str, PrefixScenario]


PROBE_MODELS: dict[str, type[_Stamped]] = {
    "probe-cancel": CancelProbeResult, "probe-health": HealthProbeResult, "probe-prefix": PrefixProbeResult,
}
