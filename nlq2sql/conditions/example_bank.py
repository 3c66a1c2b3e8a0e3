"""The bank of solved questions that retrieved few-shot draws from, and its retrieval.

Similarity is TF-IDF over character n-grams (word boundaries kept) with cosine scores, so
"sales by region" finds "revenue by region" and "top 3 regions" alike; ties keep the bank's
order, so the choice is deterministic.  The bank is never the set under test: an overlap
by id or by normalised question text is refused before any request is sent.  The bank's
sha256 goes in the manifest and the chosen ids in every record.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nlq2sql.answers.kinds import answer_kind
from nlq2sql.conditions.synth import EMPTY_TAG, SYNTHETIC, SYNTHETIC_TAG, cached_bank
from nlq2sql.errors import EvalSetError, InputError
from nlq2sql.paths import cache_dir
from nlq2sql.records.manifest_parts import Part
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import Catalog, display_path
from nlq2sql.stages.evalset import load_evalset, resolve_path
from nlq2sql.stages.intent import compact_json
from nlq2sql.stages.queryset import load_query_set

if TYPE_CHECKING:
    from collections.abc import Iterable

    from nlq2sql.stages.evalset import EvalCase, EvalSet
    from nlq2sql.stages.queryset import QueryCase, QuerySet
    from nlq2sql.stages.sets import AnySet

__all__ = ["DEFAULT_BANK", "ExampleBank", "ExamplesManifest", "load_bank", "normalise", "synthetic_origin"]

DEFAULT_BANK = "dev"
_SPACE = re.compile(r"\s+")


def normalise(question: str) -> str:
    """Case- and whitespace-insensitive text, for the overlap check."""
    return _SPACE.sub(" ", question.lower()).strip(" ?.!")


def _v1_answer(case: EvalCase) -> str:
    return compact_json(case.gold)


def _query_answer(case: QueryCase) -> str:
    """A v2 bank item's answer as the model should write it: the query in the schema's key order,
    whitespace-free — with spaced examples under a compact grammar, Qwen2.5-Coder-0.5B left
    ``where`` empty on 40 of 60 items it filled when unconstrained (measured)."""
    compact = {"separators": (",", ":")}  # as the whitespace-free grammar will make the model write it
    if case.gold is None:
        return json.dumps({"unanswerable": "not in this semantic layer"}, **compact)  # type: ignore[arg-type]
    g = case.gold
    return json.dumps({"metrics": list(g.metrics), "group_by": list(g.group_by),
                       "where": [w.model_dump(mode="json") for w in g.where or ()],
                       "order_by": [o.model_dump(mode="json") for o in g.order_by or ()], "limit": g.limit},
                      **compact)  # type: ignore[arg-type]


@dataclass
class ExampleBank:
    """Solved questions to retrieve from, with a fitted TF-IDF index; ``answer`` writes an item's
    solution as the assistant turn (a v1 intent, or for ``--answer query`` the MetricFlow query)."""

    evalset: EvalSet | QuerySet
    answer: Callable[[Any], str] = _v1_answer
    _vectorizer: Any = field(default=None, repr=False)
    _matrix: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        self._vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), lowercase=True,
                                           sublinear_tf=True)
        self._matrix = self._vectorizer.fit_transform([c.question for c in self.evalset.cases])

    @property
    def cases(self) -> tuple[EvalCase | QueryCase, ...]:
        return self.evalset.cases

    @property
    def empty_ids(self) -> frozenset[str]:
        """Items whose gold returns no rows on the data (:data:`.synth.EMPTY_TAG`): a tiny layer's fallback."""
        return frozenset(c.id for c in self.cases if EMPTY_TAG in (getattr(c, "tags", None) or ()))

    def manifest(self, k: int) -> ExamplesManifest:
        from pathlib import Path

        shown = display_path(Path(self.evalset.path))
        if shown.startswith("/"):  # a generated bank in a cache outside the project: no machine path recorded
            with contextlib.suppress(ValueError):
                shown = "cache:" + str(Path(self.evalset.path).resolve().relative_to(cache_dir().resolve()))
        synthetic, seed = synthetic_origin(self.cases)
        part = ExamplesManifest(k=k, bank=self.evalset.name, bank_path=shown, bank_sha256=self.evalset.sha256,
                                bank_size=len(self.cases), similarity="tfidf char_wb 2-4 cosine", synthetic=synthetic)
        if synthetic:
            part.seed = seed
        if self.empty_ids:
            part.empty_results = len(self.empty_ids)
        return part

    def check_disjoint(self, tested: AnySet) -> None:
        """Refuse a bank that shares an id or a question with the set under test."""
        ids = {c.id for c in self.cases}
        texts = {normalise(c.question): c.id for c in self.cases}
        for case in tested.cases:
            if case.id in ids:
                raise InputError(f"example bank {self.evalset.name!r} contains id {case.id!r} of the eval set "
                                 f"under test: the bank must be a different set", path=self.evalset.path,
                                 field="--example-bank")
            other = texts.get(normalise(case.question))
            if other is not None:
                raise InputError(f"example bank item {other!r} asks the same question as {case.id!r} "
                                 f"({case.question!r}) of the eval set under test", path=self.evalset.path,
                                 field="--example-bank")

    def nearest(self, question: str, k: int) -> list[EvalCase | QueryCase]:
        """The ``k`` most similar bank items, most similar first (ties: bank order)."""
        if k <= 0:
            return []
        scores = (self._matrix @ self._vectorizer.transform([question]).T).toarray().ravel()
        order = np.argsort(-scores, kind="stable")[:k]
        return [self.cases[i] for i in order]

    def messages(self, base: list[dict[str, str]], question: str, k: int
                 ) -> tuple[list[dict[str, str]], list[str]]:
        """``base`` (system + user) with the examples inserted as turns before the question."""
        chosen = self.nearest(question, k)
        turns: list[dict[str, str]] = []
        for ex in chosen:
            turns += [{"role": "user", "content": ex.question},
                      {"role": "assistant", "content": self.answer(ex)}]
        return [*base[:-1], *turns, base[-1]], [ex.id for ex in chosen]


