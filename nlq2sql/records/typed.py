"""The one base of every typed JSON part the harness writes or reads: manifests, summaries,
records, load results, reports.

Undeclared keys are refused (``extra="forbid"``): the write fails, not a reader later. A field
some runs lack is optional and *unset* when absent; ``to_json`` writes the fields given, so an absent
key stays absent, never ``null``. ``from_json`` raises one :class:`~nlq2sql.errors.RecordError`
naming file and field. A measured number is :data:`Num` (an int stays an int). Key order on disk is
not a contract: compare JSON as parsed."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, WithJsonSchema

from nlq2sql.errors import RecordError

__all__ = ["JsonValue", "Num", "Typed"]

#: A measured number kept as given: an int is not turned into a float (the schema says "number").
Num = Annotated[int | float, WithJsonSchema({"type": "number"})]
T = TypeVar("T", bound="Typed")
#: A JSON value as parsed (``json.loads``, a record's intent dump, a result row, a condition's
#: trace): the harness's one name for its JSON edge, where a value is not yet one of its types.
JsonValue = Any


class Typed(BaseModel):
    """A typed JSON part: written with :meth:`to_json`, read with :meth:`from_json`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        """As written (the JSON edge): the fields given, by alias, in JSON types."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    @classmethod
    def from_json(cls: type[T], data: JsonValue, path: str | None = None) -> T:

        """``data`` (a file's object) as this type; a wrong value is one RecordError naming the field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise RecordError(first["msg"], path=path, field=".".join(str(x) for x in first["loc"])) from None
