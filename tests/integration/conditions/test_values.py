"""Value linking (nlq2sql.conditions.values): links, the `values` guardrail, the hint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.conditions.values import effective_guardrails
from nlq2sql.errors import InputError
from nlq2sql.semantic import Warehouse, open_warehouse
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.intent import Filter, Intent
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.stages.value_links import ValueIndex, hint_text, value_ruleset


@pytest.fixture(scope="module")
def retail() -> Warehouse:
    return open_warehouse("retail")


@pytest.fixture(scope="module")
def index(retail: Warehouse) -> ValueIndex:
    return ValueIndex(retail)


def links(idx: ValueIndex, q: str) -> list[tuple[str, str, str]]:
    return [(lk.field, lk.op, lk.value) for lk in idx.link(q)]


@pytest.mark.parametrize("evalset", ["dev", "heldout", "adversarial"])
def test_retail_links_are_exactly_the_gold_filters(index: ValueIndex, retail: Warehouse, evalset: str) -> None:
    """Every shipped retail item: the linked filters are the gold's, no more, no fewer."""
    for case in load_evalset(evalset, retail).cases:
        gold = sorted((f.field, f.op, f.value) for f in case.gold.filters)
        assert sorted(links(index, case.question)) == gold, case.question


def test_negation_lists_case_and_names(index: ValueIndex) -> None:
    assert links(index, "orders per region but leave out Online") == [("channel", "neq", "Online")]
    assert links(index, "Revenue excluding the Phone channel and Partner") == [
        ("channel", "neq", "Phone"), ("channel", "neq", "Partner")]
    assert links(index, "sales by product, furniture only pls") == [("category", "eq", "Furniture")]
    assert links(index, "revenue by region") == []  # dimension names are not values
    assert links(index, "revenue in 2031") == []  # a year the data does not hold
    assert links(index, "revenue for customer 2025x") == []


def test_shared_values_link_only_when_the_question_says_which() -> None:
    tpch = ValueIndex(open_warehouse("tpch"))
    # nation and supplier_nation both hold CHINA: the question's words decide
    assert links(tpch, "top 10 supplier nations by quantity, leaving out CHINA") == [
        ("supplier_nation", "neq", "CHINA")]
    assert links(tpch, "revenue by nation, excluding CHINA") == [("nation", "neq", "CHINA")]
    # "ship" in "ship mode" is a dimension's name, not the SHIP ship mode
    assert links(tpch, "Quantity per ship mode") == []
    assert links(tpch, "every ship mode except AIR and REG AIR") == [
        ("ship_mode", "neq", "AIR"), ("ship_mode", "neq", "REG AIR")]
    flights = ValueIndex(open_warehouse("flights"))
    assert links(flights, "Flights by airline out of La Guardia") == []  # origin or destination?


def intent(**kw: Any) -> Intent:
    base: dict[str, Any] = {"intent": "breakdown", "metric": "revenue", "dimension": "region",
                            "time_grain": None, "filters": [], "limit": None, "order": None}
    return Intent.model_validate(base | kw)


def test_repair_drops_fixes_and_adds(retail: Warehouse) -> None:
    rs = value_ruleset(retail)
    q = "Revenue by region in 2025, excluding the Phone channel"
    wrong = intent(filters=[{"field": "year", "op": "eq", "value": "2024"},
                            {"field": "channel", "op": "eq", "value": "Phone"}])
    fixed, found = rs.apply(wrong, q)
    assert sorted((f.field, f.op, f.value) for f in fixed.filters) == [("channel", "neq", "Phone"),
                                                                       ("year", "eq", "2025")]
    assert [i.rule for i in found] == ["values:drop", "values:op", "values:add"]
    assert found[0].before["filters"] != found[0].after["filters"]
    again, more = rs.apply(fixed, q)  # idempotent
    assert again == fixed and more == []
    # a filter the question names in another form stays ("Newark" for "Newark Liberty Intl")
    fl = value_ruleset(open_warehouse("flights"))
    kept = intent(metric="flights", dimension="airline",
                  filters=[{"field": "origin", "op": "neq", "value": "Newark Liberty Intl"}])
    assert fl.apply(kept, "average arrival delay by airline, leaving out Newark") == (kept, [])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["year", "channel", "region", "category", "segment"]),
                          st.sampled_from(["eq", "neq"]),
                          st.sampled_from(["2024", "2025", "Online", "Phone", "North", "Apparel", "Bogus"])),
                max_size=3),
       st.sampled_from(["Revenue by region in 2025", "Units by segment, excluding the Central region",
                        "orders per region but leave out Online", "revenue by region"]))
