"""Value linking (``--link-values``): the warehouse's known values a question names, proposed as filters.

The matching (:mod:`nlq2sql.stages.value_links`) is deterministic and model-free, so it is offered
two ways: **hint**, the linked filters written after the question (recorded as ``linked_values``);
**repair**, the ``values`` guardrail, which drops filters on values the question never names, fixes
``eq`` ↔ ``neq`` and adds missing ones, each step an intervention scored like any rule and
re-scorable offline (``nlq2sql score --guardrails ranking,values``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_serializer

from nlq2sql.answers.kinds import answer_kind
from nlq2sql.conditions.registry import Condition, Messages, Settings, register
from nlq2sql.conditions.trace import Trace
from nlq2sql.records.manifest_parts import Part
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.query import Where
from nlq2sql.stages.query_guard import link_where, where_hint
from nlq2sql.stages.value_links import ValueIndex, hint_text

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.semantic.binding import Warehouse

__all__ = ["LINK_MODES", "Values", "ValuesSettings", "ValuesTrace", "effective_guardrails"]

LINK_MODES = ("none", "hint", "repair", "both")


def effective_guardrails(guardrails: tuple[str, ...] | list[str], link_values: str) -> tuple[str, ...]:
    """The rule sets a run applies: ``--link-values repair|both`` appends ``values``."""
    names = tuple(guardrails)
    if link_values in ("repair", "both") and "values" not in names:
        names = (*names, "values")
    return names


class ValuesSettings(Settings):
    link_values: Literal["none", "hint", "repair", "both"] = Field(
        "none", description="Value linking: the warehouse values the question names, as filters: none | hint "
        "(written after the question) | repair (the 'values' guardrail fixes the answer's filters) | both.",
        json_schema_extra={"noun": "mode"})


class ValuesTrace(Trace):
    """Per item, with the hint on: the values linked, as the hint wrote them -- v1 filters
    (field, op, value), or v2 ``where`` items (written as their JSON dump); absent without the hint."""

    linked_values: list[dict[str, str]] | list[Where] | None = None

    @field_serializer("linked_values")
    def _whole(self, value: list[dict[str, str]] | list[Where] | None) -> list[object] | None:
        """A ``where`` item is written whole (its JSON dump), every field of it."""
        return None if value is None else [v.model_dump(mode="json") if isinstance(v, Where) else v for v in value]


@register
class Values(Condition[ValuesSettings]):
    """``--link-values``: the hint after the question (``linked_values`` per record) and/or the
    ``values`` rule set added to the run's guardrails."""

    name = "values"
    settings_model = ValuesSettings
    answers = frozenset({"intent", "query"})  # on v2: MetricFlow's names, ``where`` items (stages.query_guard)
    manifest_keys = ("link_values",)
    manifest_types = {"link_values": str}
    label_rank = 20.0
    neutral = True
    trace = ValuesTrace
    index: ValueIndex | None = None
    catalog: Catalog | None = None  # set for the v2 answer: its hint is written as ``where`` items

    def guardrails(self) -> tuple[str, ...]:
        return ("values",) if self.settings.link_values in ("repair", "both") else ()

    def load(self, wh: Warehouse, answer: str) -> None:
        if self.settings.link_values in ("hint", "both"):
            self.index = ValueIndex(wh)
        if answer_kind(answer).form == "query":
            self.catalog = wh.catalog

    def manifest(self) -> Part:
        return self.manifest_part().model_validate({"link_values": self.settings.link_values if self.on else None})

    @classmethod
    def label(cls, manifest: Mapping[str, JsonValue]) -> str | None:
        mode = manifest.get("link_values")
        return f"values {mode}" if mode and mode != "off" else None

    def before(self, question: str, messages: Messages) -> tuple[Messages, ValuesTrace]:
        if self.index is None:
            return messages, ValuesTrace()
        linked = self.index.link(question)  # the hint follows the question itself, not the examples
        if self.catalog is not None:  # the v2 answer: where items in MetricFlow's names
            where = link_where(linked, self.catalog)
            trace = ValuesTrace(linked_values=where)
            hint = where_hint(where)
        else:
            trace = ValuesTrace(linked_values=[lk.as_filter() for lk in linked])
            hint = hint_text(linked)
        if hint:
            messages = [*messages[:-1], {**messages[-1], "content": messages[-1]["content"] + hint}]
        return messages, trace
