"""The model's own confidence in the intent kind, read from vLLM's token logprobs.

``--abstain-below P`` asks for each token's logprob and top alternatives (streamed). The kind is
decided at one token: the first whose text, with what precedes it, fits exactly one kind (``top`` →
``top_n_by_metric``; ``t`` alone does not). There the alternatives are grouped by the kind each would
start, and the **confidence** is the chosen kind's share of that mass (abstention reads the share of
the kind finally answered: :meth:`Evidence.share`). Alternatives fitting no
kind or several are left out; tokens the JSON-Schema constraint masks come back at about -9999, so
the mass left is what the grammar allowed. Only the decisive token is read, and says nothing of the
other fields. The planner's first stage (a structured ``choice``) is read from offset 0."""

from __future__ import annotations

import math
import re
from collections import defaultdict

from nlq2sql.records.typed import Typed
from nlq2sql.stages.intent import INTENTS

__all__ = ["TOP_LOGPROBS", "Evidence", "intent_evidence", "query_evidence"]

#: Alternatives asked per token: enough for all three kinds plus grammar-masked fillers.
TOP_LOGPROBS = 8
_KEY = re.compile(r'"intent"\s*:\s*"')
_OPEN = re.compile(r'\s*\{\s*"')
_METRICS = re.compile(r'"metrics"\s*:\s*\[\s*"')
_NO_METRIC = re.compile(r'"metrics"\s*:\s*\[\s*\]')
_ANSWER_KEYS = ("metrics", "unanswerable")

Tokens = list[tuple[str, float, list[tuple[str, float]]]]


class Evidence(Typed):
    """The record's ``intent_evidence``: the decisive token, the name it
    fits (``kind``), its probability, the offered mass per name and the chosen name's share.  The
    v2 answer's adds ``over`` (``answer`` or ``metric``: which token decided) and, over a metric,
    ``answer_share`` (the share at the first token); v1's has neither (absent, not null)."""

    over: str | None = None
    kind: str
    token: str
    token_index: int
    p_token: float
    kinds: dict[str, float]
    confidence: float
    answer_share: float | None = None

    def share(self, kind: str | None) -> float:
        """The share of the model's offered mass on ``kind`` -- the kind actually answered, which a
        guardrail may have changed (the model's own share of its raw kind when None).  A v2 answer's
        evidence is over answering and its metric, not a kind: its confidence."""
        if kind is None or kind == self.kind or ("over" in self.model_fields_set and self.over != "intent"):
            return self.confidence
        total = sum(self.kinds.values())
        return self.kinds.get(kind, 0.0) / total if total > 0 else 0.0


def _value_start(joined: str) -> int | None:
    bare = joined.strip()
    if bare in INTENTS:  # the planner's choice: the text is the kind itself
        return joined.index(bare)
    m = _KEY.search(joined)
    return m.end() if m else None


def _kinds(value: str, names: tuple[str, ...] = INTENTS) -> set[str]:
    """The names a value prefix (possibly running past the closing quote) is consistent with."""
    out = set()
    for k in names:
        if k.startswith(value) or (value.startswith(k) and value[len(k):len(k) + 1] in ('"', "")):
            out.add(k)
    return out


def intent_evidence(tokens: Tokens | None) -> Evidence | None:
    """The decisive token of the intent kind and the kind's share of the offered mass.

    None when no logprobs came back, no ``"intent"`` value was generated, or the generated
    value fits no kind (the answer is invalid anyway: nothing to be confident about)."""
    if not tokens:
        return None
    joined = "".join(t for t, _, _ in tokens)
    start = _value_start(joined)
    if start is None:
        return None
    return _decide(tokens, joined, start, INTENTS)


def _decide(tokens: Tokens, joined: str, start: int, names: tuple[str, ...]) -> Evidence | None:
    """At the first token after ``start`` whose text fits exactly one of ``names``: that name, and
    its share of the mass the offered alternatives put on each name."""
    pos = 0
    for i, (tok, lp, alts) in enumerate(tokens):
        end = pos + len(tok)
        if end > start:
            before = joined[start:pos] if pos >= start else ""  # value generated before this token
            lead = joined[pos:start] if pos < start else ""  # this token's text before the value

            def fits(t: str, before: str = before, lead: str = lead) -> set[str]:
                return _kinds(before + t[len(lead):], names) if t.startswith(lead) else set()

            chosen = fits(tok)
            if not chosen:
                return None
            if len(chosen) == 1:
                kind = next(iter(chosen))
                offered = dict(alts)
                offered.setdefault(tok, lp)
                mass: dict[str, float] = defaultdict(float)
                for t, alt_lp in offered.items():
                    ks = fits(t)
                    if len(ks) == 1 and alt_lp > -1000:  # masked tokens come back near -9999
                        mass[next(iter(ks))] += math.exp(alt_lp)
                total = sum(mass.values())
                return Evidence(kind=kind, token=tok, token_index=i, p_token=round(math.exp(lp), 4),
                                kinds={k: round(v, 4) for k, v in sorted(mass.items())},
                                confidence=round(mass[kind] / total, 4) if total > 0 else 1.0)
        pos = end
    return None


def query_evidence(tokens: Tokens | None, metrics: tuple[str, ...]) -> Evidence | None:
    """The v2 answer's confidence, from two decisive tokens: answering or abstaining (the first
    key, ``metrics`` or ``unanswerable``), then -- for a query -- its first metric.  An abstention's
    confidence is its share at the first; a query's, the product of both shares (``over`` says which:
    ``answer`` or ``metric``; ``answer_share`` keeps the first).  A listing (``"metrics": []``) has
    no metric token: its confidence is the first share, as an abstention's."""
    if not tokens:
        return None
    joined = "".join(t for t, _, _ in tokens)
    m = _OPEN.match(joined)
    first = _decide(tokens, joined, m.end(), _ANSWER_KEYS) if m else None
    if first is None:
        return None
    if first.kind != "metrics" or _NO_METRIC.search(joined):
        return first.model_copy(update={"over": "answer"})
    m = _METRICS.search(joined)
    second = _decide(tokens, joined, m.end(), metrics) if m else None
    if second is None:
        return None
    return second.model_copy(update={"over": "metric", "answer_share": first.confidence,
                                     "confidence": round(first.confidence * second.confidence, 4)})
