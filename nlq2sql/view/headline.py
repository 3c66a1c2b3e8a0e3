"""The headline figures the viewer computes itself, for a run without ``summary.json`` (an unfinished
run): the summary's own section types (:class:`~nlq2sql.records.summary_parts.Rate`,
:class:`~nlq2sql.records.summary_parts.Percentiles`), so the page reads them as it reads a summary,
computed by the harness's own ``stages.score.rate`` and ``spread`` (the same figures a summary has).

Kept apart from :mod:`.runs` (reading run directories) so that module stays small; the figures are
turned into JSON only where the run's summary is (``load_run``: the page's data is JSON).
"""

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

