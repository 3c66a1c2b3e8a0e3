"""The intent contract: parse → validate → consistency → canonicalise."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from retail import RETAIL
from strategies import VOCAB, any_intents, consistent_intents

from nlq2sql.errors import IntentError
from nlq2sql.stages.intent import (
    DEFAULT_TOP_N,
    FIELDS,
    PARSE_CACHE_SIZE,
    STATUS_INVALID_JSON,
    STATUS_SCHEMA_INVALID,
    Filter,
    Intent,
    _parse_cached,
    _validator,
    canonicalise,
    compact_json,
    consistency_problem,
    is_ordered,
    parse_intent,
)

BASE: dict[str, Any] = {"intent": "breakdown", "metric": "revenue", "dimension": "region",
                        "time_grain": None, "filters": [], "limit": None, "order": None}


def _text(**over: Any) -> str:
    return json.dumps({**BASE, **over})


def test_parse_accepts_exact_shape_in_any_key_order_and_whitespace() -> None:
    a = parse_intent(_text(), RETAIL)
    b = parse_intent(json.dumps(dict(reversed(list(BASE.items()))), indent=4), RETAIL)
    assert a == b and a.intent == "breakdown" and a.dimension == "region"


@pytest.mark.parametrize("text", [
    "", "   ", "{", "not json", '```json\n' + _text() + '\n```', _text() + " trailing",
    "Sure! " + _text(), _text()[:-1],
])
def test_invalid_json(text: str) -> None:
    with pytest.raises(IntentError) as exc:
        parse_intent(text, RETAIL)
    assert exc.value.status == STATUS_INVALID_JSON


def test_none_text_is_invalid_json() -> None:
    with pytest.raises(IntentError) as exc:
        parse_intent(None, RETAIL)  # type: ignore[arg-type]
    assert exc.value.status == STATUS_INVALID_JSON


@pytest.mark.parametrize("obj, where", [
    ([], "(root)"), ("breakdown", "(root)"), (None, "(root)"),
    ({k: v for k, v in BASE.items() if k != "order"}, "(root)"),
    ({**BASE, "sql": "SELECT 1"}, "(root)"),
    ({**BASE, "intent": "pie_chart"}, "intent"),
    ({**BASE, "metric": "profit"}, "metric"),
    ({**BASE, "dimension": "country"}, "dimension"),
    ({**BASE, "time_grain": "week"}, "time_grain"),
    ({**BASE, "limit": 0}, "limit"),
    ({**BASE, "limit": 101}, "limit"),
    ({**BASE, "limit": "5"}, "limit"),
    ({**BASE, "limit": True}, "limit"),
    ({**BASE, "limit": 2.5}, "limit"),
    ({**BASE, "order": "up"}, "order"),
    ({**BASE, "filters": {}}, "filters"),
    ({**BASE, "filters": [{"field": "region", "op": "eq", "value": "N"}] * 4}, "filters"),
    ({**BASE, "filters": [{"field": "region", "op": "like", "value": "N"}]}, "filters/0/op"),
    ({**BASE, "filters": [{"field": "country", "op": "eq", "value": "N"}]}, "filters/0/field"),
    ({**BASE, "filters": [{"field": "region", "op": "eq", "value": 7}]}, "filters/0/value"),
    ({**BASE, "filters": [{"field": "region", "op": "eq", "value": "x" * 65}]}, "filters/0/value"),
    ({**BASE, "filters": [{"field": "region", "op": "eq"}]}, "filters/0"),
    ({**BASE, "filters": [{"field": "region", "op": "eq", "value": "N", "x": 1}]}, "filters/0"),
])
def test_schema_invalid_names_the_field(obj: Any, where: str) -> None:
    with pytest.raises(IntentError) as exc:
        parse_intent(json.dumps(obj), RETAIL)
    assert exc.value.status == STATUS_SCHEMA_INVALID
    assert exc.value.reason.startswith(f"{where}: ")


def test_integral_float_limit_is_schema_valid_and_becomes_int() -> None:
    intent = parse_intent(_text(limit=5.0), RETAIL)
    assert intent.limit == 5 and isinstance(intent.limit, int)


def test_errors_are_fresh_per_call() -> None:
    """Repeated bad text raises a new exception each time with the same status and reason."""
    errs = []
    for _ in range(2):
        with pytest.raises(IntentError) as exc:
            parse_intent(_text(metric="profit"), RETAIL)
        errs.append(exc.value)
    assert errs[0] is not errs[1]
    assert (errs[0].status, errs[0].reason) == (errs[1].status, errs[1].reason)


@pytest.mark.parametrize("over, problem", [
    ({"intent": "time_series", "dimension": None}, "time_series needs a time_grain"),
    ({"time_grain": "month"}, "time_grain must be null for breakdown"),
    ({"intent": "top_n_by_metric", "time_grain": "year"}, "time_grain must be null for top_n_by_metric"),
    ({"dimension": None}, "breakdown needs a dimension"),
    ({"intent": "top_n_by_metric", "dimension": None}, "top_n_by_metric needs a dimension"),
    ({}, None),
    ({"intent": "time_series", "time_grain": "month", "dimension": None}, None),
    ({"intent": "time_series", "time_grain": "month"}, None),
])
def test_consistency(over: dict[str, Any], problem: str | None) -> None:
    intent = parse_intent(_text(**over), RETAIL)  # schema-valid either way
    assert consistency_problem(intent) == problem


def test_canonical_defaults() -> None:
    top = canonicalise(parse_intent(_text(intent="top_n_by_metric"), RETAIL))
    assert (top.limit, top.order) == (DEFAULT_TOP_N, "desc")
    kept = canonicalise(parse_intent(_text(intent="top_n_by_metric", limit=3, order="asc"), RETAIL))
    assert (kept.limit, kept.order) == (3, "asc")
    series = canonicalise(parse_intent(_text(intent="time_series", time_grain="month", order="desc"), RETAIL))
    assert series.order is None
    plain = canonicalise(parse_intent(_text(limit=10), RETAIL))
    assert (plain.limit, plain.order) == (10, None)


def test_canonical_filters_are_stripped_deduplicated_sorted() -> None:
    raw = parse_intent(_text(filters=[
        {"field": "year", "op": "eq", "value": "2025"},
        {"field": "region", "op": "neq", "value": " West"},
        {"field": "region", "op": "neq", "value": "West"},
    ]), RETAIL)
    assert canonicalise(raw).filters == [
        Filter(field="region", op="neq", value="West"), Filter(field="year", op="eq", value="2025")]
    two = parse_intent(_text(filters=[{"field": "segment", "op": "neq", "value": "B"},
                                      {"field": "region", "op": "eq", "value": "North "},
                                      {"field": "region", "op": "eq", "value": "East"}]), RETAIL)
    assert [(f.field, f.value) for f in canonicalise(two).filters] == [
        ("region", "East"), ("region", "North"), ("segment", "B")]


def test_equal_meanings_compare_equal() -> None:
    a = canonicalise(parse_intent(_text(intent="top_n_by_metric"), RETAIL))
    b = canonicalise(parse_intent(_text(intent="top_n_by_metric", limit=5, order="desc"), RETAIL))
    assert a == b and a.key() == b.key()
    c = canonicalise(parse_intent(_text(intent="top_n_by_metric", limit=6), RETAIL))
    assert a != c and a.key() != c.key()


def test_is_ordered() -> None:
    assert not is_ordered(parse_intent(_text(), RETAIL))
    assert is_ordered(parse_intent(_text(order="asc"), RETAIL))
    assert is_ordered(parse_intent(_text(intent="top_n_by_metric"), RETAIL))
    assert is_ordered(parse_intent(_text(intent="time_series", time_grain="year"), RETAIL))


def test_compact_json_is_whitespace_free_in_schema_key_order() -> None:
    text = compact_json(parse_intent(_text(filters=[{"field": "region", "op": "eq", "value": "a b"}]), RETAIL))
    assert list(json.loads(text)) == list(FIELDS)
    assert " " not in text.replace("a b", "")


@settings(max_examples=200, deadline=None)
@given(intent=any_intents)
def test_round_trip_and_canonical_idempotence(intent: Intent) -> None:
    assert parse_intent(compact_json(intent), RETAIL) == intent
    assert parse_intent(json.dumps(intent.model_dump(mode="json"), indent=2), RETAIL) == intent
    once = canonicalise(intent)
    assert canonicalise(once) == once
    assert once.key() == canonicalise(parse_intent(intent.key(), RETAIL)).key()


@settings(max_examples=100, deadline=None)
@given(intent=consistent_intents())
def test_consistent_strategy_really_is_consistent(intent: Intent) -> None:
    assert consistency_problem(intent) is None
    assert consistency_problem(canonicalise(intent)) is None


# ---------------------------------------------------------------- parse fast path ≡ JSON Schema


def _reference_parse(text: str) -> Intent | tuple[str, str]:
    """The specification: the JSON Schema decides validity, then pydantic builds the Intent."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return STATUS_INVALID_JSON, f"not JSON: {exc}"
    errors = sorted(_validator(VOCAB).iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].path) or "(root)"
        return STATUS_SCHEMA_INVALID, f"{where}: {errors[0].message}"
    return Intent.model_validate(obj)


