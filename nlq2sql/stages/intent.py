"""The intent contract: typed model, JSON Schema, parse → validate → canonicalise.

All seven keys are required, so a constrained decoder always emits one shape, and every number is
bounded, so a weak model cannot emit digits until ``max_tokens``. Cross-field rules are checked in
code, as grammar backends do not reliably support ``if``/``then``/``oneOf``."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Annotated, Any, Literal, get_args

import jsonschema
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from nlq2sql.errors import InputError, IntentError
from nlq2sql.inputs import not_a_boolean
from nlq2sql.semantic.catalog import Catalog, Vocabulary

__all__ = ["DEFAULT_TOP_N", "FIELDS", "INTENTS", "OPS", "ORDERS", "PARSE_CACHE_SIZE", "SCHEMA_MODES",
           "STATUS_INCONSISTENT", "STATUS_INVALID_JSON", "STATUS_OK", "STATUS_SCHEMA_INVALID", "TIME_GRAINS",
           "Filter", "Intent", "IntentKind", "Name", "Op", "Order", "TimeGrain", "branch_schema", "canonicalise",
           "compact_json", "compact_regex", "consistency_problem", "excluded_problem", "intent_schema", "is_ordered",
           "parse_intent", "vocabulary_problem"]

IntentKind = Literal["breakdown", "top_n_by_metric", "time_series"]
TimeGrain = Literal["month", "quarter", "year"]
Op = Literal["eq", "neq"]
#: Metric, dimension and filter-field names come from the warehouse's semantic model
#: (:mod:`nlq2sql.semantic`): the typed model bounds them, the vocabulary check names them.
Name = Annotated[str, Field(min_length=1, max_length=64)]
Order = Literal["desc", "asc"]

INTENTS: tuple[str, ...] = get_args(IntentKind)
TIME_GRAINS: tuple[str, ...] = get_args(TimeGrain)
OPS: tuple[str, ...] = get_args(Op)
ORDERS: tuple[str, ...] = get_args(Order)
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
    field: Name
    op: Op
    value: str = Field(max_length=64)


class Intent(BaseModel):
    """What the question asks for; never SQL text."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    intent: IntentKind
    metric: Name
    dimension: Name | None
    time_grain: TimeGrain | None
    filters: list[Filter] = Field(max_length=3)
    limit: Annotated[int, Field(ge=1, le=100), BeforeValidator(not_a_boolean)] | None
    order: Order | None

    def key(self) -> str:
        """Stable text of the intent: equal keys ⇔ equal intents."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


SCHEMA_MODES = ("flat", "branches")
_NULL: dict[str, Any] = {"type": "null"}


def _enum(values: tuple[str, ...]) -> dict[str, Any]:
    return {"enum": list(values), "type": "string"}


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [node, _NULL]}


def _properties(vocab: Vocabulary) -> dict[str, Any]:
    """The flat schema's properties (the seed's shape): every key, every value allowed."""
    return {
        "intent": _enum(INTENTS),
        "metric": _enum(vocab.metrics),
        "dimension": _nullable(_enum(vocab.dimensions)),
        "time_grain": _nullable(_enum(TIME_GRAINS)),
        "filters": {"items": {
            "additionalProperties": False,
            "description": "One equality / inequality filter; the value is always a string and always bound.",
            "properties": {"field": _enum(vocab.filter_fields), "op": _enum(OPS),
                           "value": {"maxLength": 64, "type": "string"}},
            "required": ["field", "op", "value"], "type": "object"}, "maxItems": 3, "type": "array"},
        "limit": _nullable({"maximum": 100, "minimum": 1, "type": "integer"}),
        "order": _nullable(_enum(ORDERS)),
    }


def _object(props: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"additionalProperties": False}
    if description:
        out["description"] = description
    out.update({"properties": props, "required": list(FIELDS), "type": "object"})
    return out


def _branch(kind: str, vocab: Vocabulary) -> dict[str, Any]:
    """One intent kind's branch: what :func:`consistency_problem` checks, made ungrammatical."""
    props = _properties(vocab)
    props["intent"] = {"const": kind, "type": "string"}
    if kind == "time_series":
        props["time_grain"] = _enum(TIME_GRAINS)
    else:
        props["dimension"] = _enum(vocab.dimensions)
        props["time_grain"] = _NULL
    return _object(props)


