"""Options for the local vLLM's serving decisions, shared by ``serve``, ``eval``, ``load-check``
and ``backends``: the structured-output backend and batch-invariant mode."""

from __future__ import annotations

from typing import Annotated

import typer

from nlq2sql.errors import InputError
from nlq2sql.run.serving import STRUCTURED_BACKENDS

__all__ = ["BatchInvariantOpt", "StructuredBackendOpt", "check_local_only"]

StructuredBackendOpt = Annotated[str, typer.Option(
    help=f"Local server: vLLM's structured-output backend ({' | '.join(STRUCTURED_BACKENDS)}); auto with the "
         "compact grammar is xgrammar. The manifest records the backend the engine logged.")]
BatchInvariantOpt = Annotated[bool, typer.Option(
    help="Local server: vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1); refused with the reason where "
         "the installed vLLM has no batch-invariant kernels for this platform (CPU).")]


def check_local_only(endpoint: object, structured_backend: str, batch_invariant: bool) -> None:
    """These are settings of a server the harness starts; a given endpoint's are its own."""
    if endpoint is None:
        return
    if structured_backend != "auto":
        raise InputError("only for a local server (no --endpoint): a running server's backend is its own "
                         "setting (start it with nlq2sql serve --structured-backend)", field="--structured-backend")
    if batch_invariant:
        raise InputError("only for a local server (no --endpoint): start the server with nlq2sql serve "
                         "--batch-invariant", field="--batch-invariant")