ODD = st.sampled_from([None, True, False, 0, -1, 1, 5, 5.0, 5.5, 100, 101, 1e300, "5", "", "x" * 64,
                       "x" * 65, [], {}, [1], {"a": 1}, "breakdown", "region", "eq", "desc", "month"])
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-200, 200) | st.floats(allow_nan=False)
                           | st.text(max_size=70),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                                       inner, max_size=4),
                           max_leaves=8)


@st.composite
def near_intent_objects(draw: st.DrawFn) -> Any:
    obj: Any = draw(any_intents).model_dump(mode="json")
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["replace", "delete", "add", "filter", "whole"]))
        key = draw(st.sampled_from(list(FIELDS)))
        if action == "replace":
            obj[key] = draw(ODD | JSON_VALUES)
        elif action == "delete":
            obj.pop(key, None)
        elif action == "add":
            obj[draw(st.sampled_from(["sql", "extra", "Intent"]))] = draw(ODD)
        elif action == "filter" and isinstance(obj.get("filters"), list):
            flt = {"field": draw(st.sampled_from(["region", "year", "city", 1])),
                   "op": draw(st.sampled_from(["eq", "neq", "like", None])), "value": draw(ODD | st.text())}
            if draw(st.booleans()):
                flt.pop(draw(st.sampled_from(["field", "op", "value"])))
            obj["filters"] = [*obj["filters"], flt]
        else:
            obj = draw(ODD | JSON_VALUES)
            break
    return obj


