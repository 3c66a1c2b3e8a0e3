"""Typed results about the server's own limits (serialization verdict, KV capacity), declared and
registered like every load result (:mod:`.results`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nlq2sql.load.contract import LevelStats, _Result, _Stamped
from nlq2sql.records.summary_parts import Percentiles
from nlq2sql.records.typed import Num, Typed
from nlq2sql.run.endpoint_facts import EndpointFacts

__all__ = ["CapacityResult", "ContextBudget", "Evidence", "KvBudget", "KvNeed", "KvPeak", "KvPerToken",
           "SerializationResult", "SerializationSettings", "Staircase"]


# -- serialization ------------------------------------------------------------------------

class SerializationSettings(Typed):
    level: int
    requests_single: int
    warmup: int
    requests_level: int
    staircase: int
    max_tokens: int
    structured: str


class Staircase(Typed):
    """N processes sending one request each at the same moment, and the single service time."""

    n: int
    ok: int
    errors: list[str]
    solo_n: int
    service_s: Num | None = None
    solo_s: list[Num] = Field(default_factory=list)
    solo_spread: Num | None = None
    completion_s: list[Num] = Field(default_factory=list)
    ratios: list[Num] = Field(default_factory=list)
    send_spread_s: Num | None = None
    index: Num | None
    note: str | None = None  # too few successful requests to judge


class Evidence(Typed):
    """The serialization verdict's inputs: c=1 against c=K, the server's gauges, the staircase."""

    level: int
    thr_1: float | None
    thr_k: float | None
    n_1: int
    n_k: int
    speedup: float | None
    p95_1: float | None
    p95_k: float | None
    p95_ratio: float | None
    inflight_mean: float | None
    inflight_peak: int | None
    server_observed: bool
    server_samples: int | None
    running_peak: float | None
    running_mean: float | None
    running_n: int | None
    waiting_peak: float | None
    waiting_mean: float | None
    waiting_n: int | None
    client_cpu_share: float | None
    client_cpu_ms_per_request: float | None
    staircase_index: float | None


class SerializationResult(_Result):
    kind: Literal["serialization"]
    created: float | None = None
    elapsed_s: float | None = None
    endpoint: str
    model: str
    server: EndpointFacts
    config: SerializationSettings
    thresholds: dict[str, float]
    verdict: str
    rule: str
    caveats: list[str]
    evidence: Evidence
    levels: list[LevelStats]
    staircase: Staircase | None


# -- capacity -----------------------------------------------------------------------------

class KvPeak(Typed):
    run: str
    concurrency: int | None
    peak: Num
    n: int


class ContextBudget(Typed):
    n: int
    isl: Percentiles  # percentiles and the max
    osl: Percentiles
    valid_osl: Percentiles
    margin: Num
    recommended_max_tokens: int | None
    finish_length: int
    context_overflow: int
    max_model_len: int | None
    note: str | None = None  # nothing valid to size max_tokens from
    headroom_tokens: int | None = None


class KvPerToken(Typed):
    """KV bytes per token and the model shape the formula used (MLA: no KV heads, no head dim)."""

    bytes_per_token: Num
    formula: str
    attention_layers: int
    layers: int
    kv_heads: int | None  # None: MLA (one compressed latent per layer, no KV heads)
    head_dim: int | None
    attention_heads: int
    kv_dtype: str
    dtype_bytes: Num


class KvBudget(Typed):
    """What the server's ``/metrics`` (``vllm:cache_config_info``) said of its KV cache."""

    observed: bool
    blocks: int | None = None
    block_size: int | None = None
    tokens: int | None = None
    cache_dtype: str | None = None
    note: str | None = None  # why not observed


class KvNeed(Typed):
    concurrency: int
    context_tokens: int
    tokens: int
    bytes: Num
    gib: Num
    share_of_budget: Num | None = None  # only with an observed budget
    max_sequences_at_context: int | None = None
    kv_can_limit: bool | None = None


class CapacityResult(_Stamped):
    kind: Literal["capacity"]
    kv: KvPerToken
    budget: KvBudget
    budget_bytes: Num | None
    need: KvNeed | None
    measured_kv_peaks: list[KvPeak]
    context: ContextBudget
    runs: list[str]
    verdict: str | None
