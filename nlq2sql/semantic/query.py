"""Intent v2: a MetricFlow query as JSON, or a reasoned refusal.

Names are spelled as MetricFlow's query interface spells them (``customer__region``,
``metric_time__month``, multi-hop paths, bare entities); a ``where`` item is field, operator and
values, never SQL (values are bound). :meth:`MetricQuery.kind` derives the v1 kinds, so per-kind
tables, the majority baseline and the ranking guardrail apply to v2; ``listing`` is a query with no
metric (MetricFlow's dimension-value query)."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from nlq2sql.inputs import not_a_boolean

__all__ = ["ARITY", "GRAINS", "KINDS", "LISTING", "METRIC_TIME", "OPS", "MetricQuery", "OrderBy", "Unanswerable",
           "Value", "Where", "is_metric_time"]

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
Value = Annotated[str, Field(max_length=128)] | int | float
Op = Literal["eq", "neq", "in", "not_in", "gt", "gte", "lt", "lte", "between"]
OPS: tuple[str, ...] = ("eq", "neq", "in", "not_in", "gt", "gte", "lt", "lte", "between")
GRAINS: tuple[str, ...] = ("day", "week", "month", "quarter", "year")
#: How many values each operator takes, ``(least, most)``; most ``None``: as many as ``Where`` allows.
ARITY: dict[str, tuple[int, int | None]] = {
    op: (2, 2) if op == "between" else (1, None) if op in ("in", "not_in") else (1, 1) for op in OPS}
_EXACTLY = {1: "one value", 2: "two values"}
METRIC_TIME = "metric_time"
#: The derived label of a query with no metric (a dimension-value query).
LISTING = "listing"
#: Every label :attr:`MetricQuery.kind` gives, the three v1 intent kinds first.
KINDS: tuple[str, ...] = ("breakdown", "top_n_by_metric", "time_series", LISTING)


def is_metric_time(name: str) -> bool:
    """``metric_time`` or one of its grains (``metric_time__month``)."""
    return name == METRIC_TIME or name.startswith(METRIC_TIME + "__")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Where(_Strict):
    """One condition: ``values`` is a list always (one value for eq…lte, two for between)."""

    field: Name
    op: Op
    values: tuple[Value, ...] = Field(min_length=1, max_length=50)

    @model_validator(mode="after")
    def _arity(self) -> Where:
        least, most = ARITY[self.op]
        if most is not None and not least <= len(self.values) <= most:
            raise ValueError(f"op {self.op!r} takes exactly {_EXACTLY[most]}, got {len(self.values)}")
        return self


class OrderBy(_Strict):
    field: Name
    descending: bool = False


class MetricQuery(_Strict):
    """What the question asks for, as MetricFlow would be asked; never SQL text.

    ``metrics`` may be empty when ``group_by`` is not: a listing, the distinct values of the
    group-bys (MetricFlow's dimension-value query).  A listing names no ``metric_time``: with no
    metric there is no metric time, and MetricFlow would answer from the time spine (every day
    of the generated spine) or cross-join it; a time dimension of a semantic model is the way to ask."""

    metrics: tuple[Name, ...] = Field(default=(), max_length=8)
    group_by: tuple[Name, ...] = Field(default=(), max_length=8)
    where: tuple[Where, ...] | None = Field(default=None, max_length=8)
    order_by: tuple[OrderBy, ...] | None = Field(default=None, max_length=8)
    limit: Annotated[int, Field(ge=1, le=10_000), BeforeValidator(not_a_boolean)] | None = None

    @field_validator("metrics", "group_by", mode="after")
    @classmethod
    def _once(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        """A name said twice means it once (grammar backends do not all enforce ``uniqueItems``)."""
        return tuple(dict.fromkeys(names))

    @model_validator(mode="after")
    def _asks_something(self) -> MetricQuery:
        if not self.metrics and not self.group_by:
            raise ValueError("a query needs a metric or a group-by: metrics may be empty only when group_by "
                             "names what to list")
        if not self.metrics:
            timed = [n for n in (*self.group_by, *(w.field for w in self.where or ()),
                                 *(o.field for o in self.order_by or ())) if is_metric_time(n)]
            if timed:
                raise ValueError(f"a listing (no metric) cannot use {timed[0]!r}: metric_time exists only with a "
                                 "metric; use a time dimension of the semantic model")
        return self

    def key(self) -> str:
        """Stable text of the query: equal keys ⇔ equal queries (empty and null lists alike)."""
        data = self.model_dump(mode="json")
        data["where"] = data["where"] or []
        data["order_by"] = data["order_by"] or []
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @property
    def ordered(self) -> bool:
        """Whether row order is part of the answer (it is only when the query orders)."""
        return bool(self.order_by)

    @property
    def kind(self) -> str:
        """The seed's label: time series (grouped by metric_time), top-N (ordered with a limit),
        breakdown; and ``listing`` for a query with no metric, whatever its order and limit."""
        if not self.metrics:
            return LISTING
        if any(is_metric_time(g) for g in self.group_by):
            return "time_series"
        if self.order_by and self.limit is not None:
            return "top_n_by_metric"
        return "breakdown"


class Unanswerable(_Strict):
    """The model's word that this semantic layer cannot express the question."""

    unanswerable: Annotated[str, Field(min_length=1, max_length=300)]
