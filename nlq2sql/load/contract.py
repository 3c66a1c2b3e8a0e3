"""The parts every typed load result shares: result headers, endpoint labels, one level's stats.

Each is a :class:`~nlq2sql.records.typed.Typed`, written with ``to_json`` (the fields given: a key
some modes or older files lack stays absent, never ``null``)."""

from __future__ import annotations

from nlq2sql.records.summary_parts import Percentiles
from nlq2sql.records.typed import Num, Typed
from nlq2sql.run.endpoint_facts import EndpointFacts

__all__ = ["CPU_LABEL", "Arrivals", "ClientSeen", "Gauge", "Inflight", "LevelStats", "Machine",
           "ServerSeen", "endpoint_labels"]


class _Result(Typed):
    record_version: int | None = None  # the output layer sets it, last; absent: written before versioning


class _Stamped(_Result):
    """A result not measured level by level (probes, capacity, serialization, roll-ups): maybe stamped."""

    created: float | None = None
    elapsed_s: float | None = None


class _Header(_Result):
    """What a result measured at one endpoint says of it: which run, when, how long, what model and
    set, and the endpoint (its label, the CPU caveat, its facts).

    ``elapsed_s`` is given here by the modes that time themselves (rate sweep, grid); sweep and tune
    leave it to the driver (:func:`.output.write_outputs`)."""

    kind: str
    created: float | None = None
    elapsed_s: float | None = None
    model: str
    evalset: str
    endpoint_label: str
    cpu_label: str | None
    server: EndpointFacts


#: What a result measured on a local CPU server says of its timings.
CPU_LABEL = "CPU-only vLLM on this machine: these timings rank configurations here; they are not GPU numbers."


def endpoint_labels(local: str | None, endpoint: object) -> tuple[str, str | None]:
    """The header's ``endpoint_label`` and ``cpu_label``: ``local`` (what a server started for the run
    is called; None: the run used a given endpoint) or the endpoint, and the CPU caveat for a local one."""
    return (local, CPU_LABEL) if local is not None else (str(endpoint), None)



class Gauge(Typed):
    """A server gauge sampled from ``/metrics`` during a level: peak and mean over n samples."""

    n: int
    peak: Num | None
    mean: Num | None
    note: str | None = None  # "not observed"


class ServerSeen(Typed):
    observed: bool
    samples: int
    interval_s: Num | None
    running: Gauge
    waiting: Gauge
    kv_cache_usage: Gauge
    prefix_cache_hit_rate: Num | None


class Inflight(Typed):
    """Client-side requests in flight: peak and time-weighted mean over ``inflight_n`` requests."""

    inflight_peak: int | None
    inflight_mean: Num | None
    inflight_n: int


class ClientSeen(Typed):
    """The harness's own CPU during the level (measured live; a re-read run says so) and its requests in flight."""

    cpu_s: Num | None
    wall_s: Num | None = None
    cpu_share_of_core: Num | None
    cpu_ms_per_request: Num | None
    n: int | None = None
    note: str | None = None  # a re-read run: CPU not measured
    inflight_peak: int | None
    inflight_mean: Num | None
    inflight_n: int


class Machine(Typed):
    """A live level: the machine's load around it."""

    loadavg_1m_start: Num
    loadavg_1m_end: Num
    cpus: int | None


class Arrivals(Typed):
    """Open loop: realised arrival rate and the late/early latency growth of one level."""

    n: int
    realised_rate: Num | None
    early_median_s: Num | None
    late_median_s: Num | None
    growth: Num | None


class LevelStats(Typed):
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
    latency_s: Percentiles
    ttft_s: Percentiles
    itl_s: Percentiles
    completion_tokens: Percentiles
    prompt_tokens: Percentiles
    latency_from_arrival_s: Percentiles | None = None  # absent in sweeps from before the open loop
    queued_s: Percentiles | None = None
    server: ServerSeen
    run_dir: str
    offered_rate: Num | None = None
    duration_s: Num | None = None
    not_sent: int = 0
    client: ClientSeen
    machine: Machine | None = None
    arrivals: Arrivals | None = None  # rate sweeps
    # Correct answers per second whose request met every per-request SLO (--slo); absent: no SLO given.
    correct_goodput_per_s: Num | None = None

    def p95(self) -> Num | None:
        """The level's end-to-end p95 latency (None: not observed)."""
        return self.latency_s.p95