@settings(max_examples=600, deadline=None)
@given(obj=near_intent_objects(), indent=st.sampled_from([None, 2]))
def test_parse_fast_path_agrees_with_json_schema(obj: Any, indent: int | None) -> None:
    text = json.dumps(obj, indent=indent)
    expected = _reference_parse(text)
    try:
        got: Intent | tuple[str, str] = parse_intent(text, RETAIL)
    except IntentError as exc:
        got = (exc.status, exc.reason)
    assert got == expected
    if isinstance(got, Intent):
        assert type(got.limit) is type(expected.limit)  # type: ignore[union-attr]
        assert got.model_dump() == expected.model_dump()  # type: ignore[union-attr]


def test_parse_cache_is_bounded_and_transparent() -> None:
    text = _text(metric="units")
    first, second = parse_intent(text, RETAIL), parse_intent(text, RETAIL)
    assert first == second and first.metric == "units"
    info = _parse_cached.cache_info()
    assert info.maxsize == PARSE_CACHE_SIZE and info.hits >= 1
    # Non-text input bypasses the cache and still yields the documented status.
    with pytest.raises(IntentError) as exc:
        parse_intent(["not", "text"], RETAIL)  # type: ignore[arg-type]
    assert exc.value.status == STATUS_INVALID_JSON


def test_canonicalise_returns_equal_intent_for_canonical_input() -> None:
    raw = parse_intent(_text(filters=[{"field": "region", "op": "eq", "value": "East"},
                                      {"field": "year", "op": "eq", "value": "2024"}]), RETAIL)
    assert canonicalise(raw) == raw
    unsorted = parse_intent(_text(filters=[{"field": "year", "op": "eq", "value": "2024"},
                                           {"field": "region", "op": "eq", "value": "East"}]), RETAIL)
    assert canonicalise(unsorted) == raw and canonicalise(unsorted) != unsorted
