"""The headline figures for a run without ``summary.json`` (unfinished), as the summary's own section
types, computed by ``stages.score.rate`` and ``spread``, so the page reads them as a summary's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nlq2sql.records.summary_parts import Headline, Part, Percentiles
from nlq2sql.stages.score import rate, spread

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["HeadlineTiming", "ViewerHeadline", "headline"]


class HeadlineTiming(Part):
    latency_s: Percentiles


class ViewerHeadline(Headline):
    """The headline part of a summary, in its key order, marked as the viewer's own."""

    timing: HeadlineTiming
    computed_by_viewer: bool = True


def headline(cols: dict[str, list[JsonValue]]) -> ViewerHeadline:
    """The headline part of a summary from the item columns (``runs.COLUMNS``)."""
    n = len(cols["id"])
    fired = sum(1 for v in cols["interventions"] if v)
    lat = [v for v in cols["latency_s"] if v is not None]
    return ViewerHeadline(n=n, raw_accuracy=rate(sum(cols["correct_raw"]), n),
                    final_accuracy=rate(sum(cols["correct_final"]), n),
                    execution_accuracy=rate(sum(cols["correct_exec"]), n),
                    schema_valid_rate=rate(sum(cols["schema_valid"]), n), interventions=fired,
                    intervention_precision=rate(sum(cols["interventions_ok"]), fired),
                    timing=HeadlineTiming(latency_s=spread(lat)), computed_by_viewer=True)

