"""A batch's ``summary.json`` and ``manifest.json`` (``nlq2sql batch``) as models.

Apart from :class:`nlq2sql.records.results.Summary` and ``Manifest`` because a batch's keys and order
are its own (``scored`` after the figures, Ray Data's load shape and actors, shards in the digest,
``resumed``, a question file instead of an eval set, an in-process vLLM's ``engine_kwargs`` and
``gpus``, ``sessions``) and its answers may be unscored (``AnswerFigures``). Fields are declared in
on-disk key order; a key never set stays absent."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ValidationError, create_model

from nlq2sql.errors import RecordError
from nlq2sql.records.manifest_parts import (
    EngineArgs,
    Origin,
    RetryBudgetPart,
    SamplingPart,
    ServerFacts,
)
from nlq2sql.records.manifest_parts import Part as ManifestPart
from nlq2sql.records.run_parts import ServerMetrics
from nlq2sql.records.summary_parts import AnswerFigures, Compactness, Figures, Part, Throughput
from nlq2sql.records.typed import JsonValue, Typed

__all__ = ["BatchLoad", "BatchManifest", "BatchManifestHead", "BatchRecords", "BatchReplica", "BatchSummary",
           "BatchTail", "Resumed", "SessionStart", "Shard"]

Num = int | float


class BatchLoad(Part):
    """How a batch offered its load: Ray Data's actors, each with ``concurrency_per_actor`` in flight."""

    mode: str
    engine: str
    actors: int
    concurrency_per_actor: int


class Shard(Part):
    """One record shard: its path under the batch's output, and how many records it holds."""

    file: str
    rows: int


class BatchRecords(Part):
    """The records' digest (their lines in shard order, either format) and the shards holding them."""

    count: int
    sha256: str
    format: str
    shards: list[Shard]


class Resumed(Part):
    """How many sessions the batch took, and the shards later sessions kept."""

    sessions: int
    shards_kept: int


class BatchTail(Part):
    """What a batch adds after the aggregator's figures, in its order on disk."""

    scored: bool
    answer: str | None = None  # a v2 or SQL answer; absent for v1 intents
    column_rule: str | None = None  # gold-SQL sets: how answer columns are matched to the gold's
    outcomes: dict[str, int]
    errors_by_class: dict[str, int]
    compactness: Compactness
    throughput: Throughput
    load: BatchLoad
    server_metrics: ServerMetrics
    replicas_answered: dict[str, int] | None = None  # several replicas only
    retries_used: int
    # The manifest's retry budget (its keys as recorded) with the retries the records took as ``used``.
    retry_budget: dict[str, Num]
    records: BatchRecords
    resumed: Resumed | None = None  # set by ``run_batch`` (not by the shard summary alone)


class BatchSummary(Typed):
    """A batch's summary: the figures (scored, or of answers without a gold) and the batch's tail."""

    figures: Figures | AnswerFigures
    tail: BatchTail

    @property
    def scored(self) -> bool:
        return self.tail.scored

    def to_json(self) -> dict[str, Any]:
        """As written (the JSON edge): the figures' keys, then the tail's (an unscored summary's
        ``scored`` stays where the figures put it)."""
        return {**self.figures.to_json(), **self.tail.to_json()}

    @classmethod
    def from_json_dict(cls, obj: dict[str, Any]) -> BatchSummary:
        """A written batch summary read back (``--resume`` of a complete batch)."""
        kind = Figures if obj.get("scored") else AnswerFigures
        if unknown := [k for k in obj if k not in kind.model_fields and k not in BatchTail.model_fields]:
            raise RecordError(f"not a batch summary: undeclared keys {unknown}")
        tail = {k: v for k, v in obj.items() if k in BatchTail.model_fields}
        return cls(figures=kind.model_validate({k: v for k, v in obj.items() if k in kind.model_fields}),
                   tail=BatchTail.model_validate(tail))


class BatchReplica(ManifestPart):
    """One replica the actors route over, labelled as the records name it (no probe of its own)."""

    label: str
    url: str
    model: str


class SessionStart(ManifestPart):
    """A later session of a resumed batch: when it started."""

    started: float


class BatchManifestHead(Origin):
    """A batch manifest's keys up to ``answer``: each condition's keys follow them on disk
    (:meth:`BatchManifest.with_conditions` declares them between this and the rest)."""

    questions: str | None = None  # ``--questions``: the file's name and SHA-256
    questions_sha256: str | None = None
    scored: bool
    limit: int | None
    engine: str  # local | ray | ray-vllm
    ray_address: str | None
    actors: int
    concurrency_per_actor: int
    shard_rows: int
    format: str
    out: str | None  # a URI; None for a local directory
    endpoint: str | None
    model: str
    prompt: str
    routing: str | None = None  # several replicas only
    replicas: list[BatchReplica] | None = None
    prompt_style: str
    prompt_sha256: str
    client: str
    sampling: SamplingPart
    answer: str | None = None  # a v2 or SQL answer; absent for v1 intents
    gold: str | None = None  # gold-SQL sets: "sql" (absent: golds are intents or MetricFlow queries)
    column_rule: str | None = None  # gold-SQL sets: how answer columns are matched to the gold's
    search_path: list[str] | None = None  # gold-SQL sets: where unqualified names in gold and model SQL resolved


class BatchManifest(BatchManifestHead):
    """A batch's ``manifest.json`` (a key never set stays absent), with each condition's keys
    (:meth:`with_conditions`).

    Built once by ``run.batch_manifest`` (``engine_kwargs``, ``gpus`` added by the in-process vLLM
    engine, ``finished`` at the end) and turned into JSON only where it is written; a manifest read
    back (``--resume``) is continued (:meth:`resumed`)."""

    server: ServerFacts | None
    retry_budget: RetryBudgetPart
    started: float
    engine_kwargs: EngineArgs | None = None  # --engine ray-vllm
    gpus: int | float | None = None
    sessions: list[SessionStart] | None = None  # a resumed batch's later sessions
    finished: float | None = None

    @classmethod
    def with_conditions(cls, conditions: type[BaseModel]) -> type[BatchManifest]:
        """The manifest with each condition's keys (the registry's conditions part) declared
        after ``answer``, where a batch writes them."""
        return _extended(cls, conditions)

    @classmethod
    def from_json(cls, data: JsonValue, path: str | None = None) -> BatchManifest:

        """A written manifest read back (``--resume``): refused in one line if it is not one."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise RecordError(f"not a batch manifest: {first['msg']}", path=path,
                              field=".".join(str(x) for x in first["loc"])) from None

    def resumed(self, started: float) -> None:
        """Record a later session (a manifest read back)."""
        self.sessions = [*(self.sessions or []), SessionStart(started=started)]


@functools.cache
def _extended(base: type[BatchManifest], conditions: type[BaseModel]) -> type[BatchManifest]:
    """``base`` with ``conditions``' fields (type forms, as declared there) between its head and
    its tail: fields are ordered along the bases, head first, so the conditions' come after
    ``answer``.  Made once per pair."""
    between = create_model("BatchConditions", __base__=BatchManifestHead,
                           **{k: (f.annotation, f) for k, f in conditions.model_fields.items()})  # type: ignore[call-overload]
    return create_model("BatchManifest", __base__=(base, between))