@lru_cache(maxsize=32)
def _schema(vocab: Vocabulary, mode: str) -> dict[str, Any]:
    out: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "nlq2sql intent"}
    if mode == "flat":
        out.update(_object(_properties(vocab), "What the question asks for; never SQL text."))
    elif mode == "branches":
        out["description"] = "What the question asks for; never SQL text. One branch per intent kind."
        out["anyOf"] = [_branch(k, vocab) for k in INTENTS]
    else:
        raise InputError(f"unknown schema mode {mode!r} (known: {', '.join(SCHEMA_MODES)})", field="schema")
    return out


def intent_schema(catalog: Catalog, mode: str = "flat") -> dict[str, Any]:
    """JSON Schema sent to the server, generated from a warehouse's vocabulary.

    ``flat``: one object, all seven keys required, every value from the vocabulary;
    cross-field rules are checked in code.  ``branches``: one ``anyOf`` branch per intent
    kind with ``intent`` a ``const``, so an inconsistent intent cannot be generated.
    No ``$ref``/``if``/``then``/``oneOf``: every grammar backend accepts both.
    The result is shared (cached): treat it as read-only.
    """
    return _schema(catalog.vocabulary, mode)


def branch_schema(kind: str, catalog: Catalog) -> dict[str, Any]:
    """The schema of one intent kind alone (the planner's second stage: the kind is chosen)."""
    if kind not in INTENTS:
        raise InputError(f"unknown intent kind {kind!r} (known: {', '.join(INTENTS)})", field="intent")
    out: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                           "title": f"nlq2sql intent ({kind})"}
    out.update(_branch(kind, catalog.vocabulary))
    return out


@lru_cache(maxsize=32)
def _validator(vocab: Vocabulary) -> jsonschema.protocols.Validator:
    schema = _schema(vocab, "flat")
    return jsonschema.validators.validator_for(schema)(schema)  # type: ignore[no-any-return]


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


def _vocab_problem(intent: Intent, vocab: Vocabulary) -> bool:
    return (intent.metric not in vocab.metrics
            or (intent.dimension is not None and intent.dimension not in vocab.dimensions)
            or any(f.field not in vocab.filter_fields for f in intent.filters))


def _parse(text: Any, vocab: Vocabulary) -> Intent | tuple[str, str]:
    """Parse outcome of one raw text: the Intent, or (status, reason)."""
    try:
        obj = json.loads(text)
    except (ValueError, TypeError) as exc:  # JSONDecodeError, or an integer past Python's digit limit
        return STATUS_INVALID_JSON, f"not JSON: {exc}"
    except RecursionError:  # model output is untrusted: nested ~1,000 deep is malformed, not a crash
        return STATUS_INVALID_JSON, "not JSON: nested too deeply"
    # Fast path: input already exactly typed (what a constrained decoder emits) with names
    # from the vocabulary.  Strict validation plus the vocabulary accepts only what the
    # flat JSON Schema accepts, so the outcome is the same as below, without the cost of
    # the generic JSON Schema validator.
    try:
        intent = Intent.model_validate(obj, strict=True)
        if not _vocab_problem(intent, vocab):
            return intent
    except ValidationError:
        pass
    errors = sorted(_validator(vocab).iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.path) or "(root)"
        return STATUS_SCHEMA_INVALID, f"{where}: {err.message}"
    return Intent.model_validate(obj)


_parse_cached = lru_cache(maxsize=PARSE_CACHE_SIZE)(_parse)


