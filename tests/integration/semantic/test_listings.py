"""Listings: a v2 query with no metric and at least one group-by is MetricFlow's dimension-value
query (the distinct values of its group-bys), in the model, the compiler, the answer schema and
its grammar, the parser, the scorer, the planner and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from repo_paths import ROOT
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import IntentError
from nlq2sql.semantic import load_catalog
from nlq2sql.semantic.contract import answer_schema, is_listing_branch, parse_answer
from nlq2sql.semantic.engine import Query
from nlq2sql.semantic.query import KINDS, LISTING, MetricQuery
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.query_score import query_record
from nlq2sql.stages.queryset import QueryCase

CAT = load_catalog("retail")
RUNNER = CliRunner()
RULESETS = ("ranking", "sort", "consistency")
REGION, SEGMENT = "customer_id__region", "customer_id__segment"
LISTING_Q = {"metrics": [], "group_by": [REGION, SEGMENT],
             "where": [{"field": REGION, "op": "in", "values": ["North", "South", "East"]}],
             "order_by": [{"field": REGION, "descending": True}], "limit": 4}
FULL = {"metrics": [], "group_by": [REGION], "where": [], "order_by": [], "limit": None}


def _listing(**kw: Any) -> MetricQuery:
    return MetricQuery.model_validate({**LISTING_Q, **kw})


# -- the model and its kind ---------------------------------------------------------------------
def test_a_query_needs_a_metric_or_a_group_by_and_a_listing_has_no_metric_time() -> None:
    for empty in ({}, {"metrics": []}, {"metrics": [], "group_by": []}):
        with pytest.raises(ValidationError, match="needs a metric or a group-by"):
            MetricQuery.model_validate(empty)
    for timed in ({"group_by": ["metric_time__month"]},
                  {"group_by": [REGION],
                   "where": [{"field": "metric_time__day", "op": "gte", "values": ["2024-01-01"]}]},
                  {"group_by": [REGION], "order_by": [{"field": "metric_time__year", "descending": False}]}):
        with pytest.raises(ValidationError, match="cannot use 'metric_time"):
            MetricQuery.model_validate({"metrics": [], **timed})
    assert MetricQuery.model_validate({"group_by": [REGION]}).metrics == ()


def test_the_kind_of_a_listing_is_listing_whatever_its_order_and_limit() -> None:
    assert LISTING in KINDS
    assert _listing().kind == LISTING
    assert _listing(order_by=[], limit=None).kind == LISTING
    assert MetricQuery.model_validate({"metrics": ["revenue"], "group_by": [REGION]}).kind == "breakdown"
    series = MetricQuery.model_validate({"metrics": ["revenue"], "group_by": ["metric_time__month"]})
    assert series.kind == "time_series"


# -- compiled by MetricFlow, run on the test warehouse --------------------------------------------
def test_a_listing_compiles_to_the_distinct_values_with_where_order_and_limit(executor: Executor) -> None:
    q = CAT.engine.compile(_listing())
    assert "LIMIT 4" in q.sql and q.params == ("North", "South", "East")
    got = executor.run(q)
    want = executor.run(Query("SELECT DISTINCT region, segment FROM customers WHERE region IN ('North', 'South', "
                              "'East') ORDER BY region DESC, segment LIMIT 4", ()))
    assert len(want) == 4 and got == want  # ordered: the order and its tie-break are MetricFlow's
    every = executor.run(CAT.engine.compile(MetricQuery.model_validate(FULL)))
    regions = executor.run(Query("SELECT DISTINCT region FROM customers", ()))
    assert sorted(every) == sorted(regions) and len(every) == len(set(every)) > 1


def test_the_compile_cache_keys_a_listing_apart_and_shares_its_shape() -> None:
    eng = CAT.engine
    eng.compile(_listing())
    before = eng.compiles
    a = eng.compile(_listing(limit=7))  # the same shape: no compile
    b = eng.compile(_listing(where=[{"field": REGION, "op": "eq", "values": ["West"]}], limit=2))
    c = eng.compile(_listing(where=[{"field": REGION, "op": "eq", "values": ["North"]}], limit=9))
    metric = eng.compile(MetricQuery.model_validate({**LISTING_Q, "metrics": ["revenue"]}))
    assert b.sql.replace("LIMIT 2", "") == c.sql.replace("LIMIT 9", "") and b.params != c.params
    assert a.sql != metric.sql
    assert eng.compiles - before == 2  # the listing's other shape and the metric query


def test_a_time_dimension_of_a_model_is_listed(tmp_path: Path) -> None:
    """Which stores opened in a year: jaffle's ``location__opened_date`` at a grain, filtered."""
    from nlq2sql.semantic.binding import open_warehouse

    wh = open_warehouse("jaffle")
    q = MetricQuery.model_validate({"metrics": [],
                                    "group_by": ["location__location_name", "location__opened_date__day"],
                                    "order_by": [{"field": "location__opened_date__day", "descending": False}]})
    with Executor(wh.db_path) as ex:
        rows = ex.run(wh.catalog.engine.compile(q))
        want = ex.run(Query("SELECT DISTINCT CAST(opened_date AS DATE), location_name FROM locations "
                            "ORDER BY 1, 2", ()))
    assert rows and [(str(r[0])[:10], r[1]) for r in rows] == [(str(r[0])[:10], r[1]) for r in want]


