"""Shared by the experiments: one endpoint for all their runs, a finished run read through the
manifest and summary models."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.errors import RecordError
from nlq2sql.records.results import Manifest, Summary
from nlq2sql.records.store import MANIFEST, SUMMARY, read_finished_run
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import bound_endpoint

__all__ = ["read_run", "shared_endpoint"]


M = TypeVar("M", bound=BaseModel)


def _typed(model: type[M], data: object, path: Path) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise RecordError(first["msg"], path=str(path), field=".".join(str(x) for x in first["loc"])) from None


def read_run(run_dir: Path) -> tuple[Manifest, Summary]:
    """``records.store.read_finished_run`` (refused when the records no longer match the summary),
    the manifest through the condition registry's model and the summary through its own; a file that
    does not match its model is one RecordError naming file and field, as ``load_summary`` says it."""
    manifest, summary = read_finished_run(run_dir)
    return (_typed(REGISTRY.manifest_model(), manifest, run_dir / MANIFEST),
            _typed(Summary, summary, run_dir / SUMMARY))


@contextmanager
def shared_endpoint(cfg: EvalConfig) -> Iterator[EvalConfig]:
    """Yield ``cfg`` bound to an endpoint: the given one, or one local vLLM for all runs.

    Starting a CPU server costs a minute or more, so an experiment with several runs
    starts one and stops it at the end, whatever happens (see ``live.bound_endpoint``).
    """
    with bound_endpoint(cfg) as (bound, _info):
        yield bound

