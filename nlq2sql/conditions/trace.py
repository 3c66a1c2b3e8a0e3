"""What a condition records per item, as a type: :class:`Trace`, the base of every condition's.

A condition's hooks (``before``, ``answer``, ``after``) choose something per item -- the examples
shown, the values linked, the planner's first stage, the samples' vote, the intent-token evidence --
and the record keeps it as flat keys.  Each condition declares those keys once, as a
:class:`~nlq2sql.records.typed.Typed` model whose fields are its record keys (``Condition.trace``),
and its hooks return (or merge) an instance; ``records.item.ItemRecord.merge`` turns it into JSON
values (:meth:`~nlq2sql.records.typed.Typed.to_json`).

A key a hook may leave out is optional and unset when not given (absent from the record); ``None``
given is a value (written as null).
"""

from __future__ import annotations

from nlq2sql.records.typed import Typed

__all__ = ["Trace"]


class Trace(Typed):
    """A condition's per-item record keys (its fields); empty: it records nothing."""