def test_repair_is_valid_idempotent_and_never_adds_unnamed_values(retail: Warehouse,
                                                                  filters: list[tuple[str, str, str]],
                                                                  question: str) -> None:
    rs = value_ruleset(retail)
    start = intent(filters=[Filter(field=f, op=o, value=v) for f, o, v in filters])  # type: ignore[arg-type]
    out, found = rs.apply(start, question)
    Intent.model_validate(out.model_dump())
    assert rs.apply(out, question) == (out, [])
    named = {(lk.field, lk.value) for lk in rs.index.link(question)}  # type: ignore[union-attr]
    before = {(f.field, f.value) for f in start.filters}
    for f in out.filters:
        assert (f.field, f.value) in named | before
    assert all(i.rule.startswith("values:") for i in found)


def test_loading_and_effective_guardrails(retail: Warehouse) -> None:
    assert load_guardrails(["values"]) == []  # recognised; built only with a warehouse
    assert [rs.name for rs in load_guardrails(["ranking", "values"], warehouse=retail)] == ["ranking", "values"]
    assert effective_guardrails(("ranking",), "repair") == ("ranking", "values")
    assert effective_guardrails(("ranking",), "both") == ("ranking", "values")
    assert effective_guardrails(("ranking", "values"), "both") == ("ranking", "values")
    assert effective_guardrails(("ranking",), "hint") == ("ranking",)
    assert hint_text(()) == ""
    assert hint_text(ValueIndex(retail).link("Revenue by region in 2025")) == (
        '\n\n(Known values named in this question, as filters: year eq "2025".)')


def test_unknown_mode_is_an_input_error(tmp_path: Path) -> None:
    from nlq2sql.run.config import EvalConfig, validate

    with pytest.raises(InputError) as exc:
        validate(EvalConfig(out=tmp_path / "x", endpoint="http://127.0.0.1:9/v1",
                            conditions=REGISTRY.from_options(link_values="always")))
    assert exc.value.field == "--link-values"


def test_eval_with_hint_and_repair_records_both(tmp_path: Path) -> None:
    """Against the fault server: the hint reaches the request after the question, the record
    lists the linked values, the `values` rule set is applied and re-scoring drops it."""
    from fakeserver import FakeServer, script

    from nlq2sql.answers.offline import rescore_run
    from nlq2sql.records.store import iter_records
    from nlq2sql.run.config import EvalConfig, LoadShape
    from nlq2sql.run.live import run_eval

    with FakeServer(tmp_path / "fake", script(), model="fake-model") as fake:
        cfg = EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint=fake.url, model="fake-model",
                         limit=6, concurrency=2, conditions=REGISTRY.from_options(link_values="both"),
                         load=LoadShape(metrics_interval_s=0.05))
        summary = run_eval(cfg).to_json()
        sent = [json.loads(line)["question"] for line in fake.log.read_text().splitlines()
                if '"/v1/chat/completions"' in line]
    manifest = json.loads((cfg.out / "manifest.json").read_text())
    assert manifest["guardrails"] == ["ranking", "values"] and manifest["link_values"] == "both"
    recs = {r["id"]: r for r in iter_records(cfg.out / "records.jsonl")}
    ho1 = recs["ho-001"]  # "Sales by region in 2025"
    assert ho1["linked_values"] == [{"field": "year", "op": "eq", "value": "2025"}]
    linked = ValueIndex(open_warehouse("retail")).link("Sales by region in 2025")
    assert "Sales by region in 2025" + hint_text(linked) in sent
    assert recs["ho-003"]["linked_values"] == []  # nothing named: the question goes out unchanged
    assert "Number of orders by product category" in sent
    rules = {i["rule"] for r in recs.values() for i in r["interventions"]}
    assert rules & {"values:drop", "values:op", "values:add"}, rules
    assert summary["n"] == 6
    assert {"values:drop", "values:op", "values:add"} <= set(summary["rules"])
    scope = sum(summary["rules"][r]["scope"] for r in ("values:drop", "values:op", "values:add"))
    assert scope == sum(len([s for s in r["guardrail_scope"] if s.startswith("values:")]) for r in recs.values())
    rescored, raw_ok, _ = rescore_run(cfg.out, ("ranking",))  # the repair is re-scorable away
    assert not any(r.startswith("values:") for r in rescored.rules)
    assert rescored.raw_accuracy.to_json() == summary["raw_accuracy"]