def parse_intent(text: str, catalog: Catalog) -> Intent:
    """Raw model text → schema-valid Intent, or IntentError with a status.

    Only a complete JSON object is accepted: no markdown fences, no prose repair, so the
    schema-validity figure measures the model and the decoder, not our leniency.  Names
    must be in the given warehouse's vocabulary (there is no default warehouse).
    Cross-field consistency is checked separately (:func:`consistency_problem`) because
    guardrails may repair it, and "schema-valid but inconsistent" is its own status.
    Outcomes are cached by text (Intents are immutable; each failure raises a new error).
    """
    vocab = catalog.vocabulary
    result = _parse_cached(text, vocab) if isinstance(text, str) else _parse(text, vocab)
    if isinstance(result, tuple):
        raise IntentError(*result)
    return result


def vocabulary_problem(intent: Intent, catalog: Catalog) -> tuple[str, str] | None:
    """(field, why) when an intent uses a name the warehouse does not have; None when all are known."""
    vocab = catalog.vocabulary
    if intent.metric not in vocab.metrics:
        return "metric", _unknown(catalog, "metric", intent.metric, vocab.metrics)
    if intent.dimension is not None and intent.dimension not in vocab.dimensions:
        return "dimension", _unknown(catalog, "dimension", intent.dimension, vocab.dimensions)
    for i, f in enumerate(intent.filters):
        if f.field not in vocab.filter_fields:
            return f"filters.{i}.field", _unknown(catalog, "filter field", f.field, vocab.filter_fields)
    return None


def excluded_problem(catalog: Catalog, what: str, name: str) -> str | None:
    """Why a name outside the vocabulary is not there when a partial layer excluded it; else None."""
    if name in (catalog.vocabulary.metrics if what == "metric" else catalog.vocabulary.filter_fields):
        return None
    hit = catalog.exclusion_for(name)
    if hit is None:
        return None
    part, ex = hit
    uses = "is" if part == name else f"uses {part!r}, which is"
    return (f"{what} {name!r} {uses} excluded from this semantic layer ({ex.object}: {ex.reason}); "
            "see `nlq2sql semantic check`")


def _unknown(catalog: Catalog, what: str, name: str, known: tuple[str, ...]) -> str:
    """Why a name is not in the vocabulary: a partial layer excluded it (and why), or it is unknown."""
    return excluded_problem(catalog, what, name) or f"unknown {what} {name!r} (known: {', '.join(map(repr, known))})"


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


def _regex_object(kinds: tuple[str, ...], vocab: Vocabulary, *, dimension_null: bool, grain_null: bool | None
                  ) -> str:
    value = r'"[^"\\\x00-\x1f]{0,64}"'
    flt = ('\\{"field":' + _alt(vocab.filter_fields) + ',"op":' + _alt(OPS)
           + ',"value":' + value + '\\}')
    limit = "([1-9]|[1-9][0-9]|100|null)"
    grain = "null" if grain_null else _alt(TIME_GRAINS, grain_null is None)
    return ('\\{"intent":' + _alt(kinds) + ',"metric":' + _alt(vocab.metrics)
            + ',"dimension":' + _alt(vocab.dimensions, dimension_null)
            + ',"time_grain":' + grain
            + ',"filters":\\[(' + flt + '(,' + flt + '){0,2})?\\]'
            + ',"limit":' + limit + ',"order":' + _alt(ORDERS, True) + '\\}')


def compact_regex(catalog: Catalog, mode: str = "flat") -> str:
    """A regex accepting exactly the whitespace-free intents, keys in schema order.

    Sent as ``structured_outputs.regex`` it makes whitespace impossible *in generation*
    (per-request whitespace switches are ignored by vLLM), whatever the server's settings.
    Built from the same vocabulary as :func:`intent_schema` (and, for ``branches``, the
    same three branches), so the two cannot drift apart.
    """
    vocab = catalog.vocabulary
    if mode == "flat":
        return _regex_object(INTENTS, vocab, dimension_null=True, grain_null=None)
    if mode == "branches":
        ranked = _regex_object(("breakdown", "top_n_by_metric"), vocab, dimension_null=False, grain_null=True)
        series = _regex_object(("time_series",), vocab, dimension_null=True, grain_null=False)
        return f"({ranked}|{series})"
    raise InputError(f"unknown schema mode {mode!r} (known: {', '.join(SCHEMA_MODES)})", field="schema")
