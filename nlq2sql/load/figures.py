"""Figures that no read contract declares, as typed objects in the order their files hold them:
built where measured, passed between functions typed, turned into JSON only when written
(``to_json``).  A result with a read contract is built as that contract's pydantic model instead
(:mod:`.contract`); ``msgspec.Struct`` s remain for the rest: a streamed probe request
(:mod:`.probe_figures`, never written) and load-check's report (``experiments.loadcheck``).

A ``msgspec.Struct`` keeps its declaration order and each value as it was given; a field that
only some modes or older files carry is ``UNSET`` when absent, and left out of the JSON.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType
from pydantic import BaseModel

from nlq2sql.errors import RecordError
from nlq2sql.load.contract import _M

__all__ = ["UNSET", "Fig", "Num", "UnsetType", "plain", "present"]

Num = int | float
T = TypeVar("T")
F = TypeVar("F", bound="Fig")


def _edge(value: object) -> object:
    """A pydantic part (a run's summary) as its file has it: the keys set, in declared order; any
    other value as ``write_json_atomic`` would write it (``str``)."""
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, exclude_unset=True)
    return str(value)


def _part(kind: type, value: Any) -> Any:
    """A pydantic part a Struct holds (a summary's ``Percentiles``), validated from its JSON."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return kind.model_validate(value)
    raise NotImplementedError(kind)


def present(v: T | UnsetType) -> T | None:
    """A field's value, None when it is UNSET."""
    return None if isinstance(v, UnsetType) else v


class Fig(msgspec.Struct, kw_only=True):
    """A typed part of a load result: its JSON is its fields in declaration order, UNSET ones left out."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self, enc_hook=_edge)
        return out

    @classmethod
    def from_json(cls: type[F], data: Any, path: str | None = None) -> F:
        """``data`` (a written file's object) as this type; a wrong value is one RecordError naming the field."""
        try:
            return msgspec.convert(data, cls, dec_hook=_part)
        except msgspec.ValidationError as exc:
            msg, _, at = str(exc).partition(" - at `$")
            raise RecordError(msg, path=path, field=at.rstrip("`").lstrip(".") or None) from None


def plain(value: Any) -> Any:
    """``value`` with every typed part turned into its JSON (dicts and lists walked; the rest as it is)."""
    if isinstance(value, Fig | _M):
        return value.to_json()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
