"""Schema linking (``--link-schema prompt``): the part of the layer a question needs, in place of
the whole vocabulary in the v2 prompt.

A long vocabulary does not fit a small model's context and hurts large ones. Per question the most
relevant metrics, dimensions and entities are retrieved lexically (no model): its words against
each item's split name, label, description and known values, IDF-weighted, with bonuses for a
phrase match and a value linked (:mod:`nlq2sql.stages.value_links`); written as the usual vocabulary
lines within ``--link-budget`` estimated tokens (4 characters a token); time grains and years stay.
The enforced JSON Schema stays whole, so a missed name is still answerable. Recorded per item:
``linked_schema``, and on a scored item ``linking_recall`` / ``linking_missed`` (the gold's names,
``metric_time`` aside), so a miss is attributed to linking or to the model."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from nlq2sql.conditions.registry import Condition, Messages, Settings, register
from nlq2sql.conditions.trace import Trace
from nlq2sql.records.manifest_parts import Part
from nlq2sql.records.typed import Typed
from nlq2sql.stages.value_links import ValueIndex

if TYPE_CHECKING:
    from nlq2sql.records.item import ItemRecord
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.semantic.binding import Warehouse
    from nlq2sql.transport.stream import Completion

__all__ = ["Linked", "Linker", "Linking", "LinkingSettings", "LinkingTrace", "gold_names", "recall"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset({"a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "each", "every", "for",
                   "from", "had", "has", "have", "how", "i", "in", "is", "it", "its", "many", "me", "much", "of",
                   "on", "or", "our", "per", "show", "the", "their", "there", "to", "was", "we", "were", "what",
                   "when", "which", "who", "with"})
MIN_METRICS, MAX_METRICS, MIN_DIMENSIONS = 3, 8, 4
#: A metric is linked when it scores at least this share of the best metric's score.
RELATIVE = 0.35
CHARS_PER_TOKEN = 4
_GRAINS = frozenset({"day", "week", "month", "quarter", "year"})


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def words(text: str) -> list[str]:
    """Lower-case stems of ``text``'s words, stop words dropped."""
    return [_stem(w) for w in _WORD.findall(text.replace("_", " ").lower()) if w not in _STOP]


def _phrase(text: str) -> str:
    return " " + " ".join(_stem(w) for w in _WORD.findall(text.replace("_", " ").lower())) + " "


@dataclass(frozen=True)
class _Item:
    kind: str  # metric | dimension | entity
    name: str  # metric name, dimension name (v1), entity name
    group_by: str  # the MetricFlow name it is written as (a metric: its name)
    strong: frozenset[str]  # name and label words
    weak: frozenset[str]  # description and value words
    phrases: tuple[str, ...]  # label and spaced name, as phrases


class Linked(Typed):
    """One item's linked part of the layer (its record's ``linked_schema``)."""

    metrics: list[str]
    group_by: list[str]  # MetricFlow names: dimensions' and entities'
    values: list[str] = []  # dimension (v1 name) = value, as value linking matched them
    est_tokens: int = 0  # the linked vocabulary's estimated tokens


class LinkingTrace(Trace):
    """Per item: what was linked; on a scored item the share of the gold's names it covered."""

    linked_schema: Linked | None = None
    linking_recall: float | None = None
    linking_missed: list[str] | None = None


