"""The headline figures the viewer computes itself, for a run without ``summary.json`` (an unfinished
run): the summary's own section types (:class:`~nlq2sql.records.summary_parts.Rate`,
:class:`~nlq2sql.records.summary_parts.Percentiles`), so the page reads them as it reads a summary.

Kept apart from :mod:`.runs` (reading run directories) so that module stays small; the figures are
turned into JSON only where the run's summary is (``load_run``: the page's data is JSON).
"""

from __future__ import annotations

import math
from typing import Any

from nlq2sql.records.summary_parts import Part, Percentiles, Rate

__all__ = ["Headline", "HeadlineTiming", "Z95", "headline", "wilson"]

Z95 = 1.959963984540054  # two-sided 95 % normal quantile (Wilson interval)


class HeadlineTiming(Part):
    latency_s: Percentiles


class Headline(Part):
    """The headline part of a summary, in its key order, marked as the viewer's own."""

    n: int
    raw_accuracy: Rate
    final_accuracy: Rate
    execution_accuracy: Rate
    schema_valid_rate: Rate
    interventions: int
    intervention_precision: Rate
    timing: HeadlineTiming
    computed_by_viewer: bool = True


def wilson(k: int, n: int) -> Rate:
    """The summary's proportion: value, 95 % Wilson interval, k, n (as ``stages.score.wilson``)."""
    if n == 0:
        return Rate(value=None, k=0, n=0, ci95=None)
    p = k / n
    denom = 1 + Z95 ** 2 / n
    centre = (p + Z95 ** 2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / denom
    return Rate(value=p, k=k, n=n, ci95=[round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)])


def headline(cols: dict[str, list[Any]]) -> Headline:
    """The headline part of a summary from the item columns (``runs.COLUMNS``)."""
    n = len(cols["id"])
    fired = sum(1 for v in cols["interventions"] if v)
    lat = sorted(v for v in cols["latency_s"] if v is not None)
    return Headline(n=n, raw_accuracy=wilson(sum(cols["correct_raw"]), n),
                    final_accuracy=wilson(sum(cols["correct_final"]), n),
                    execution_accuracy=wilson(sum(cols["correct_exec"]), n),
                    schema_valid_rate=wilson(sum(cols["schema_valid"]), n), interventions=fired,
                    intervention_precision=wilson(sum(cols["interventions_ok"]), fired),
                    timing=HeadlineTiming(latency_s=_percentiles(lat)), computed_by_viewer=True)


def _percentiles(sorted_values: list[float]) -> Percentiles:
    if not sorted_values:
        return Percentiles(n=0, p50=None, p95=None, p99=None, mean=None)

    def q(p: float) -> float:  # linear interpolation, as numpy.percentile
        pos = (len(sorted_values) - 1) * p / 100
        lo = math.floor(pos)
        hi = min(lo + 1, len(sorted_values) - 1)
        return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)

    return Percentiles(n=len(sorted_values), mean=sum(sorted_values) / len(sorted_values),
                       p50=q(50), p95=q(95), p99=q(99))
