"""Value linking's matching: the warehouse's known values a question names, as filters.

Model-free, so the ``values`` guardrail re-scores offline and the ``--link-values`` condition writes
the same links as a hint. Matching is on normalised words, longest value first, never overlapping;
a value held by two dimensions is linked only when the question names one better; numbers are never
values (only four-digit years in the data). After "excluding", "except", "other than", "leave out",
"without", "not" (≤ two words between), or in a list following one, a value is linked with ``neq``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nlq2sql.stages.guardrail import Intervention, Rule, RuleSet, propose
from nlq2sql.stages.intent import Intent

if TYPE_CHECKING:
    from nlq2sql.semantic import Warehouse

__all__ = ["MAX_FILTERS", "RULES", "Link", "ValueIndex", "ValueRuleSet", "hint_text", "value_ruleset"]

YEAR_FIELD = "year"
MAX_FILTERS = 3
WORD = re.compile(r"[a-z0-9]+")
NEGATION = re.compile(r"(?:\bexcluding|\bexclude|\bexcept(?:\s+for)?|\bother\s+than|\bleav(?:e|ing)\s+out|"
                      r"\bwithout|\bnot(?:\s+counting|\s+including)?|\bapart\s+from|\bignoring)"
                      r"\s+(?:[\w.'&-]+\s+){0,2}$")
LIST_JOIN = re.compile(r"^\s*(?:[\w-]+\s*)?(?:,\s*)?(?:and|or|nor|&|,)\s*(?:the\s+)?$")
GENERIC = {"the", "a", "an", "of", "by", "for", "in", "and", "id", "name", "code"}


@dataclass(frozen=True)
class Link:
    """One value the question names: the filter it proposes and where it was found."""

    field: str
    op: str  # eq | neq
    value: str
    start: int
    end: int

    def as_filter(self) -> dict[str, str]:
        return {"field": self.field, "op": self.op, "value": self.value}


def _words(text: str) -> list[re.Match[str]]:
    return list(WORD.finditer(text.lower()))


def _norm(text: str) -> str:
    return " ".join(m.group(0) for m in _words(text))


class ValueIndex:
    """The listable values of a bound warehouse, keyed by their normalised words."""

    def __init__(self, wh: Warehouse) -> None:
        cat = wh.catalog
        candidates: dict[str, set[tuple[str, str]]] = {}
        self.fields: set[str] = set()
        for name in cat.dimensions:
            vals = wh.values(name)
            if vals is None:
                continue
            self.fields.add(name)
            for v in vals:
                key = _norm(v)
                if not key or key.isdigit() or (len(key) < 2):
                    continue
                candidates.setdefault(key, set()).add((name, v))
        self.years = frozenset(wh.years)
        if self.years:
            self.fields.add(YEAR_FIELD)
        self.phrases = candidates
        self.max_words = max((k.count(" ") + 1 for k in candidates), default=1)
        # the words that name each dimension (its name and label), to settle shared values
        self.dim_words = {name: {w for w in _norm(name.replace("_", " ") + " " + d.label).split()
                                 if w not in GENERIC}
                          for name, d in cat.dimensions.items()}
        self.name_words = set().union(*self.dim_words.values()) if self.dim_words else set()
        self._memo: dict[str, tuple[Link, ...]] = {}

    def _choose(self, options: set[tuple[str, str]], qwords: set[str]) -> tuple[str, str] | None:
        if len(options) == 1:
            return next(iter(options))
        scored = []
        for fld, v in options:
            words = self.dim_words.get(fld, set())
            hit = len(words & qwords)
            scored.append(((hit / len(words) if words else 0.0, hit), fld, v))
        scored.sort(reverse=True)
        if scored[0][0][1] == 0:  # no dimension named: the unqualified one ("region" over
            plain = sorted((len(self.dim_words.get(f, ())), f, v) for f, v in options)  # "supplier_region")
            return (plain[0][1], plain[0][2]) if plain[0][0] < plain[1][0] else None
        if scored[0][0] == scored[1][0]:
            return None  # ambiguous: the question does not say which dimension
        return scored[0][1], scored[0][2]

    def link(self, question: str) -> tuple[Link, ...]:
        """The values the question names, in order of appearance (at most one per value)."""
        try:
            return self._memo[question]
        except KeyError:
            pass
        lower = question.lower()
        words = _words(question)
        qwords = {m.group(0) for m in words} | {m.group(0)[:-1] for m in words if m.group(0).endswith("s")}
        found: list[Link] = []
        i = 0
        while i < len(words):
            hit = None
            for n in range(min(self.max_words, len(words) - i), 0, -1):
                key = " ".join(m.group(0) for m in words[i:i + n])
                if n == 1 and key in self.years and len(key) == 4:
                    hit = ((YEAR_FIELD, key), n)
                    break
                options = self.phrases.get(key)
                if options and key in self.name_words:  # "SHIP" is a value, "ship mode" a name:
                    exact = question[words[i].start():words[i + n - 1].end()]  # only the exact case
                    options = {(f, v) for f, v in options if v == exact}
                if options:
                    chosen = self._choose(options, qwords)
                    if chosen is not None:
                        hit = (chosen, n)
                    break
            if hit is None:
                i += 1
                continue
            (fld, value), n = hit
            start, end = words[i].start(), words[i + n - 1].end()
            op = "neq" if NEGATION.search(lower[:start]) else "eq"
            prev = found[-1] if found else None
            if op == "eq" and prev is not None and prev.op == "neq" and prev.field == fld \
                    and LIST_JOIN.match(lower[prev.end:start]):
                op = "neq"
            if not any(f.field == fld and f.value == value for f in found):
                found.append(Link(fld, op, value, start, end))
            i += n
        out = tuple(found)
        if len(self._memo) >= 4096:
            self._memo.clear()
        self._memo[question] = out
        return out

    def named(self, value: str, question: str) -> bool:
        """Whether the question names a value in some form (all its words, or one distinctive
        word of four letters or more: "Newark" for "Newark Liberty Intl")."""
        qn = f" {_norm(question)} "
        vn = _norm(value)
        if vn and f" {vn} " in qn:
            return True
        return any(len(w) >= 4 and not w.isdigit() and f" {w} " in qn for w in vn.split())


def hint_text(links: tuple[Link, ...]) -> str:
    """What ``--link-values hint`` adds after the question ('' when nothing is linked)."""
    if not links:
        return ""
    parts = "; ".join(f'{lk.field} {lk.op} "{lk.value}"' for lk in links[:MAX_FILTERS])
    return f"\n\n(Known values named in this question, as filters: {parts}.)"


@dataclass(frozen=True)
class ValueRuleSet(RuleSet):
    """The ``values`` guardrail: repairs filters from the values the question names."""

    index: ValueIndex | None = field(default=None, compare=False, repr=False)

    def scope(self, raw: dict[str, Any], gold: dict[str, Any]) -> list[str]:
        """drop: the answer has a filter the gold lacks; op: a gold (field, value) with the other
        operator; add: a gold filter whose (field, value) the answer lacks."""
        rk = {(f["field"], f["value"]): f["op"] for f in raw["filters"]}
        gk = {(f["field"], f["value"]): f["op"] for f in gold["filters"]}
        out = []
        if any(k not in gk for k in rk):
            out.append("values:drop")
        if any(k in gk and gk[k] != op for k, op in rk.items()):
            out.append("values:op")
        if any(k not in rk for k in gk):
            out.append("values:add")
        return out

    def apply(self, intent: Intent, question: str) -> tuple[Intent, list[Intervention]]:
        assert self.index is not None
        idx = self.index
        links = idx.link(question)
        linked = {(lk.field, lk.value): lk.op for lk in links}
        found: list[Intervention] = []
        current = intent.model_dump(mode="json")

        def step(rule_id: str, filters: list[dict[str, Any]]) -> None:
            nonlocal intent, current
            got = propose(rule_id, current, {"filters": filters}, consistent=True)
            if got is not None:
                intent, current = got[0], got[1]
                found.append(got[2])

        # 1. a filter on a value field whose value the question never names
        kept = [f for f in current["filters"]
                if f["field"] not in idx.fields or (f["field"], f["value"]) in linked
                or idx.named(f["value"], question)]
        if len(kept) < len(current["filters"]):
            step("values:drop", kept)
        # 2. a named value with the wrong operator ("excluding X" answered as X only)
        fixed = [{**f, "op": linked.get((f["field"], f["value"]), f["op"])} for f in current["filters"]]
        if fixed != current["filters"]:
            step("values:op", fixed)
        # 3. a named value the answer lacks
        have = {(f["field"], f["value"]) for f in current["filters"]}
        missing = [lk.as_filter() for lk in links if (lk.field, lk.value) not in have]
        if missing:
            step("values:add", [*current["filters"], *missing][:MAX_FILTERS])
        return intent, found


RULES = (Rule("values:drop", "filters", (), None, "drop a filter on a value field whose value the question "
               "never names"),
         Rule("values:op", "filters", (), None, "set eq/neq of a named value from the question's wording"),
         Rule("values:add", "filters", (), None, "add a named value the answer lacks"))


def value_ruleset(wh: Warehouse) -> ValueRuleSet:
    return ValueRuleSet("values", RULES, {}, "filters from the warehouse values the question names",
                        index=ValueIndex(wh))
