"""Shared by the experiments: one endpoint for all their runs, a finished run read through the
manifest and summary models."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.records.results import Manifest, Summary
from nlq2sql.records.rundir import RunDir
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import bound_endpoint

__all__ = ["read_run", "shared_endpoint"]


def read_run(run_dir: Path) -> tuple[Manifest, Summary]:
    """A finished run (:meth:`RunDir.finished`: refused when the records no longer match the
    summary), its manifest through the condition registry's model and its summary."""
    run = RunDir.finished(run_dir)
    return run.manifest(REGISTRY.manifest_model()), run.summary()


@contextmanager
def shared_endpoint(cfg: EvalConfig) -> Iterator[EvalConfig]:
    """Yield ``cfg`` bound to an endpoint: the given one, or one local vLLM for all runs.

    Starting a CPU server costs a minute or more, so an experiment with several runs
    starts one and stops it at the end, whatever happens (see ``live.bound_endpoint``).
    """
    with bound_endpoint(cfg) as (bound, _info):
        yield bound

