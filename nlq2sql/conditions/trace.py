"""What a condition records per item, as a type: :class:`Trace`, the base of every condition's.

A condition's hooks (``before``, ``answer``, ``after``) choose something per item -- the examples
shown, the values linked, the planner's first stage, the samples' vote, the intent-token evidence --
and the record keeps it as flat keys.  Each condition declares those keys once, as a Struct whose
fields are its record keys in the order they are written (``Condition.trace``), and its hooks return
(or merge) an instance; only ``records.item.ItemRecord.merge`` turns it into JSON values, so the
record is written byte for byte as when the hooks filled a dict.

A key a hook may leave out defaults to ``UNSET`` (absent from the record, not null); ``None`` is a
value (written as null).  No ``omit_defaults``: a field given another default is written always,
as a dict key always set was -- so no value equal to a default silently disappears.
"""

from __future__ import annotations

import msgspec

__all__ = ["Trace"]


class Trace(msgspec.Struct, kw_only=True):
    """A condition's per-item record keys (its fields, in written order); empty: it records nothing."""