class Linker:
    """The layer's metrics, dimensions and entities as lexical documents, and the selection."""

    def __init__(self, wh: Warehouse, budget: int) -> None:
        self.wh, self.budget = wh, budget
        cat = wh.catalog
        self.engine = cat.engine
        items: list[_Item] = []
        for m in cat.metrics.values():
            items.append(_Item("metric", m.name, m.name, frozenset(words(m.name) + words(m.label)),
                               frozenset(words(m.description)), (_phrase(m.label), _phrase(m.name))))
        for d in cat.dimensions.values():
            vals = wh.values(d.name) or ()
            entity = d.group_by.rsplit("__", 1)[0]
            items.append(_Item("dimension", d.name, d.group_by,
                               frozenset(words(d.name) + words(d.label) + words(entity)),
                               frozenset(words(d.description) + [w for v in vals[:50] for w in words(v)]),
                               (_phrase(d.label), _phrase(d.name))))
        for e in sorted(self.engine.entities):
            items.append(_Item("entity", e, e, frozenset(words(e.removesuffix("_id"))), frozenset(),
                               (_phrase(e.removesuffix("_id")),)))
        self.items = items
        self.listable = set(self.engine.listables())  # a listing reaches these without a metric
        df: Counter[str] = Counter(w for it in items for w in it.strong | it.weak)
        self.idf = {w: math.log(1 + len(items) / n) for w, n in df.items()}
        self.values = ValueIndex(wh)

    def score(self, item: _Item, qwords: set[str], qphrase: str) -> float:
        s = sum(self.idf.get(w, 0.0) * (2.0 if w in item.strong else 1.0)
                for w in qwords if w in item.strong or w in item.weak)
        if any(len(p.strip()) > 2 and p in qphrase for p in item.phrases):
            s += 5.0
        return s

    def link(self, question: str) -> Linked:
        qwords, qphrase = set(words(question)), _phrase(question)
        valued = {lk.field: lk.value for lk in self.values.link(question) if lk.field != "year"}
        scored = [(self.score(it, qwords, qphrase) + (10.0 if it.kind == "dimension" and it.name in valued else 0.0),
                   i, it) for i, it in enumerate(self.items)]
        ranked = sorted(scored, key=lambda x: (-x[0], x[1]))
        metrics = [it for s, _, it in ranked if it.kind == "metric"]
        top = max((s for s, _, it in ranked if it.kind == "metric"), default=0.0)
        chosen_m = [it.name for s, _, it in ranked  # the close runners-up of the best: the rest is noise
                    if it.kind == "metric" and s > 0 and s >= RELATIVE * top][:MAX_METRICS]
        for it in metrics:  # at least a few metrics: the best of those with no word in common, in layer order
            if len(chosen_m) >= MIN_METRICS:
                break
            if it.name not in chosen_m:
                chosen_m.append(it.name)
        reach = {g for m in chosen_m for g in self.engine.group_bys((m,))} | self.listable
        reach_dims = {d.name for g in reach if (d := self.wh.catalog.dimension_of(g)) is not None}
        others = [(s, it) for s, _, it in ranked if it.kind != "metric"  # by any path: the prompt names them all
                  and (it.group_by in reach or it.kind == "dimension" and it.name in reach_dims)]
        dims: list[str] = []
        ents: list[str] = []
        picked_dims = 0
        for s, it in others:
            if s <= 0 and picked_dims >= MIN_DIMENSIONS:
                break
            if it.kind == "entity" and s <= 0:
                continue
            trial_d, trial_e = (dims + [it.name], ents) if it.kind == "dimension" else (dims, ents + [it.group_by])
            if self._tokens(chosen_m, trial_d, trial_e) > self.budget and (dims or ents):
                continue
            dims, ents = trial_d, trial_e
            picked_dims += it.kind == "dimension"
        while len(chosen_m) > 1 and self._tokens(chosen_m, dims, ents) > self.budget:
            chosen_m.pop()  # the lowest-ranked metric first
        by_name = {d.name: d.group_by for d in self.wh.catalog.dimensions.values()}
        linked = Linked(metrics=chosen_m, group_by=[*ents, *(by_name[d] for d in dims)])
        if values := [f"{f}={v}" for f, v in valued.items()]:  # (empty: absent)
            linked.values = values
        if est := self._tokens(chosen_m, dims, ents):
            linked.est_tokens = est
        return linked

    def text(self, linked: Linked) -> str:
        by_gb = {d.group_by: d.name for d in self.wh.catalog.dimensions.values()}
        dims = [by_gb[g] for g in linked.group_by if g in by_gb]
        ents = [g for g in linked.group_by if g not in by_gb]
        return str(self.wh.query_vocabulary_text(metrics=linked.metrics, dimensions=dims, entities=ents))

    def _tokens(self, metrics: list[str], dims: list[str], ents: list[str]) -> int:
        return len(self.wh.query_vocabulary_text(metrics=metrics, dimensions=dims, entities=ents)) // CHARS_PER_TOKEN


