"""A batch's ``summary.json`` (``nlq2sql batch``) as a model: the aggregator's figures, then what
a batch adds.

Apart from :class:`nlq2sql.records.results.Summary` because a batch's summary has keys and an
order of its own (``scored`` after the figures, Ray Data's load shape, ``replicas_answered``, the
shards in the digest, ``resumed``) and may be of unscored answers (``AnswerFigures``, which
carries ``scored`` itself).  Fields are declared in the order the summaries have their keys on
disk; a key never set stays absent; written once by :meth:`BatchSummary.to_json_dict`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from nlq2sql.errors import RecordError
from nlq2sql.records.run_parts import ServerMetrics
from nlq2sql.records.summary_parts import AnswerFigures, Compactness, Figures, Part, Throughput

__all__ = ["BatchLoad", "BatchRecords", "BatchSummary", "BatchTail", "Resumed", "Shard"]

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
    answer: str | None = None  # a SQL answer; absent for v1 intents
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


class BatchSummary(BaseModel):
    """A batch's summary: the figures (scored, or of answers without a gold) and the batch's tail."""

    model_config = ConfigDict(extra="forbid")

    figures: Figures | AnswerFigures
    tail: BatchTail

    @property
    def scored(self) -> bool:
        return self.tail.scored

    def to_json_dict(self) -> dict[str, Any]:
        """As written (the JSON edge): the figures' keys, then the tail's (an unscored summary's
        ``scored`` stays where the figures put it)."""
        return {**self.figures.to_json_dict(), **self.tail.to_json_dict()}

    @classmethod
    def from_json_dict(cls, obj: dict[str, Any]) -> BatchSummary:
        """A written batch summary read back (``--resume`` of a complete batch)."""
        kind = Figures if obj.get("scored") else AnswerFigures
        if unknown := [k for k in obj if k not in kind.model_fields and k not in BatchTail.model_fields]:
            raise RecordError(f"not a batch summary: undeclared keys {unknown}")
        tail = {k: v for k, v in obj.items() if k in BatchTail.model_fields}
        return cls(figures=kind.model_validate({k: v for k, v in obj.items() if k in kind.model_fields}),
                   tail=BatchTail.model_validate(tail))
