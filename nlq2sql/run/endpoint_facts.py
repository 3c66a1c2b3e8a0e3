"""How a run's endpoint came to be (:class:`EndpointFacts`): given, or a local server started here.

``run.live.bound_endpoint`` states it; every load result writes it as its ``server``.  Declared
here, in the layer that binds the endpoint, so the binding builds the type itself and the load
modes above read it, rather than the binding handing up a dict for ``load`` to convert.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

from nlq2sql.records.manifest_parts import StructuredOutputs

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["EndpointFacts"]

#: A measured number kept as given (as ``load.contract.Num``: the schema says "number").
_Num = Annotated[int | float, WithJsonSchema({"type": "number"})]


class EndpointFacts(BaseModel):
    """The endpoint a load run used, as ``run.live.bound_endpoint`` states it and every load result
    writes it (``server``): a given endpoint is ``started_by_us``/``endpoint`` only; a local server
    adds its arguments, start time and settings.  Only the keys given are written, in the order
    given (a fleet's producers write ``endpoint`` first).  Not the manifest's ``ServerFacts``: those
    are measured (``/v1/models``), these are how the endpoint came to be."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    started_by_us: bool | None = None  # absent for a fleet's member
    endpoint: str | None = None  # the URL, or "local"
    args: list[str] | None = None  # the local server's command line (after the program)
    startup_s: _Num | None = None
    max_num_seqs: int | None = None
    cpu: bool | None = None
    structured_outputs: StructuredOutputs | None = None
    batch_invariant: bool | None = None
    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: JsonValue, handler: ValidatorFunctionWrapHandler) -> EndpointFacts:
        facts: EndpointFacts = handler(data)
        if isinstance(data, dict):
            facts._order = tuple(data)
        return facts

    @model_serializer(mode="wrap")
    def _in_given_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)  # the JSON edge: the keys given only (whatever the dump asks), in their order
        given = self.model_fields_set
        out = {**{k: out[k] for k in self._order if k in out and k in given},
               **{k: v for k, v in out.items() if k in given}}
        if self.structured_outputs is not None and "structured_outputs" in out:
            out["structured_outputs"] = self.structured_outputs.to_json()  # its keys as given, too
        return out

    def structured_written(self) -> dict[str, Any] | None:
        """The local server's structured-output setting as manifests record it (None: not stated)."""
        return self.structured_outputs.to_json() if self.structured_outputs is not None else None
