"""Typed, versioned results of the serving-path probes (``probe cancel|health|prefix``), contracts
like every load result (:mod:`.results`). Figures ``/metrics`` did not show keep their sample
count and "not observed", never a zero."""

from __future__ import annotations

from typing import Literal

from nlq2sql.load.contract import _Result
from nlq2sql.load.metrics import HistMean, PrefixCache
from nlq2sql.records.summary_parts import Percentiles
from nlq2sql.records.typed import Num, Typed

__all__ = ["CancelProbeResult", "CancelTrial", "HealthLoop", "HealthProbeResult", "PROBE_MODELS", "PrefillRequests",
           "PrefixProbeResult", "PrefixScenario", "Unreported"]


class Unreported(Typed):
    """A client-side count the server did not report (or reported as zero)."""

    n: int
    note: str


class _Probe(_Result):
    """What a probe mode (``probes.ProbeMode``) stamps on its result."""

    kind: str
    endpoint: str
    model: str
    created: float | None = None
    elapsed_s: float | None = None


# -- cancel -------------------------------------------------------------------------------

class CancelTrial(Typed):
    received_tokens: int
    disconnected: bool
    error: str | None
    finish_reason: str | None
    server_busy_before: bool
    to_idle_s: Num | None
    to_idle_lower_s: Num | None = None
    polls: int
    generated_total: int | None = None
    tokens_after_disconnect: int | None
    would_have_generated: int | None = None
    note: str | None = None  # why a trial measured nothing (no /metrics, nothing to cancel)


class CancelProbeResult(_Probe):
    kind: Literal["probe-cancel"] = "probe-cancel"
    probe: Literal["cancel"]
    k_tokens: int
    max_tokens: int
    trials: list[CancelTrial]
    poll_interval_s: Num
    to_idle_s: Percentiles
    tokens_after_disconnect: Percentiles
    ignore_eos: bool


# -- health -------------------------------------------------------------------------------

class HealthLoop(Typed):
    """``/health`` round trips: how many, how many answered 200, their latency."""

    n: int
    ok: int
    errors: int
    error_kinds: list[str]
    p50_s: Num | None
    p95_s: Num | None
    max_s: Num | None


class PrefillRequests(Typed):
    n: int
    ok: int
    parallel: int
    errors: list[str]
    prompt_tokens: Percentiles
    ttft_s: Percentiles
    load_wall_s: Num


class HealthProbeResult(_Probe):
    kind: Literal["probe-health"] = "probe-health"
    probe: Literal["health"]
    interval_s: Num
    idle: HealthLoop
    under_prefill: HealthLoop
    prefill_requests: PrefillRequests
    server_prefill_s: HistMean
    server_ttft_s: HistMean


# -- prefix -------------------------------------------------------------------------------

class PrefixScenario(Typed):
    n: int
    ok: int
    errors: list[str]
    client_ttft_s: Percentiles
    client_latency_s: Percentiles
    prompt_tokens: Percentiles
    cached_tokens_reported: Percentiles | Unreported
    prefix_cache: PrefixCache
    server_ttft_s: HistMean
    server_prefill_s: HistMean
    server_decode_s: HistMean
    server_queue_s: HistMean
    server_e2e_s: HistMean
    prefill_share: Num | None


class PrefixProbeResult(_Probe):
    kind: Literal["probe-prefix"] = "probe-prefix"
    probe: Literal["prefix"]
    requests_per_scenario: int
    pad_words: int
    max_tokens: int
    concurrency: int
    scenarios: dict[str, PrefixScenario]


PROBE_MODELS: dict[str, type[_Probe]] = {
    "probe-cancel": CancelProbeResult, "probe-health": HealthProbeResult, "probe-prefix": PrefixProbeResult,
}