def gold_names(gold: Mapping[str, JsonValue]) -> list[str]:
    """The names a gold query uses that linking must offer: metrics, group-bys, ``where`` fields
    (``metric_time`` aside: always offered), each once, in order."""
    names = [*(gold.get("metrics") or ()), *(gold.get("group_by") or ()),
             *(w.get("field") for w in (gold.get("where") or ()) if isinstance(w, Mapping))]
    return list(dict.fromkeys(str(n) for n in names if n and not str(n).startswith("metric_time")))


def recall(gold: Mapping[str, JsonValue], linked: Linked) -> tuple[float | None, list[str]]:
    """The share of the gold's names that were linked (a group-by by its name, or the same
    ``entity__dimension`` reached by another path), and those missed; None for a gold without names."""
    names = gold_names(gold)
    if not names:
        return None, []
    offered = set(linked.metrics) | set(linked.group_by)
    def tail(name: str) -> str:  # entity__dimension, whatever the path and grain
        parts = name.split("__")
        if len(parts) > 2 and parts[-1] in _GRAINS:
            parts = parts[:-1]
        return "__".join(parts[-2:])

    tails = {tail(g) for g in linked.group_by}

    def covered(n: str) -> bool:
        return n in offered or tail(n) in tails

    missed = [n for n in names if not covered(n)]
    return (len(names) - len(missed)) / len(names), missed


class LinkingSettings(Settings):
    link_schema: Literal["none", "prompt"] = Field(
        "none", description="Schema linking (--answer query): the metrics, dimensions, entities and known values "
        "the question needs, retrieved lexically from the layer, replace the whole vocabulary in the prompt "
        "(none | prompt; the JSON Schema stays whole).", json_schema_extra={"noun": "mode"})
    link_budget: int = Field(600, ge=100, le=100_000, description="Schema linking: the linked vocabulary's "
                             "budget in estimated tokens (about 4 characters a token).")


@register
class Linking(Condition[LinkingSettings]):
    """``--link-schema prompt``: per item the linked vocabulary in place of the whole one."""

    name = "linking"
    settings_model = LinkingSettings
    answers = frozenset({"query"})
    manifest_keys = ("link_schema",)
    refusal = " (it replaces the v2 prompt's vocabulary)"
    label_rank = 15.0
    trace = LinkingTrace
    linker: Linker | None = None
    full: str = ""

    @property
    def on(self) -> bool:
        return self.settings.link_schema != "none"  # a budget without --link-schema is not used

    def load(self, wh: Warehouse, answer: str) -> None:
        self.linker = Linker(wh, self.settings.link_budget)
        self.full = wh.query_vocabulary_text()
        self._linked: dict[str, Linked] = {}

    def manifest(self) -> Part:
        value = ({"mode": self.settings.link_schema, "budget": self.settings.link_budget, "retrieval": "lexical idf"}
                 if self.on else None)
        return self.manifest_part().model_validate({"link_schema": value})

    @classmethod
    def label(cls, manifest: Mapping[str, JsonValue]) -> str | None:
        ls = manifest.get("link_schema")
        return f"linked {ls['budget']}" if isinstance(ls, Mapping) else None

    def before(self, question: str, messages: Messages) -> tuple[Messages, LinkingTrace]:
        assert self.linker is not None
        linked = self.linker.link(question)
        self._linked[question] = linked
        system = messages[0]
        if system.get("role") == "system" and self.full and self.full in system["content"]:
            messages = [{**system, "content": system["content"].replace(self.full, self.linker.text(linked))},
                        *messages[1:]]
        return messages, LinkingTrace(linked_schema=linked)

    def after(self, rec: ItemRecord, comp: Completion, scored: bool) -> None:
        linked = self._linked.get(rec.question)
        gold = rec.judgement.gold_intent if scored and rec.judgement is not None else None
        if linked is None or not isinstance(gold, Mapping):
            return
        share, missed = recall(gold, linked)
        rec.merge(LinkingTrace(linking_recall=share, linking_missed=missed))
