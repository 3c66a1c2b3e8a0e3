"""Typed, versioned results of the load tools: level stats and every mode's ``STEM.json``.

A mode's result is a contract others read (re-rendering, ``capacity``, roll-ups, dashboards), so
its keys are declared with ``extra="forbid"``: :func:`.output.write_outputs` validates it before
writing, :func:`load_result` names the file and field of a bad one, and renderers read the model.
Results carry ``record_version``; unversioned ones still load. Mappings remain only where keys are
open by nature (server facts, thresholds, counts by reason). Every result model is registered here;
JSON Schemas: ``schemas/<kind>.schema.json`` (``scripts/gen_schemas.py``, drift-tested)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from nlq2sql.errors import RecordError
from nlq2sql.inputs import parse_json, read_text
from nlq2sql.load.analysis import SweepAnalysis
from nlq2sql.load.contract import LevelStats, _Header, _Result, _Stamped
from nlq2sql.load.probe_results import PROBE_MODELS
from nlq2sql.load.server_results import CapacityResult, SerializationResult
from nlq2sql.load.tune_results import TuneResult
from nlq2sql.records.typed import Num, Typed

__all__ = ["FleetReplica", "FleetRow", "FleetSweepResult", "GridCell", "GridClass", "GridResult", "GridSettings",
           "RESULT_MODELS", "RateAnalysis", "RateRow", "RateSettings", "RateSlo", "RateSweepResult",
           "ServerSweepResult", "SettingRow", "SweepResult", "SweepSettings", "checked", "load_result",
           "result_model"]


# -- sweep --------------------------------------------------------------------------------

class SweepSettings(Typed):
    """``sweep.json``'s ``config``: what the sweep measured."""

    levels: list[int]
    requests: int
    slo_p95: list[float]
    gpu_cost_per_hour: Num | None
    max_tokens: int
    structured: str
    prompt: str
    warmup: int
    duration_s: Num | None = None
    slo: list[str] = []  # per-request SLOs of correct goodput (none: absent, the column is not shown)


class SweepResult(_Header):
    kind: Literal["sweep"]
    config: SweepSettings
    levels: list[LevelStats]
    analysis: SweepAnalysis
    notes: list[str]
    plots: dict[str, str] = Field(default_factory=dict)


class SettingRow(Typed):
    """One server setting of a server sweep: its sweep's peak, knee and saturation, and each level."""

    value: int
    dir: str
    peak_req_per_s: Num | None
    peak_at: int | None
    p95_at_peak: Num | None
    n_at_peak: int | None
    knee: int | None
    saturation: int | None
    running_peak: Num | None
    waiting_peak: Num | None
    levels: list[tuple[int, Num | None, Num | None]]  # (c, req/s, p95)


class ServerSweepResult(_Stamped):
    kind: Literal["server-sweep"]
    knob: str
    values: list[int]
    settings: list[SettingRow]


class FleetRow(Typed):
    peak_req_per_s: Num | None
    at_concurrency: int | None
    knee: int | None
    lowest_p95_s: Num | None
    errors: int


class FleetReplica(Typed):
    label: str
    endpoint: str | None


class FleetSweepResult(_Stamped):
    kind: Literal["fleet-sweep"]
    routing: str
    replicas: list[FleetReplica]
    rows: dict[str, FleetRow]
    sum_of_replica_peaks: Num | None
    fleet_scaling_efficiency: Num | None


# -- open loop ----------------------------------------------------------------------------

class RateSettings(Typed):
    """``rate-sweep.json``'s ``config``."""

    rates: list[float]
    requests: int
    max_in_flight: int
    duration_s: Num | None
    arrival_seed: int | None
    slo_p95: list[float]
    gpu_cost_per_hour: Num | None
    max_tokens: int
    structured: str
    growth: Num
    slo: list[str] = []  # per-request SLOs of correct goodput (none: absent, the column is not shown)


