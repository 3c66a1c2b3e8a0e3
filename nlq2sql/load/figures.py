"""Load figures as typed objects in the order the files hold them: built where measured, passed
between functions typed, turned into JSON only when written (``to_json``).

The pydantic models of :mod:`.contract` and :mod:`.results` are the *read* contract: they check
a result before it is written and type it when read back, but they declare their own field order
and turn an int into a float, so dumping one would change ``level.json`` or ``sweep.json``.
A ``msgspec.Struct`` keeps its declaration order and each value as it was given, so these
declare the fields in the written order; a field that only some modes or older files carry is
``UNSET`` when absent, and left out of the JSON.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from nlq2sql.errors import RecordError

__all__ = ["UNSET", "Fig", "Inflight", "Level", "LevelArrivals", "LevelClient", "LevelGauge", "LevelMachine",
           "LevelServer", "Num", "Pct", "UnsetType", "plain", "present"]

Num = int | float
#: ``stages.score.percentiles`` as it returns them (its key order depends on whether n is 0).
Pct = dict[str, Num | None]
T = TypeVar("T")
F = TypeVar("F", bound="Fig")


def present(v: T | UnsetType) -> T | None:
    """A field's value, None when it is UNSET."""
    return None if isinstance(v, UnsetType) else v


class Fig(msgspec.Struct, kw_only=True):
    """A typed part of a load result: its JSON is its fields in declaration order, UNSET ones left out."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self, enc_hook=str)  # str: as ``write_json_atomic`` would
        return out

    @classmethod
    def from_json(cls: type[F], data: Any, path: str | None = None) -> F:
        """``data`` (a written file's object) as this type; a wrong value is one RecordError naming the field."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            msg, _, at = str(exc).partition(" - at `$")
            raise RecordError(msg, path=path, field=at.rstrip("`").lstrip(".") or None) from None


def plain(value: Any) -> Any:
    """``value`` with every typed part turned into its JSON (dicts and lists walked; the rest as it is)."""
    if isinstance(value, Fig):
        return value.to_json()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


class LevelGauge(Fig):
    """A server gauge sampled from ``/metrics`` during a level."""

    n: int
    peak: Num | None
    mean: Num | None
    note: str | UnsetType = UNSET  # "not observed"


class LevelServer(Fig):
    observed: bool
    samples: int
    interval_s: Num | None
    running: LevelGauge
    waiting: LevelGauge
    kv_cache_usage: LevelGauge
    prefix_cache_hit_rate: Num | None


class Inflight(Fig):
    """Client-side requests in flight: peak and time-weighted mean over ``inflight_n`` requests."""

    inflight_peak: int | None
    inflight_mean: Num | None
    inflight_n: int


class LevelClient(Fig, kw_only=True):
    """The harness's own CPU during the level (measured live; a re-read run says so) and its requests in flight."""

    cpu_s: Num | None
    wall_s: Num | None | UnsetType = UNSET
    cpu_share_of_core: Num | None
    cpu_ms_per_request: Num | None
    n: int | None | UnsetType = UNSET
    note: str | None | UnsetType = UNSET
    inflight_peak: int | None
    inflight_mean: Num | None
    inflight_n: int


class LevelMachine(Fig):
    loadavg_1m_start: Num
    loadavg_1m_end: Num
    cpus: int | None


class LevelArrivals(Fig):
    """Open loop: realised arrival rate and the late/early latency growth of one level."""

    n: int
    realised_rate: Num | None
    early_median_s: Num | None
    late_median_s: Num | None
    growth: Num | None


class Level(Fig, kw_only=True):
    """One load level (an ordinary run directory): ``level.json`` and each entry of a result's ``levels``."""

    concurrency: int
    n: int
    ok: int
    good: int
    schema_valid: int
    wall_s: Num | None
    req_per_s: Num | None
    goodput_per_s: Num | None
    output_tok_per_s: Num | None
    output_tokens: int
    errors: dict[str, int]
    finish_reasons: dict[str, int]
    latency_s: Pct
    ttft_s: Pct
    itl_s: Pct
    completion_tokens: Pct
    prompt_tokens: Pct
    latency_from_arrival_s: Pct | UnsetType = UNSET  # absent in sweeps from before the open loop
    queued_s: Pct | UnsetType = UNSET
    server: LevelServer
    run_dir: str | UnsetType = UNSET  # set by ``stats_from_run``
    offered_rate: Num | None | UnsetType = UNSET
    duration_s: Num | None | UnsetType = UNSET
    not_sent: int | UnsetType = UNSET
    client: LevelClient | UnsetType = UNSET
    machine: LevelMachine | UnsetType = UNSET  # a live level: the machine's load around it
    arrivals: LevelArrivals | UnsetType = UNSET  # rate sweeps
    # Correct answers per second whose request met every per-request SLO (--slo); absent: no SLO given.
    correct_goodput_per_s: Num | None | UnsetType = UNSET

    def p95(self) -> Num | None:
        """The level's end-to-end p95 latency (None: not observed)."""
        return self.latency_s.get("p95")
