"""The intent contract: typed model, JSON Schema, parse → validate → canonicalise.

The model answers with a small JSON object; everything downstream depends on it being
*exactly* this shape.  All seven keys are required so a constrained decoder always emits
the same shape, and every number is bounded so a weak model cannot emit digits until
``max_tokens``.  Cross-field rules are checked here, in code, because grammar backends do
not reliably support ``if``/``then``/``oneOf``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import IntentError

IntentKind = Literal["breakdown", "top_n_by_metric", "time_series"]
Metric = Literal["revenue", "orders", "units", "avg_order_value", "customers"]
Dimension = Literal["region", "category", "product", "channel", "segment"]
TimeGrain = Literal["month", "quarter", "year"]
FilterField = Literal["region", "category", "product", "channel", "segment", "year"]
Op = Literal["eq", "neq"]
Order = Literal["desc", "asc"]

INTENTS: tuple[str, ...] = ("breakdown", "top_n_by_metric", "time_series")
FIELDS: tuple[str, ...] = ("intent", "metric", "dimension", "time_grain", "filters", "limit", "order")

#: Default row count for a top-N question that names no N ("top regions by revenue").
DEFAULT_TOP_N = 5

# Statuses of one raw output, in pipeline order.  Only "ok" can be correct.
STATUS_OK = "ok"
STATUS_INVALID_JSON = "invalid_json"
STATUS_SCHEMA_INVALID = "schema_invalid"
STATUS_INCONSISTENT = "inconsistent"


class Filter(BaseModel):
    """One equality / inequality filter; the value is always a string and always bound."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    field: FilterField
    op: Op
    value: str = Field(max_length=64)


class Intent(BaseModel):
    """What the question asks for; never SQL text."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    intent: IntentKind
    metric: Metric
    dimension: Dimension | None
    time_grain: TimeGrain | None
    filters: list[Filter] = Field(max_length=3)
    limit: int | None = Field(ge=1, le=100)
    order: Order | None

    def key(self) -> str:
        """Stable text of the intent: equal keys ⇔ equal intents."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline_refs(defs[node["$ref"].split("/")[-1]], defs)
        return {k: _inline_refs(v, defs) for k, v in node.items()
                if k not in ("title", "$defs", "default")}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


@lru_cache(maxsize=1)
def intent_schema() -> dict[str, Any]:
    """JSON Schema sent to the server, generated from :class:`Intent`.

    ``$ref``/``title``/``default`` are inlined or dropped so that every grammar backend
    (xgrammar, guidance, outlines) accepts it; no ``if``/``then``/``oneOf`` is used.
    """
    raw = Intent.model_json_schema()
    schema = _inline_refs(raw, raw.get("$defs", {}))
    schema["additionalProperties"] = False
    out: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                           "title": "nlq2sql intent"}
    out.update(schema)
    return out


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(intent_schema())
    return cls(intent_schema())  # type: ignore[no-any-return]


def consistency_problem(intent: Intent) -> str | None:
    """Cross-field rules the schema cannot express; None when consistent."""
    if intent.intent == "time_series" and intent.time_grain is None:
        return "time_series needs a time_grain"
    if intent.intent != "time_series" and intent.time_grain is not None:
        return f"time_grain must be null for {intent.intent}"
    if intent.intent in ("breakdown", "top_n_by_metric") and intent.dimension is None:
        return f"{intent.intent} needs a dimension"
    return None


#: Distinct raw texts whose parse outcome is remembered (bounded: memory does not grow
#: with the number of items scored).
PARSE_CACHE_SIZE = 4096


