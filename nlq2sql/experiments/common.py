"""Shared by the experiments: one endpoint for all their runs, a finished run read through the
manifest and summary models, and a rate as their results hold it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.errors import RecordError
from nlq2sql.load.figures import UNSET, Fig, UnsetType
from nlq2sql.records.results import Manifest, Summary
from nlq2sql.records.store import MANIFEST, SUMMARY, read_finished_run
from nlq2sql.records.summary_parts import Rate
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import bound_endpoint
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import rate

__all__ = ["Share", "read_run", "shared_endpoint"]


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


class Share(Fig, kw_only=True):
    """A proportion as ``stages.score.rate`` builds it and ``summary.json`` holds it (k of n, the
    Wilson 95 % interval), in the written key order; ``label`` only where the summary names a class."""

    value: float | None
    k: int
    n: int
    ci95: list[float] | None
    label: str | None | UnsetType = UNSET

    def text(self) -> str:
        """``stages.report.pct``: "63.3 % [50.7–74.4] (38/60)", or "n/a (0 samples)"."""
        return pct(self.to_json())

    @classmethod
    def wilson(cls, k: int, n: int) -> Share:
        """``stages.score.rate`` (its interval's ends are numpy floats: written as the same numbers)."""
        r = rate(k, n)
        return cls(value=r.value, k=r.k, n=r.n, ci95=None if r.ci95 is None else [float(x) for x in r.ci95])

    @classmethod
    def of(cls, rate: Rate) -> Share:
        """A summary's rate (its model) as a result holds it: the keys the file has, in its order."""
        return cls(value=rate.value, k=rate.k, n=rate.n, ci95=rate.ci95)


@contextmanager
def shared_endpoint(cfg: EvalConfig) -> Iterator[EvalConfig]:
    """Yield ``cfg`` bound to an endpoint: the given one, or one local vLLM for all runs.

    Starting a CPU server costs a minute or more, so an experiment with several runs
    starts one and stops it at the end, whatever happens (see ``live.bound_endpoint``).
    """
    with bound_endpoint(cfg) as (bound, _info):
        yield bound