class RateRow(Typed):
    offered: Num
    achieved: Num | None
    achieved_ratio: Num | None
    growth: Num | None
    failed: int
    inflight_peak: int | None
    steady: bool
    sustained: bool | None  # None: too short to judge


class RateSlo(Typed):
    p95_target_s: Num
    rate: Num | None
    p95_s: Num | None


class RateAnalysis(Typed):
    rows: list[RateRow]
    max_sustained_rate: Num | None
    first_unsustained_rate: Num | None
    cost_per_1k_at_max_sustained: Num | None
    too_short: list[Num]
    rule: str
    slo_policy: list[RateSlo]


class RateSweepResult(_Header):
    kind: Literal["rate-sweep"]
    config: RateSettings
    levels: list[LevelStats]
    analysis: RateAnalysis
    notes: list[str]
    plot: str | None = None


# -- grid ---------------------------------------------------------------------------------

class GridClass(Typed):
    name: str
    pad_tokens: int
    out_tokens: int
    describe: str


class GridSettings(Typed):
    levels: list[int]
    requests: int
    classes: list[GridClass]


class GridCell(Typed):
    """One (length class, concurrency) cell of the grid."""

    cls: str = Field(alias="class")
    concurrency: int
    n: int
    ok: int
    req_per_s: Num | None
    output_tok_per_s: Num | None
    p95_s: Num | None
    ttft_p95_s: Num | None
    prompt_tokens_p50: Num | None
    completion_tokens_p50: Num | None
    kv_peak: Num | None
    kv_samples: int
    errors: dict[str, int]
    finish_reasons: dict[str, int]
    run_dir: str


class GridResult(_Header):
    kind: Literal["grid"]
    config: GridSettings
    cells: list[GridCell]
    notes: list[str]
    plot: str | None = None


RESULT_MODELS: dict[str, type[_Result]] = {
    "sweep": SweepResult, "server-sweep": ServerSweepResult, "fleet-sweep": FleetSweepResult,
    "rate-sweep": RateSweepResult, "grid": GridResult, "serialization": SerializationResult,
    "capacity": CapacityResult, "tune": TuneResult,
}

RESULT_MODELS.update(PROBE_MODELS)


def result_model(kind: str | None) -> type[_Result] | None:
    """The model for a result's ``kind`` (None: a kind with no declared contract, e.g. probes)."""
    return RESULT_MODELS.get(kind or "")


def checked(result: dict[str, Any]) -> _Result | None:
    """``result`` validated against its kind's model before it is written; an undeclared key
    or a wrong type is this harness's bug, so it fails loudly rather than reaching a reader."""
    model = result_model(result.get("kind"))
    if model is None:
        return None
    try:
        return model.model_validate(result)
    except ValidationError as exc:
        raise AssertionError(f"{model.__name__} does not match its declared contract: {exc}") from None


M = TypeVar("M", bound=BaseModel)


def load_result(path: Path, expect: type[M] | None = None) -> Any:
    """A written ``STEM.json`` as its typed model (``expect``: the one kind accepted); a bad file
    is one message naming the file, and the line or field."""
    want = next((k for k, m in RESULT_MODELS.items() if m is expect), None)
    text = read_text(path, f"{want or 'load'} result")
    try:
        data = parse_json(text, path=str(path), cls=RecordError)
    except json.JSONDecodeError as exc:
        raise RecordError(f"malformed JSON ({exc.msg})", path=str(path), line=exc.lineno) from None
    kind = data.get("kind") if isinstance(data, dict) else None
    model = result_model(kind)
    if model is None:
        raise RecordError(f"not a load result (kind {kind!r}; known: {', '.join(RESULT_MODELS)})",
                          path=str(path), field="kind")
    if expect is not None and model is not expect:
        raise RecordError(f"not a {want} result (kind {kind!r})", path=str(path), field="kind")
    return model.from_json(data, path=str(path))
