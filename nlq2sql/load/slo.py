"""Per-request SLOs and *correct goodput*: correct answers per second whose request met every SLO.

A fast wrong answer is worth nothing, so a request counts only when its final answer is correct
**and** it met every threshold. ``e2e_p95<=8s``: the limit applies to each request (e2e ≤ 8 s),
the percentile is the level's check (observed p95 ≤ 8 s)."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import ConfigDict

from nlq2sql.errors import InputError
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.typed import Typed

__all__ = ["METRICS", "Slo", "correct_goodput", "is_correct", "parse_slo", "parse_slos", "request_value"]

#: SLO metric → the record field a request is judged on (open loop: e2e from arrival).
METRICS = {"e2e": "latency_s", "ttft": "ttft_s", "itl": "itl_mean_s"}
_SLO = re.compile(r"^\s*(e2e|ttft|itl)_(p50|p90|p95|p99)\s*<=\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*$")


class Slo(Typed):
    model_config = ConfigDict(frozen=True)
    metric: Literal["e2e", "ttft", "itl"]
    pct: int
    limit_s: float

    @property
    def text(self) -> str:
        return f"{self.metric}_p{self.pct}<={self.limit_s:g}s"


def parse_slo(text: str) -> Slo:
    """``e2e_p95<=8s`` / ``ttft_p99<=500ms`` → :class:`Slo`."""
    m = _SLO.match(text)
    if not m:
        raise InputError(f"expected METRIC_pNN<=VALUE[s|ms] with METRIC one of e2e, ttft, itl and NN one of "
                         f"50, 90, 95, 99; got {text!r}", field="--slo")
    value = float(m.group(3)) / (1000.0 if m.group(4) == "ms" else 1.0)
    if not (value > 0 and math.isfinite(value)):
        raise InputError(f"the limit must be positive, got {text!r}", field="--slo")
    return Slo(metric=m.group(1), pct=int(m.group(2)[1:]), limit_s=value)  # type: ignore[arg-type]


def parse_slos(cls: Any, v: Any) -> Any:
    """A settings field validator: SLO strings (the CLI's) or :class:`Slo` objects."""
    return tuple(parse_slo(x) if isinstance(x, str) else x for x in v or ())


def request_value(r: ItemRecord, s: Slo, open_loop: bool = False) -> float | None:
    key = "latency_from_arrival_s" if open_loop and s.metric == "e2e" else METRICS[s.metric]
    v = r.get(key)
    if v is None and key == "latency_from_arrival_s":
        v = r.request.latency_s
    return float(v) if v is not None else None


def is_correct(r: ItemRecord) -> bool:
    """The sweep's "good": answered, schema-valid and finally correct."""
    return bool(r.outcome == "ok" and r.answer.raw_intent is not None
                and r.judgement is not None and r.judgement.correct_final)


def correct_goodput(records: list[ItemRecord], wall_s: float | None, slos: tuple[Slo, ...],
                    open_loop: bool = False) -> float | None:
    """Correct answers per second whose request met every SLO threshold (None without a wall time)."""
    if not wall_s:
        return None
    k = sum(1 for r in records if is_correct(r)
            and all((v := request_value(r, s, open_loop)) is not None and v <= s.limit_s for s in slos))
    return k / wall_s
