"""What a condition records per item, as a type: :class:`Trace`, the base of every condition's.

A condition's hooks choose something per item (the examples shown, the values linked, the
planner's first stage, the vote, the intent-token evidence); the record keeps it as flat keys,
declared once as the condition's :class:`Trace` (``Condition.trace``: a
:class:`~nlq2sql.records.typed.Typed` model whose fields are its record keys). A key a hook leaves
out is unset (absent from the record); ``None`` given is a value (null).

Scoring reads a record back through the traces: :meth:`Trace.read` gives one key as its field
declares it, and a condition whose evidence counts says so in :meth:`Trace.reason_to_abstain`,
:meth:`Trace.confidence`, :meth:`Trace.selection` and :meth:`Trace.decision` (the registry asks
each registered trace in order, so ``stages.abstention`` and ``stages.summary`` name no key). A key
two conditions declare (``intent_evidence``, ``requests``) is read by the record's key."""

from __future__ import annotations

from functools import cache
from typing import Any, ClassVar

from pydantic import TypeAdapter, ValidationError

from nlq2sql.errors import RecordError
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.typed import Typed
from nlq2sql.stages.abstention import Selection

__all__ = ["Trace"]


@cache
def _adapter(cls: type[Trace], name: str) -> TypeAdapter[Any]:
    annotation = cls.model_fields[name].annotation
    assert annotation is not None  # (a model's field always has one)
    return TypeAdapter(annotation)


class Trace(Typed):
    """A condition's per-item record keys (its fields); empty: it records nothing."""

    #: Its keys that :meth:`reason_to_abstain` reads: what re-scoring carries to decide again.
    evidence_keys: ClassVar[tuple[str, ...]] = ()
    #: Its keys the summary's ``timing`` gives percentiles of: what it cost, beside what it gained.
    timing_keys: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def read(cls, rec: ItemRecord, name: str) -> Any:
        """The record's value of this trace's key ``name``, as its field declares it (None when absent)."""
        value = rec.traces.get(name)
        if value is None:
            return None
        try:
            return _adapter(cls, name).validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in (name, *first["loc"]))
            raise RecordError(f"item {rec.id}: not a valid {name}: {first['msg']}", field=where) from None

    @classmethod
    def reason_to_abstain(cls, rec: ItemRecord) -> str | None:
        """Why this condition's evidence makes the item abstain (None: it does not)."""
        return None

    @classmethod
    def confidence(cls, rec: ItemRecord) -> float | None:
        """The item's confidence as this condition measured it (None: it measured none)."""
        return None

    @classmethod
    def selection(cls, rec: ItemRecord) -> Selection | None:
        """The item's recorded abstention, where this condition decides it (None: not here)."""
        return None

    @classmethod
    def decision(cls, reason: str | None, answer_correct: bool) -> Trace | None:
        """The keys recording an abstention decision, where this condition records it (None: not here)."""
        return None