def _parse(text: Any) -> Intent | tuple[str, str]:
    """Parse outcome of one raw text: the Intent, or (status, reason)."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        return STATUS_INVALID_JSON, f"not JSON: {exc}"
    # Fast path: input already exactly typed (what a constrained decoder emits).  Strict
    # validation accepts only what the JSON Schema accepts, so the outcome is the same as
    # below, without the cost of the generic JSON Schema validator.
    try:
        return Intent.model_validate(obj, strict=True)
    except ValidationError:
        pass
    errors = sorted(_validator().iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.path) or "(root)"
        return STATUS_SCHEMA_INVALID, f"{where}: {err.message}"
    return Intent.model_validate(obj)


_parse_cached = lru_cache(maxsize=PARSE_CACHE_SIZE)(_parse)


def parse_intent(text: str) -> Intent:
    """Raw model text → schema-valid Intent, or IntentError with a status.

    Only a complete JSON object is accepted: no markdown fences, no prose repair, so the
    schema-validity figure measures the model and the decoder, not our leniency.
    Cross-field consistency is checked separately (:func:`consistency_problem`) because
    guardrails may repair it, and "schema-valid but inconsistent" is its own status.
    Outcomes are cached by text (Intents are immutable; each failure raises a new error).
    """
    result = _parse_cached(text) if isinstance(text, str) else _parse(text)
    if isinstance(result, tuple):
        raise IntentError(*result)
    return result


def _canonical_filters(filters: list[Filter]) -> bool:
    """Stripped values, strictly sorted by (field, op, value) (so no duplicates)."""
    if not filters:
        return True
    keys = [(f.field, f.op, f.value) for f in filters]
    return (all(v == v.strip() for _, _, v in keys)
            and all(a < b for a, b in zip(keys, keys[1:], strict=False)))


def canonicalise(intent: Intent) -> Intent:
    """Apply the documented defaults once, so equal meanings compare equal.

    - top_n_by_metric: ``limit`` null → DEFAULT_TOP_N; ``order`` null → ``desc``.
    - breakdown: kept as given (null limit = all rows, null order = unordered).
    - time_series: always ascending by period, so ``order`` → null.
    - filters: de-duplicated and sorted by (field, op, value); values stripped.
    """
    limit, order = intent.limit, intent.order
    if intent.intent == "top_n_by_metric":
        limit = limit if limit is not None else DEFAULT_TOP_N
        order = order or "desc"
    elif intent.intent == "time_series":
        order = None
    if limit == intent.limit and order == intent.order and _canonical_filters(intent.filters):
        return intent  # already canonical; Intents are immutable, so it can be shared
    filters = sorted({Filter(field=f.field, op=f.op, value=f.value.strip()) for f in intent.filters},
                     key=lambda f: (f.field, f.op, f.value))
    return intent.model_copy(update={"filters": filters, "limit": limit, "order": order})


def is_ordered(intent: Intent) -> bool:
    """Whether row order is part of the answer (Spider test-suite style comparison)."""
    return intent.intent in ("top_n_by_metric", "time_series") or intent.order is not None


def compact_json(intent: Intent) -> str:
    """Whitespace-free serialisation in schema key order."""
    return json.dumps(intent.model_dump(mode="json"), separators=(",", ":"))


def _alt(values: tuple[str, ...] | list[str], nullable: bool = False) -> str:
    alts = [f'"{v}"' for v in values] + (["null"] if nullable else [])
    return "(" + "|".join(alts) + ")"


def compact_regex() -> str:
    """A regex accepting exactly the whitespace-free intents, keys in schema order.

    Sent as ``structured_outputs.regex`` it makes whitespace impossible *in generation*
    (per-request whitespace switches are ignored by vLLM), whatever the server's settings.
    Built from the same Literal types as the schema, so the two cannot drift apart.
    """
    from typing import get_args

    value = r'"[^"\\\x00-\x1f]{0,64}"'
    flt = ('\\{"field":' + _alt(get_args(FilterField)) + ',"op":' + _alt(get_args(Op))
           + ',"value":' + value + '\\}')
    limit = "([1-9]|[1-9][0-9]|100|null)"
    return ('\\{"intent":' + _alt(get_args(IntentKind)) + ',"metric":' + _alt(get_args(Metric))
            + ',"dimension":' + _alt(get_args(Dimension), True)
            + ',"time_grain":' + _alt(get_args(TimeGrain), True)
            + ',"filters":\\[(' + flt + '(,' + flt + '){0,2})?\\]'
            + ',"limit":' + limit + ',"order":' + _alt(get_args(Order), True) + '\\}')
