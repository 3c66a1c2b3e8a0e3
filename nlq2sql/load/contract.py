"""The parts every typed load result shares (:mod:`.results`, :mod:`.probe_results`,
:mod:`.server_results`): the base models, percentiles and one load level's stats.

Each model is the one declaration of its part: built where measured, checked when built, read
back from a file with :meth:`_M.from_json` / :func:`.results.load_result`, and written with
:meth:`_M.to_json`.  Two rules make that dump the file byte for byte: fields are declared in the
order the files hold them, and a field is written only when it was given (``exclude_unset``:
a key some modes or older files lack stays absent, never ``null``).  Numbers the files keep as
they were measured are :data:`Num`, so an int stays an int (``2``, not ``2.0``).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    WithJsonSchema,
)

from nlq2sql.errors import RecordError
from nlq2sql.records.summary_parts import Percentiles
from nlq2sql.run.endpoint_facts import EndpointFacts

__all__ = ["CPU_LABEL", "Arrivals", "ClientSeen", "Gauge", "Inflight", "LevelStats", "Machine",
           "Num", "ServerSeen", "endpoint_labels"]

#: A measured number kept as given: an int is not turned into a float (the schema says "number").
Num = Annotated[int | float, WithJsonSchema({"type": "number"})]
F = TypeVar("F", bound="_M")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON written: declared order, the fields given (or read) only."""
        return self.model_dump(by_alias=True, exclude_unset=True)

    @classmethod
    def from_json(cls: type[F], data: Any, path: str | None = None) -> F:
        """``data`` (a written file's object) as this type; a wrong value is one RecordError naming the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise RecordError(first["msg"], path=path, field=".".join(str(x) for x in first["loc"])) from None


class _Result(_M):
    record_version: int | None = None  # the output layer sets it, last; absent: written before versioning


class _Stamped(_Result):
    """A result not measured level by level (probes, capacity, serialization, roll-ups): maybe stamped."""

    created: float | None = None
    elapsed_s: float | None = None


class _Header(_Result):
    """What a result measured at one endpoint says first: which run, when, how long, what model and set.

    ``elapsed_s`` is given here by the modes that time themselves (rate sweep, grid); sweep and tune
    leave it to the driver, which appends it after the analysis.  The endpoint's label and facts
    follow in one of two orders (:class:`_LabelsFirst`, :class:`_ServerFirst`): each mode's files
    have always held one of them, and a model writes its fields in declaration order."""

    kind: str
    created: float | None = None
    elapsed_s: float | None = None
    model: str
    evalset: str


#: What a result measured on a local CPU server says of its timings.
CPU_LABEL = "CPU-only vLLM on this machine: these timings rank configurations here; they are not GPU numbers."


def endpoint_labels(local: str | None, endpoint: object) -> tuple[str, str | None]:
    """The header's ``endpoint_label`` and ``cpu_label``: ``local`` (what a server started for the run
    is called; None: the run used a given endpoint) or the endpoint, and the CPU caveat for a local one."""
    return (local, CPU_LABEL) if local is not None else (str(endpoint), None)



class _LabelsFirst(_Header):
    """Sweep and tune: the endpoint's labels, then its facts."""

    endpoint_label: str
    cpu_label: str | None
    server: EndpointFacts


class _ServerFirst(_Header):
    """Rate sweep and grid: the endpoint's facts, then its labels."""

    server: EndpointFacts
    endpoint_label: str
    cpu_label: str | None


class Gauge(_M):
    """A server gauge sampled from ``/metrics`` during a level: peak and mean over n samples."""

    n: int
    peak: Num | None
    mean: Num | None
    note: str | None = None  # "not observed"


class ServerSeen(_M):
    observed: bool
    samples: int
    interval_s: Num | None
    running: Gauge
    waiting: Gauge
    kv_cache_usage: Gauge
    prefix_cache_hit_rate: Num | None


class Inflight(_M):
    """Client-side requests in flight: peak and time-weighted mean over ``inflight_n`` requests."""

    inflight_peak: int | None
    inflight_mean: Num | None
    inflight_n: int


class ClientSeen(_M):
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


class Machine(_M):
    """A live level: the machine's load around it."""

    loadavg_1m_start: Num
    loadavg_1m_end: Num
    cpus: int | None


class Arrivals(_M):
    """Open loop: realised arrival rate and the late/early latency growth of one level."""

    n: int
    realised_rate: Num | None
    early_median_s: Num | None
    late_median_s: Num | None
    growth: Num | None


class LevelStats(_M):
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
