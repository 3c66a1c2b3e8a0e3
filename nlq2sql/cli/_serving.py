"""Options for the local vLLM's serving decisions, shared by ``serve``, ``eval``, ``load-check``
and ``backends``: the structured-output backend, batch-invariant mode, the context length and how
long start-up may take."""

from __future__ import annotations

from typing import Annotated

import typer

from nlq2sql.errors import InputError
from nlq2sql.inputs import MAX_NUM_SEQS
from nlq2sql.run.serving import STRUCTURED_BACKENDS

__all__ = ["MAX_GPUS_PER_REPLICA", "MAX_REPLICAS", "BatchInvariantOpt", "MaxModelLenOpt", "SizedMaxModelLenOpt",
           "StartupTimeoutOpt", "StructuredBackendOpt", "check_local_only", "check_server_numbers",
           "check_startup_timeout"]

_PANEL = "Endpoint / server"  # (cli._common.ENDPOINT_PANEL)
StructuredBackendOpt = Annotated[str, typer.Option(
    help=f"Local server: vLLM's structured-output backend ({' | '.join(STRUCTURED_BACKENDS)}); auto with the "
         "compact grammar is xgrammar. The manifest records the backend the engine logged.", rich_help_panel=_PANEL)]
BatchInvariantOpt = Annotated[bool, typer.Option(
    help="Local server: vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1); refused with the reason where "
         "the installed vLLM has no batch-invariant kernels for this platform (CPU).", rich_help_panel=_PANEL)]

MaxModelLenOpt = Annotated[int, typer.Option(
    help="vLLM --max-model-len (a local server's context; jaffle's v2 prompts with 8 examples need 4096).",
    rich_help_panel=_PANEL)]
SizedMaxModelLenOpt = Annotated[int | None, typer.Option(
    "--max-model-len", help="vLLM --max-model-len of the server the run starts. Default: the longest prompt "
    "(counted with the model's tokenizer) plus --max-tokens, rounded up to 256, within the model's limit. A "
    "prompt that cannot fit the context (this one, or an --endpoint's max_model_len) is refused before "
    "anything is sent.", rich_help_panel=_PANEL)]
StartupTimeoutOpt = Annotated[float, typer.Option(
    help="Seconds each local replica may take to become healthy (a loaded 2-core machine can need more "
         "than the default).", rich_help_panel=_PANEL)]


def check_startup_timeout(seconds: float, max_model_len: int | None = 2048) -> None:
    """Bounds of the local server's start-up settings, checked before any model work."""
    if not (0 < seconds <= 86_400):
        raise InputError(f"must be more than 0 and at most 86400 seconds, got {seconds:g}", field="--startup-timeout")
    if max_model_len is not None and not 128 <= max_model_len <= 1_048_576:
        raise InputError(f"must be between 128 and 1048576 tokens, got {max_model_len}", field="--max-model-len")


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


MAX_REPLICAS = 64
MAX_GPUS_PER_REPLICA = 64


def check_server_numbers(max_num_seqs: int | None = None, replicas: int = 1,
                         gpus_per_replica: int | None = None) -> None:
    """The local server's counts within bounds, checked before any model work (vLLM would exit
    with its own traceback, after the model was resolved)."""
    for option, value, top in (("--max-num-seqs", max_num_seqs, MAX_NUM_SEQS), ("--replicas", replicas, MAX_REPLICAS),
                               ("--gpus-per-replica", gpus_per_replica, MAX_GPUS_PER_REPLICA)):
        if value is not None and not 1 <= value <= top:
            raise InputError(f"must be between 1 and {top:,}, got {value:,}", field=option)