def _has_set(name: str, warehouse: str) -> bool:
    try:
        resolve_path(name, warehouse)
    except EvalSetError:
        return False
    return True


def synthetic_origin(cases: Iterable[EvalCase | QueryCase]) -> tuple[bool, int | None]:
    """Whether every bank line says :mod:`.synth` made it, and its seed (None: not one seed)."""
    tags = [set(c.tags) for c in cases]
    if not tags or not all(SYNTHETIC_TAG in t for t in tags):
        return False, None
    seeds = {x.removeprefix("seed:") for t in tags for x in t if x.startswith("seed:")}
    return True, int(next(iter(seeds))) if len(seeds) == 1 and next(iter(seeds)).lstrip("-").isdigit() else None


class ExamplesManifest(Part):
    """The manifest's ``examples``: how many, from which bank (hash, size), by which similarity."""

    k: int
    bank: str
    bank_path: str
    bank_sha256: str
    bank_size: int
    similarity: str
    synthetic: bool | None = None  # since generated banks (older runs: absent)
    seed: int | None = None  # a generated bank's (written only then)
    solutions: dict[str, str | int] | None = None  # a SQL bank's: kind "sql" and the count of each style
    empty_results: int | None = None  # bank items whose gold returns no rows on this data (written only then)


def load_bank(name_or_path: str | None, source: Catalog | Warehouse, k: int, answer: str = "intent") -> ExampleBank:
    """A bank by name (a set of the warehouse, default ``dev``; ``synthetic``: generated from the
    layer, :mod:`.synth`) or JSONL path; with ``answer="query"`` its solutions are MetricFlow
    queries (v1 lines restated).  A warehouse with no dev set gets the synthetic bank."""
    if k < 0:
        raise InputError(f"must be at least 0, got {k}", field="--examples")
    catalog = source.catalog if isinstance(source, Warehouse) else source
    name = name_or_path or DEFAULT_BANK
    if name == SYNTHETIC or (name_or_path is None and not _has_set(DEFAULT_BANK, catalog.name)):
        why = "" if name == SYNTHETIC else f" (warehouse {catalog.name!r} has no {DEFAULT_BANK} set)"
        if answer_kind(answer).form != "query":
            raise InputError(f"the synthetic bank{why} holds MetricFlow queries: use it with --answer query, "
                             "or name a bank of v1 intents", field="--example-bank")
        if not isinstance(source, Warehouse):
            raise InputError(f"the synthetic bank{why} is generated from the warehouse's data, which this "
                             "caller did not give", field="--example-bank")
        name = str(cached_bank(source))
    if answer_kind(answer).form == "query":
        bank = ExampleBank(load_query_set(name, catalog), _query_answer)
    else:
        bank = ExampleBank(load_evalset(name, catalog))
    if k > len(bank.cases):
        raise InputError(f"asks for {k} examples but the bank {bank.evalset.name!r} holds {len(bank.cases)}",
                         field="--examples")
    return bank
