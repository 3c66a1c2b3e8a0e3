"""Self-consistency (``--samples N``) and abstention (``--abstain``): answer only when the
model's own evidence agrees.

**Self-consistency**: N answers at temperature > 0 (unseeded), canonicalised; the intent with most
votes is the answer; every sample's text, the votes and summed tokens are recorded, so cost sits
beside gain. A tie at the top, or no valid sample, has no majority.
**Abstention**: "needs clarification" when the evidence is split: no majority, the planner's kind
overruled by a guardrail, or (``--abstain-below P``) the intent kind's probability below P
(:mod:`.confidence`). An abstention is never correct (``correct_final`` false, ``answer_correct``
kept); the summary's ``selective`` gives coverage, accuracy on answered items and the curve. The
decision reads only recorded fields, so re-scoring decides it again the same way."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from pydantic import Field

from nlq2sql.answers.kinds import answer_kind
from nlq2sql.conditions.registry import Condition, Request, Settings, register
from nlq2sql.conditions.trace import Trace
from nlq2sql.errors import InputError, IntentError
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.manifest_parts import Part
from nlq2sql.records.typed import Typed
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.contract import parse_answer
from nlq2sql.stages.intent import canonicalise, parse_intent
from nlq2sql.stages.query_guard import canonical_key
from nlq2sql.transport.client import Client, EndpointConfig, RetryBudget, Sampling, complete
from nlq2sql.transport.stream import Completion

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.semantic.binding import Warehouse

__all__ = ["MAX_SAMPLES", "SelfCheck", "SelfCheckSettings", "SelfCheckTrace", "Vote", "sample_and_vote", "vote"]

MAX_SAMPLES = 16


class Vote(Typed):
    """The record's ``votes``: samples, valid ones, the first winning
    sample's index among those voted (None: no valid sample), its votes, a tie at the top, its
    share, distinct answers (absent when no sample was valid)."""

    n: int
    valid: int
    winner: int | None
    votes: int
    tie: bool
    share: float
    distinct: int | None = None


class SelfCheckTrace(Trace):
    """Per item: N, the requests sent (N), each sample's text (None: failed), their completion
    tokens, how many failed, and the vote."""

    samples: int
    requests: int
    sample_texts: list[str | None]
    samples_completion_tokens: int
    samples_failed: int
    votes: Vote

    evidence_keys = ("votes",)
    timing_keys = ("requests", "samples_completion_tokens")

    @classmethod
    def reason_to_abstain(cls, rec: ItemRecord) -> str | None:
        votes: Vote | None = cls.read(rec, "votes")
        return "no majority among samples" if votes is not None and (votes.winner is None or votes.tie) else None

    @classmethod
    def confidence(cls, rec: ItemRecord) -> float | None:
        """The winner's vote share."""
        votes: Vote | None = cls.read(rec, "votes")
        return round(votes.share, 4) if votes is not None else None


def _key(text: str, catalog: Catalog, answer: str) -> str:
    """The canonical form a sample votes with: a v1 intent's, or a v2 query's (every abstention
    one vote: :func:`~nlq2sql.stages.query_guard.canonical_key`)."""
    if answer_kind(answer).form == "query":
        return canonical_key(parse_answer(text, catalog))
    return json.dumps(canonicalise(parse_intent(text, catalog)).model_dump(mode="json"), sort_keys=True)


def vote(texts: list[str | None], catalog: Catalog, answer: str = "intent") -> Vote:
    """Majority over canonical intents (or v2 queries): the winner's sample index, its votes,
    valid samples, tie."""
    keys: list[str | None] = []
    for text in texts:
        try:
            keys.append(_key(text or "", catalog, answer))
        except IntentError:
            keys.append(None)
    counts = Counter(k for k in keys if k is not None)
    ranked = counts.most_common()
    if not ranked:
        return Vote(n=len(texts), valid=0, winner=None, votes=0, tie=False, share=0.0)
    top = ranked[0][1]
    tie = len(ranked) > 1 and ranked[1][1] == top
    winner = keys.index(ranked[0][0])  # the first sample with the winning intent
    return Vote(n=len(texts), valid=sum(counts.values()), winner=winner, votes=top, tie=tie,
                share=top / len(texts), distinct=len(ranked))


async def sample_and_vote(client: Client, ecfg: EndpointConfig, messages: list[dict[str, str]], base: Sampling,
                          catalog: Catalog, budget: RetryBudget, n: int,
                          fail_fast: frozenset[str] = frozenset(), answer: str = "intent"
                          ) -> tuple[Completion, SelfCheckTrace]:
    """N samples for one item, concurrently: (the winning completion, the record's vote fields)."""
    # Unseeded: vLLM 0.32's CPU engine dies on seeded sampling at temperature > 0 once such
    # requests share a batch ("RuntimeError: CPU Generator does not use offset" in the worker's
    # _bookkeeping_sync; the server exits).  The samples are therefore not reproducible.
    unseeded = replace(base, seed=None)
    comps = await asyncio.gather(*(complete(client, ecfg, messages, unseeded, budget, fail_fast)
                                   for _ in range(n)))
    ok = [c for c in comps if c.outcome == "ok"]

    def fields(v: Vote) -> SelfCheckTrace:
        return SelfCheckTrace(samples=n, requests=n,
                              sample_texts=[c.text if c.outcome == "ok" else None for c in comps],
                              samples_completion_tokens=sum(c.completion_tokens or 0 for c in comps),
                              samples_failed=n - len(ok), votes=v)

    if not ok:
        return comps[0], fields(vote([], catalog, answer))
    v = vote([c.text for c in comps if c.outcome == "ok"], catalog, answer)
    v.n = n  # failed samples count in the denominator of the share: they did not agree
    v.share = v.votes / n
    chosen = ok[v.winner] if v.winner is not None else ok[0]
    return chosen, fields(v)


class SelfCheckSettings(Settings):
    samples: int = Field(1, ge=1, le=MAX_SAMPLES, description="Self-consistency: answers per item (needs "
                         "--temperature > 0); the canonical intent with most votes is the answer.")


@register
class SelfCheck(Condition[SelfCheckSettings]):
    """``--samples N``: replaces the item's request with N samples and a vote (record: ``votes``,
    ``sample_texts``, the samples' tokens)."""

    name = "selfcheck"
    settings_model = SelfCheckSettings
    answers = frozenset({"intent", "query"})  # on v2 the vote is over canonical queries, abstentions included
    conflicts = ("planner",)
    manifest_keys = ("samples",)
    manifest_types = {"samples": int}
    label_rank = 40.0
    replaces_request = True
    catalog: Catalog | None = None
    answer_kind = "intent"
    trace = SelfCheckTrace

    def check(self, sampling: Sampling) -> None:
        if not sampling.temperature > 0:
            raise InputError("self-consistency needs different answers: give --temperature > 0", field="--samples")

    def load(self, wh: Warehouse, answer: str) -> None:
        self.catalog = wh.catalog
        self.answer_kind = answer

    def manifest(self) -> Part:
        return self.manifest_part().model_validate({"samples": self.settings.samples if self.on else None})

    @classmethod
    def label(cls, manifest: Mapping[str, JsonValue]) -> str | None:
        n = manifest.get("samples") or 1
        return f"{n} samples" if n > 1 else None

    async def answer(self, req: Request) -> tuple[Completion, SelfCheckTrace]:
        assert self.catalog is not None
        return await sample_and_vote(req.client, req.endpoint, req.messages, req.sampling, self.catalog, req.budget,
                                     self.settings.samples, req.fail_fast, self.answer_kind)
