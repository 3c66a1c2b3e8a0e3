"""The sections of ``summary.json`` a live run's machinery measures: the server's ``/metrics``, the
client's own load and, with several replicas, the fleet. Fields in on-disk key order; a key never
set stays absent; ints stay ints (``Num``)."""

from __future__ import annotations

from typing_extensions import TypedDict

from nlq2sql.records.summary_parts import Part, Percentiles
from nlq2sql.records.typed import Num

__all__ = ["AttemptEntry", "Fleet", "FleetSession", "Gauge", "Harness", "HarnessThresholds", "LoopLag", "ProcessLoad",
           "ReplicaEvent", "ReplicaFigures", "ReplicaRotation", "ServerMetrics"]



class Gauge(Part):
    """A sampled gauge: peak and mean over ``n`` samples, or a note that none was seen."""

    n: int
    peak: Num | None = None
    mean: Num | None = None
    note: str | None = None


class ServerMetrics(Part):
    """The endpoint's ``/metrics`` over the session: gauges, counter deltas, prefix-cache hit
    rate; or ``observed`` false and a note saying why not."""

    observed: bool
    url: str | None = None
    samples: int | None = None
    errors: int | None = None
    interval_s: Num | None = None
    running: Gauge | None = None
    waiting: Gauge | None = None
    kv_cache_usage: Gauge | None = None
    counter_deltas: dict[str, Num] | None = None
    prefix_cache_hit_rate: Num | None = None
    note: str | None = None


class LoopLag(Part):
    """The client's event-loop lag (ms): percentiles of its samples and the worst one."""

    n: int
    mean: Num | None = None
    p50: Num | None = None
    p95: Num | None = None
    p99: Num | None = None
    max: Num | None = None


class ProcessLoad(Part):
    """One client process of several: its CPU share and loop lag p95."""

    cpu_share_of_core: Num | None
    loop_lag_p95_ms: Num | None


class HarnessThresholds(Part):
    loop_lag_p95_ms: Num
    cpu_share_of_core: Num
    starved_share_below: Num | None = None  # older runs: absent


class Harness(Part):
    """The client's own load: CPU share, loop lag, and the verdict (saturated, starved) against
    the stated thresholds."""

    processes: int
    cpu_s: Num
    wall_s: Num
    cpu_share_of_core: Num | None
    loop_lag_ms: LoopLag
    interval_s: Num
    per_process: list[ProcessLoad] | None = None  # several client processes
    saturated: bool
    why: list[str]
    starved: bool | None = None  # older runs: absent
    starved_why: list[str] | None = None
    thresholds: HarnessThresholds


class AttemptEntry(TypedDict):
    """One request of an item, on one replica (``run.pool.Trail.attempt_log``): a record's
    ``attempt_log`` entry.  A TypedDict (``typing_extensions``'s: pydantic reads that on Python 3.11),
    not a model: the entries sit in the record's request part (``records.item.RequestPart``) as dicts."""

    replica: str
    outcome: str
    http_status: int | None
    at_s: float  # sent this long after the item's first request
    took_s: float


class ReplicaEvent(Part):
    """A replica taken out of rotation, or put back after a probe."""

    event: str
    t: Num
    reason: str
    probes: int | None = None
    after_s: Num
    worker: int | None = None  # several client workers: whose breaker it was (run.workers.merge_fleets)


class ReplicaFigures(Part):
    """One replica: what it answered (every session's records), and this session's time out of rotation."""

    label: str
    url: str
    model: str | None
    answered: int
    ok: int
    errors: dict[str, int]
    failed_then_resent: int
    latency_s: Percentiles
    out_of_rotation_s: Num | None = None
    first_out_after_s: Num | None = None
    in_rotation_at_end: bool | None = None
    events: list[ReplicaEvent] | None = None


class Fleet(Part):
    """Several replicas: routing, failovers, per-replica figures and each one's ``/metrics``."""

    routing: str | None
    failovers_this_session: int | None
    replicas: list[ReplicaFigures]
    server_metrics: dict[str, ServerMetrics] | None


class ReplicaRotation(Part):
    """One replica as one session's breakers saw it (``run.pool.Replica.report``): its time out of
    rotation, its probes and events.  Summed up with the records in ``run.session.fleet_summary``."""

    label: str
    url: str
    model: str | None
    in_rotation_at_end: bool
    out_of_rotation_s: Num
    first_out_after_s: Num | None
    probes: int = 0
    probes_failed: int = 0
    last_probe: str | None = None
    events: list[ReplicaEvent] = []


class FleetSession(Part):
    """Several replicas, this session: routing, failovers, each replica's rotation and ``/metrics``
    (``run.item.ItemRunner.fleet``; several client workers' merged by ``run.workers.merge_fleets``)."""

    routing: str | None
    failovers: int
    replicas: list[ReplicaRotation]
    server_metrics: dict[str, ServerMetrics] | None
