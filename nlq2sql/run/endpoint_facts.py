"""How a run's endpoint came to be (:class:`EndpointFacts`): given, or a local server started here;
declared where the endpoint is bound, so load results above write it typed as their ``server``."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from nlq2sql.records.manifest_parts import StructuredOutputs
from nlq2sql.records.typed import Num, Typed

__all__ = ["EndpointFacts"]


class EndpointFacts(Typed):
    """The endpoint a load run used, as ``run.live.bound_endpoint`` states it and every load result
    writes it (``server``): a given endpoint is ``started_by_us``/``endpoint`` only; a local server
    adds its arguments, start time and settings.  Only the keys given are written.  Not the
    manifest's ``ServerFacts``: those are measured (``/v1/models``), these are how the endpoint
    came to be."""

    model_config = ConfigDict(validate_assignment=True)

    started_by_us: bool | None = None  # absent for a fleet's member
    endpoint: str | None = None  # the URL, or "local"
    args: list[str] | None = None  # the local server's command line (after the program)
    startup_s: Num | None = None
    max_num_seqs: int | None = None
    cpu: bool | None = None
    structured_outputs: StructuredOutputs | None = None
    batch_invariant: bool | None = None

    def structured_written(self) -> dict[str, Any] | None:
        """The local server's structured-output setting as manifests record it (None: not stated)."""
        return self.structured_outputs.to_json() if self.structured_outputs is not None else None
