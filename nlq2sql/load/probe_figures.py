"""The probes' figures as typed objects in the order their files hold them (see :mod:`.figures`):
built while probing, turned into ``probe-*.json`` only when written.  The pydantic models of
:mod:`.probe_results` stay the read contract."""

from __future__ import annotations

from typing import Any

from nlq2sql.load.figures import UNSET, Fig, Num, Pct, UnsetType
from nlq2sql.load.metrics import HistMeanSeen, PrefixHits

__all__ = ["CancelOut", "CancelTrialOut", "HealthLoopOut", "HealthOut", "PrefillRequestsOut", "PrefixOut",
           "ScenarioOut", "Stream"]


class Stream(Fig, kw_only=True):
    """One streamed chat request as the client saw it (not written: the probes' rows are)."""

    status: int | None
    error: str | None
    ttft_s: Num | None
    latency_s: Num | None
    chunks: int  # content chunks received (≈ tokens)
    finish_reason: str | None
    usage: dict[str, Any] | None  # the server's usage object, as sent
    disconnected: bool
    t_start: float
    t_disconnect: float | UnsetType = UNSET


class CancelTrialOut(Fig, kw_only=True):
    received_tokens: int
    disconnected: bool
    error: str | None
    finish_reason: str | None
    server_busy_before: bool
    to_idle_s: Num | None
    to_idle_lower_s: Num | None | UnsetType = UNSET
    polls: int
    generated_total: int | None | UnsetType = UNSET
    tokens_after_disconnect: int | None
    would_have_generated: int | UnsetType = UNSET
    note: str | UnsetType = UNSET  # why a trial measured nothing (no /metrics, nothing to cancel)


class CancelOut(Fig, kw_only=True):
    probe: str = "cancel"
    k_tokens: int
    max_tokens: int
    trials: list[CancelTrialOut]
    poll_interval_s: Num
    to_idle_s: Pct
    tokens_after_disconnect: Pct
    ignore_eos: bool
    # What ``run_probe`` stamps on every probe's result, last (each result declares them: msgspec puts
    # a base class's fields first).
    kind: str | UnsetType = UNSET
    endpoint: str | UnsetType = UNSET
    model: str | UnsetType = UNSET
    created: float | UnsetType = UNSET


class HealthLoopOut(Fig):
    """``/health`` round trips: how many, how many answered 200, their latency."""

    n: int
    ok: int
    errors: int
    error_kinds: list[str]
    p50_s: Num | None
    p95_s: Num | None
    max_s: Num | None


class PrefillRequestsOut(Fig):
    n: int
    ok: int
    parallel: int
    errors: list[str]
    prompt_tokens: Pct
    ttft_s: Pct
    load_wall_s: Num


class HealthOut(Fig, kw_only=True):
    probe: str = "health"
    interval_s: Num
    idle: HealthLoopOut
    under_prefill: HealthLoopOut
    prefill_requests: PrefillRequestsOut
    server_prefill_s: HistMeanSeen
    server_ttft_s: HistMeanSeen
    kind: str | UnsetType = UNSET
    endpoint: str | UnsetType = UNSET
    model: str | UnsetType = UNSET
    created: float | UnsetType = UNSET


class ScenarioOut(Fig):
    n: int
    ok: int
    errors: list[str]
    client_ttft_s: Pct
    client_latency_s: Pct
    prompt_tokens: Pct
    cached_tokens_reported: dict[str, Num | str | None]  # percentiles, or n and why not reported
    prefix_cache: PrefixHits
    server_ttft_s: HistMeanSeen
    server_prefill_s: HistMeanSeen
    server_decode_s: HistMeanSeen
    server_queue_s: HistMeanSeen
    server_e2e_s: HistMeanSeen
    prefill_share: Num | None


class PrefixOut(Fig, kw_only=True):
    probe: str = "prefix"
    requests_per_scenario: int
    pad_words: int
    max_tokens: int
    concurrency: int
    scenarios: dict[str, ScenarioOut]
    kind: str | UnsetType = UNSET
    endpoint: str | UnsetType = UNSET
    model: str | UnsetType = UNSET
    created: float | UnsetType = UNSET
