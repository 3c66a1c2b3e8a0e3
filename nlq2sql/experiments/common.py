"""Shared by the experiments: one endpoint for all their runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import bound_endpoint

__all__ = ["shared_endpoint"]


@contextmanager
def shared_endpoint(cfg: EvalConfig) -> Iterator[EvalConfig]:
    """Yield ``cfg`` bound to an endpoint: the given one, or one local vLLM for all runs.

    Starting a CPU server costs a minute or more, so an experiment with several runs
    starts one and stops it at the end, whatever happens (see ``live.bound_endpoint``).
    """
    with bound_endpoint(cfg) as (bound, _info):
        yield bound
