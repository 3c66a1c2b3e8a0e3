"""Two-stage planner: first a constrained choice of the intent kind, then the rest of the
intent under that kind's branch schema.

The first request is vLLM's ``structured_outputs.choice`` over the three kinds (a handful of
tokens); the second carries only the chosen kind's branch, so the kind cannot change and no
inconsistent intent can be generated.  Both requests go through the one request path
(:func:`nlq2sql.transport.client.complete`, the run's retry budget); the record keeps the first
stage's choice, outcome, latency and tokens beside the second's, so the planner's cost in
requests, tokens and latency is reported next to what it gains.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field

from nlq2sql.conditions.confidence import intent_evidence
from nlq2sql.conditions.registry import Condition, Request, Settings, register
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.stages.intent import INTENTS, branch_schema
from nlq2sql.transport.client import EndpointConfig, RetryBudget, Sampling, complete
from nlq2sql.transport.stream import Completion

__all__ = ["CHOICE_MAX_TOKENS", "PLANNERS", "Planner", "PlannerSettings", "plan_and_answer", "stage_one",
           "stage_two"]

PLANNERS = ("none", "two-stage")
#: Tokens the first stage may use: the longest kind is a few tokens in any tokenizer.
CHOICE_MAX_TOKENS = 12


def stage_one(base: Sampling) -> Sampling:
    return replace(base, structured="choice", choices=INTENTS, max_tokens=CHOICE_MAX_TOKENS, regex=None,
                   schema_json=None)


def stage_two(base: Sampling, catalog: Catalog, kind: str) -> Sampling:
    return replace(base, structured="json", regex=None,
                   schema_json=json.dumps(branch_schema(kind, catalog), separators=(",", ":")))


async def plan_and_answer(client: Any, ecfg: EndpointConfig, messages: list[dict[str, str]], base: Sampling,
                          catalog: Catalog, budget: RetryBudget,
                          fail_fast: frozenset[str] = frozenset()) -> tuple[Completion, dict[str, Any]]:
    """Both stages for one item: (the answer's completion, the planner's record fields)."""
    first = await complete(client, ecfg, messages, stage_one(base), budget, fail_fast)
    choice = (first.text or "").strip()
    fields: dict[str, Any] = {
        "planner": "two-stage", "planner_choice": choice if choice in INTENTS else None,
        "planner_outcome": first.outcome, "planner_latency_s": first.latency_s,
        "planner_prompt_tokens": first.prompt_tokens, "planner_completion_tokens": first.completion_tokens,
        "requests": 1,
    }
    if first.token_logprobs is not None:  # --abstain-below: the kind was decided here
        fields["intent_evidence"] = intent_evidence(first.token_logprobs)
    if first.outcome != "ok":
        return first, fields  # the item failed in stage one: recorded as that failure
    if choice not in INTENTS:  # cannot happen under the choice constraint; never guess
        first.outcome, first.error = "malformed_response", f"planner chose {choice!r}, not an intent kind"
        return first, fields
    second = await complete(client, ecfg, messages, stage_two(base, catalog, choice), budget,
                            fail_fast)
    fields["requests"] = 2
    if second.latency_s is not None and first.latency_s is not None:
        fields["latency_total_s"] = first.latency_s + second.latency_s
    return second, fields


class PlannerSettings(Settings):
    planner: Literal["none", "two-stage"] = Field(
        "none", description="none | two-stage (first a constrained choice of the intent kind, then the rest under "
        "that kind's branch schema: two requests per item).", json_schema_extra={"noun": "planner"})


@register
class Planner(Condition[PlannerSettings]):
    """``--planner two-stage``: replaces the item's request with the two stages above."""

    name = "planner"
    settings_model = PlannerSettings
    manifest_keys = ("planner",)
    manifest_types = {"planner": str}
    label_rank = 30.0
    replaces_request = True
    constraint_modes = ("choice",)  # the first stage: structured_outputs.choice
    catalog: Catalog | None = None

    def load(self, wh: Any, answer: str) -> None:
        self.catalog = wh.catalog

    def manifest(self) -> dict[str, Any]:
        return {"planner": self.settings.planner if self.on else None}

    @classmethod
    def label(cls, manifest: Mapping[str, Any]) -> str | None:
        return f"planner {manifest['planner']}" if manifest.get("planner") else None

    async def answer(self, req: Request) -> tuple[Completion, dict[str, Any]]:
        assert self.catalog is not None
        return await plan_and_answer(req.client, req.endpoint, req.messages, req.sampling, self.catalog, req.budget,
                                     req.fail_fast)