# -- the answer schema and its grammar ------------------------------------------------------------
@pytest.mark.parametrize("mode", ["flat", "branches"])
def test_the_schema_takes_a_listing_and_refuses_an_empty_query(mode: str) -> None:
    schema = answer_schema(CAT, mode)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate({**LISTING_Q, "where": [{"field": SEGMENT, "op": "eq", "values": ["Consumer"]}]}, schema)
    jsonschema.validate(FULL, schema)
    for bad in ({**FULL, "group_by": []},  # neither a metric nor a group-by
                {**FULL, "group_by": ["metric_time__month"]},  # a listing has no metric time
                {**FULL, "where": [{"field": "metric_time__day", "op": "gte", "values": ["2024-01-01"]}]},
                {**FULL, "order_by": [{"field": "revenue", "descending": True}]},  # no metric to order by
                {**FULL, "metrics": ["revenue"], "group_by": [REGION, REGION, REGION, REGION, REGION]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    branches = [b for b in schema["anyOf"] if is_listing_branch(b)]
    assert len(branches) == 1 and "uniqueItems" not in json.dumps(schema)
    assert set(branches[0]["properties"]["group_by"]["items"]["enum"]) == set(CAT.engine.listables())


@pytest.mark.parametrize("mode", ["flat", "branches"])
def test_xgrammar_compiles_the_schema_and_generates_only_what_it_allows(mode: str) -> None:
    """What vLLM's xgrammar backend does with the schema (the compact, whitespace-free grammar)."""
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string as accepts

    grammar = xgr.Grammar.from_json_schema(json.dumps(answer_schema(CAT, mode)), any_whitespace=False,
                                           separators=(",", ":"))

    def text(obj: dict[str, Any]) -> str:
        return json.dumps(obj, separators=(",", ":"))

    assert accepts(grammar, text(LISTING_Q)) and accepts(grammar, text(FULL))
    assert accepts(grammar, text({**FULL, "metrics": ["revenue"], "group_by": []}))
    assert not accepts(grammar, text({**FULL, "group_by": []}))
    assert not accepts(grammar, text({**FULL, "group_by": ["metric_time__month"]}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(CAT.engine.listables())), min_size=0, max_size=4),
       st.lists(st.sampled_from(sorted(CAT.metrics)), min_size=0, max_size=2))
def test_the_schema_and_the_parser_agree_on_what_is_asked(group_by: list[str], metrics: list[str]) -> None:
    """Whatever the names, the schema accepts a metric-less answer exactly when it lists something,
    and the parser agrees with it."""
    obj = {**FULL, "metrics": metrics, "group_by": group_by}
    valid = jsonschema.Draft202012Validator(answer_schema(CAT, "flat")).is_valid(obj)
    if not metrics:
        assert valid == bool(group_by)
    try:
        parsed = parse_answer(json.dumps(obj), CAT)
    except IntentError:
        parsed = None
    if not metrics:
        assert (parsed is not None) == bool(group_by)
        if parsed is not None:
            assert isinstance(parsed, MetricQuery) and parsed.kind == LISTING


def test_the_parser_names_what_cannot_be_listed() -> None:
    with pytest.raises(IntentError, match="cannot be listed"):
        parse_answer(json.dumps({**FULL, "group_by": ["region"]}), CAT)
    with pytest.raises(IntentError, match="needs a metric or a group-by"):
        parse_answer(json.dumps({**FULL, "group_by": []}), CAT)


# -- scored against a gold --------------------------------------------------------------------------
def test_a_listing_scores_right_against_a_listing_and_wrong_against_a_breakdown(executor: Executor) -> None:
    listing = QueryCase(id="l", question="which regions are there?", gold=MetricQuery.model_validate(FULL),
                        category="listing")
    breakdown = QueryCase(id="b", question="revenue by region",
                          gold=MetricQuery.model_validate({**FULL, "metrics": ["revenue"]}), category="breakdown")
    answer = json.dumps(FULL)
    right = query_record(listing, answer, executor, CAT).to_json(version=False)
    assert right["correct_final"] is True and right["raw_intent"]["intent"] == LISTING
    assert right["gold_intent"]["intent"] == LISTING and right["result_rows"] > 1
    wrong = query_record(breakdown, answer, executor, CAT).to_json(version=False)
    assert wrong["correct_final"] is False and wrong["error_final"] == "wrong_metrics"
    # and the other way round: a breakdown answering a listing question has a column too many
    extra = query_record(listing, json.dumps({**FULL, "metrics": ["revenue"]}), executor, CAT)
    assert extra.to_json(version=False)["correct_final"] is False


def test_guardrail_rules_leave_a_listing_alone(executor: Executor) -> None:
    """The ranking and sort rules read a v1 view with a metric: a listing has none, and is kept."""
    from nlq2sql.stages.guardrail import read_ruleset
    from nlq2sql.stages.query_guard import apply_query_guardrails, query_scope, view

    q = _listing()
    assert view(q, CAT) is None
    rulesets = [read_ruleset(name) for name in RULESETS]
    assert query_scope(rulesets, q, q, CAT) == []
    final, found = apply_query_guardrails(rulesets, q, "top 4 regions, descending", CAT)
    assert final == q and found == []


# -- the planner --------------------------------------------------------------------------------------
def test_the_planner_offers_listing_and_cuts_the_schema_to_its_branch() -> None:
    from nlq2sql.conditions.planner import KIND_QUESTION, query_kind_schema

    schema = answer_schema(CAT, "branches")
    assert "- listing:" in KIND_QUESTION
    only = query_kind_schema(schema, LISTING)
    jsonschema.validate(FULL, only)
    jsonschema.validate({"unanswerable": "no"}, only)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**FULL, "metrics": ["revenue"]}, only)
    for kind in ("breakdown", "top_n_by_metric", "time_series"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(FULL, query_kind_schema(schema, kind))


# -- the prompt and the CLI -----------------------------------------------------------------------------
def test_the_prompt_says_metrics_may_be_empty_and_names_what_may_be_listed() -> None:
    from nlq2sql.semantic.binding import open_warehouse
    from nlq2sql.stages.prompt import render

    wh = open_warehouse("retail")
    text = render((ROOT / "prompts" / "query.txt").read_text(), wh)
    assert "then []" in text and '{"metrics":[],"group_by":["' in text
    vocab = wh.query_vocabulary_text()
    line = next(ln for ln in vocab.splitlines() if ln.startswith("Names a listing"))
    assert REGION in line and "metric_time" not in line.split("):", 1)[1]


def test_cli_sql_executes_a_listing_and_refuses_an_empty_query() -> None:
    intent = json.dumps({"metrics": [], "group_by": [REGION], "order_by": [{"field": REGION, "descending": False}],
                         "limit": 2})
    res = RUNNER.invoke(app, ["sql", "--intent", intent, "--execute"])
    rows = [json.loads(ln) for ln in res.stdout.splitlines()]
    assert res.exit_code == 0 and [list(r) for r in rows] == [[REGION]] * 2, res.output
    assert rows[0][REGION] < rows[1][REGION], res.output
    res = RUNNER.invoke(app, ["sql", "--intent", json.dumps({"metrics": [], "group_by": []})])
    assert res.exit_code == 2 and "needs a metric or a group-by" in res.stderr


def test_evalset_check_passes_a_listing_gold(tmp_path: Path) -> None:
    path = tmp_path / "listings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (
        {"id": "l1", "question": "Which regions are there?", "gold": FULL, "answerable": True, "category": "listing"},
        {"id": "l2", "question": "Four region and segment pairs", "gold": LISTING_Q, "answerable": True,
         "category": "listing"})))
    res = RUNNER.invoke(app, ["evalset", "check", str(path), "--semantic-model", "retail"])
    assert res.exit_code == 0 and "2 v2 items OK" in " ".join(res.stdout.split()), res.output


def test_a_listings_confidence_is_its_answer_tokens_share() -> None:
    """``--abstain-below`` on v2: a listing has no metric token, so its confidence is the first share."""
    from nlq2sql.conditions.confidence import query_evidence

    text = '{"metrics":[],"group_by":["customer_id__region"],"where":[],"order_by":[],"limit":null}'
    tokens = [('{"', -0.01, [('{"', -0.01)]), ("metrics", -0.2, [("metrics", -0.2), ("unanswerable", -1.7)]),
              *((ch, -0.01, [(ch, -0.01)]) for ch in text[len('{"metrics'):])]
    ev = query_evidence(tokens, tuple(CAT.metrics))
    assert ev is not None and ev.over == "answer" and ev.kind == "metrics" and 0.5 < ev.confidence < 1
