"""The v2 answer (a MetricFlow query, or "unanswerable") scored by rows: eval sets, scoring, the
offline run, and every shipped v1 gold restated as a query returning the rows it always did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.errors import EvalSetError
from nlq2sql.records.item import ItemRecord
from nlq2sql.semantic import load_catalog
from nlq2sql.semantic.query import MetricQuery
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.execute import Executor, rows_equal
from nlq2sql.stages.intent import canonicalise, is_ordered
from nlq2sql.stages.query_score import query_record
from nlq2sql.stages.queryset import QueryCase, from_v1, load_query_set
from nlq2sql.stages.sqlbuild import build_sql

runner = CliRunner()
CAT = load_catalog("retail")
GOLD = {"metrics": ["revenue", "orders"], "group_by": ["customer_id__region"],
        "where": [{"field": "customer_id__segment", "op": "in", "values": ["Consumer", "Corporate"]}]}
TOP = {"metrics": ["units"], "group_by": ["product_id__category"],
       "order_by": [{"field": "units", "descending": True}], "limit": 2}


def _flat(*args: Any, **kw: Any) -> dict[str, Any]:
    """:func:`query_record` as its flat line (what these tests read key by key)."""
    return query_record(*args, **kw).to_json(version=False)


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _set(tmp_path: Path) -> Path:
    return _write(tmp_path / "v2.jsonl", [
        {"id": "a", "question": "Revenue and orders by region for consumer and corporate customers", "gold": GOLD,
         "answerable": True, "category": "breakdown"},
        {"id": "b", "question": "Top 2 categories by units", "gold": TOP, "category": "top_n"},
        {"id": "c", "question": "What is our gross margin by supplier?", "gold": None, "answerable": False,
         "category": "unanswerable"},
        {"id": "d", "question": "Sales by region in 2025", "category": "breakdown",
         "gold": {"intent": "breakdown", "metric": "revenue", "dimension": "region", "time_grain": None,
                  "filters": [{"field": "year", "op": "eq", "value": "2025"}], "limit": None, "order": None}}])


def test_every_shipped_v1_gold_restated_as_a_query_returns_its_rows(executor: Executor) -> None:
    n = 0
    for name in ("dev", "heldout", "adversarial"):
        for case in load_evalset(name, retail_wh()).cases:
            gold = canonicalise(case.gold)
            q = from_v1(case.gold, CAT)
            # A ranking still orders; a time series no longer asks for an order (its rows are a multiset).
            assert q.ordered == (gold.intent == "top_n_by_metric" or gold.order is not None
                                 or gold.limit is not None), case.id
            assert rows_equal(executor.run(CAT.engine.compile(q)), executor.run(build_sql(gold, CAT)),
                              ordered=q.ordered and is_ordered(gold)), case.id
            n += 1
    assert n == 104


def test_query_set_reads_v2_v1_and_unanswerable_lines(tmp_path: Path) -> None:
    qs = load_query_set(_set(tmp_path), CAT)
    assert [c.id for c in qs.cases] == ["a", "b", "c", "d"]
    assert qs.cases[2].gold is None and not qs.cases[2].answerable
    assert qs.cases[3].gold is not None and qs.cases[3].gold.where[0].op == "between"  # type: ignore[index]


@pytest.mark.parametrize("line, field, fragment", [
    ({"id": "x", "question": "q", "gold": None, "category": "c"}, "(line)", "gold null"),
    ({"id": "x", "question": "q", "gold": {"metrics": ["profit"]}, "category": "c"}, "gold", "does not compile"),
    ({"id": "x", "question": "q", "gold": {"metrics": ["revenue"], "group_by": ["region"]}, "category": "c"},
     "gold", "does not compile"),
    ({"id": "x", "question": "q", "gold": {"metrics": ["revenue"]}, "category": "bad label!"}, "category", "label"),
])
def test_bad_v2_lines_name_file_line_and_field(tmp_path: Path, line: dict[str, object], field: str,
                                               fragment: str) -> None:
    path = _write(tmp_path / "bad.jsonl", [{"id": "ok", "question": "q", "gold": TOP, "category": "top_n"}, line])
    with pytest.raises(EvalSetError) as info:
        load_query_set(path, CAT)
    assert f"{path}:2" in str(info.value) and fragment in str(info.value), str(info.value)


def test_scoring_is_by_rows_and_abstention_is_judged(executor: Executor) -> None:
    case = QueryCase(id="a", question="q", gold=MetricQuery.model_validate(GOLD), category="breakdown")
    reordered = {**GOLD, "metrics": ["orders", "revenue"]}
    rec = _flat(case, json.dumps(GOLD), executor, CAT)
    assert rec["correct_final"] and rec["error_final"] is None and all(rec["parts"].values())
    assert rec["gold_sql"] == rec["sql"] and "$1" in rec["gold_sql"], "the gold's SQL is recorded for the viewer"
    same_rows_other_order = _flat(case, json.dumps({**GOLD, "group_by": ["customer_id__region"],
                                                          "order_by": [{"field": "revenue", "descending": True}]}),
                                        executor, CAT)
    assert same_rows_other_order["correct_final"], "the gold does not order: rows compare as a multiset"
    assert _flat(case, json.dumps(reordered), executor, CAT)["parts"]["metrics"], "metrics compare as a set"
    wrong = _flat(case, json.dumps({**GOLD, "where": []}), executor, CAT)
    assert not wrong["correct_final"] and wrong["error_final"] == "wrong_where"
    abstained = _flat(case, '{"unanswerable": "no idea"}', executor, CAT)
    assert abstained["error_final"] == "false_abstention" and abstained["unanswerable"] == "no idea"
    uncastable = _flat(case, json.dumps({**GOLD, "where": [
        {"field": "metric_time__year", "op": "eq", "values": ["2025"]}]}), executor, CAT)
    assert uncastable["error_final"] == "exec_error" and uncastable["sql"] and not uncastable["correct_final"]
    bad = _flat(case, '{"metrics": ["revenue"], "group_by": ["nosuch__x"]}', executor, CAT)
    assert bad["status"] == "schema_invalid" and not bad["correct_final"]
    una = QueryCase(id="c", question="q", gold=None, answerable=False, category="unanswerable")
    assert _flat(una, '{"unanswerable": "no margin data"}', executor, CAT)["correct_final"]
    assert _flat(una, json.dumps(GOLD), executor, CAT)["error_final"] == "answered_unanswerable"
    top = QueryCase(id="b", question="q", gold=MetricQuery.model_validate(TOP), category="top_n")
    asc = {**TOP, "order_by": [{"field": "units", "descending": False}]}
    assert _flat(top, json.dumps(TOP), executor, CAT)["correct_final"]
    assert not _flat(top, json.dumps(asc), executor, CAT)["correct_final"], "the gold orders: order counts"


def test_the_record_is_built_typed_and_its_flat_line_round_trips(executor: Executor) -> None:
    """One builder (:func:`query_record`): its flat view is in the layout's order, and the line the
    live runner writes from the type is what a reader gets back."""
    case = QueryCase(id="a", question="q", gold=MetricQuery.model_validate(GOLD), category="breakdown")
    una = QueryCase(id="c", question="q", gold=None, answerable=False, category="unanswerable")
    for item, text, error in [(case, json.dumps(GOLD), None), (case, json.dumps({**GOLD, "where": []}), None),
                              (case, '{"unanswerable": "no idea"}', None), (una, '{"unanswerable": "n/a"}', None),
                              (case, '{"metrics": ["nope"]}', None), (case, None, "timeout")]:
        rec = query_record(item, text, executor, CAT, request_error=error)
        flat = _flat(item, text, executor, CAT, request_error=error)
        assert isinstance(rec, ItemRecord) and rec.judgement is not None
        assert rec.to_json(version=False) == flat and list(rec.to_json(version=False)) == list(flat)
        assert ItemRecord.from_json(flat).to_line() == rec.to_line()
        assert rec.judgement.correct_final is flat["correct_final"]
        assert rec.answer.status == flat["status"] and rec.answer.answer == "query"


def test_score_cli_answer_query_writes_a_run_with_abstention_figures(tmp_path: Path) -> None:
    qs = _set(tmp_path)
    responses = _write(tmp_path / "resp.jsonl", [
        {"id": "a", "text": json.dumps(GOLD)}, {"id": "b", "text": json.dumps({**TOP, "limit": 3})},
        {"id": "c", "text": '{"unanswerable": "no cost data"}'}, {"id": "d", "text": "not json"}])
    res = runner.invoke(app, ["score", "--answer", "query", "--evalset", str(qs), "--responses", str(responses),
                              "--out", str(tmp_path / "run"), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["answer"] == "query" and summary["final_accuracy"]["k"] == 2 and summary["n"] == 4
    assert summary["abstention"]["precision"]["k"] == 1 and summary["abstention"]["recall"]["n"] == 1
    assert set(summary["field_accuracy"]) == {"metrics", "group_by", "where", "order_by", "limit"}
    assert 0 <= summary["compiles"] <= 3  # distinct shapes new to this process's compile cache
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["answer"] == "query"
    recs = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert [r["error_final"] for r in recs] == [None, "wrong_limit", None, "invalid_json"]
    res = runner.invoke(app, ["score", "--answer", "query", "--evalset", str(qs), "--responses", str(responses),
                              "--out", str(tmp_path / "run2"), "--guardrails", "ranking"])
    assert res.exit_code == 0, res.output  # the v2 answer takes guardrails (test_query_conditions)
    ranked = json.loads((tmp_path / "run2" / "summary.json").read_text())
    assert "false_ranking" in ranked["rules"] and ranked["interventions"] == 0  # "Top 2 …" is a ranking
    assert json.loads((tmp_path / "run2" / "manifest.json").read_text())["guardrails"] == ["ranking"]


def test_evalset_check_on_a_v2_set(tmp_path: Path) -> None:
    res = runner.invoke(app, ["evalset", "check", str(_set(tmp_path))])
    assert res.exit_code == 0 and "4 v2 items OK (1 unanswerable)" in " ".join(res.output.split()), res.output
    empty = _write(tmp_path / "empty.jsonl", [{"id": "e", "question": "q", "category": "breakdown", "gold": {
        "metrics": ["revenue"], "group_by": ["customer_id__region"],
        "where": [{"field": "customer_id__region", "op": "eq", "values": ["Atlantis"]}]}}])
    res = runner.invoke(app, ["evalset", "check", str(empty)])
    assert res.exit_code == 2 and "no rows" in res.output, res.output


def test_eval_answer_query_end_to_end_against_the_fake_server(tmp_path: Path) -> None:
    """The live path: the v2 schema is sent, answers are scored by rows, refusals name the option."""
    from fakeserver import FakeServer, script

    qs = _set(tmp_path)
    by_q = {"Revenue and orders by region for consumer and corporate customers": [
        {"kind": "text", "text": json.dumps(GOLD)}],
        "Top 2 categories by units": [{"kind": "text", "text": json.dumps({**TOP, "limit": 3})}],
        "What is our gross margin by supplier?": [{"kind": "text", "text": '{"unanswerable": "no cost data"}'}],
        "Sales by region in 2025": [{"kind": "text", "text": '{"unanswerable": "?"}'}]}
    with FakeServer(tmp_path / "fake", script(by_question=by_q), model="fake-model") as fake:
        res = runner.invoke(app, ["eval", "--answer", "query", "--evalset", str(qs), "--endpoint", fake.url,
                                  "--model", "fake-model", "--out", str(tmp_path / "run"), "--concurrency", "2"])
        assert res.exit_code == 0, res.output
        sent = fake.chat_requests()
        refused = runner.invoke(app, ["eval", "--answer", "sql", "--evalset", str(qs), "--endpoint", fake.url,
                                      "--model", "fake-model", "--out", str(tmp_path / "run2"), "--planner",
                                      "two-stage"])  # (the v2 query answer takes the planner: test_query_conditions)
    assert refused.exit_code == 2 and "--planner" in refused.output and not (tmp_path / "run2").exists()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert summary["answer"] == "query" and summary["final_accuracy"]["k"] == 2 and summary["n"] == 4
    assert summary["abstention"]["precision"]["k"] == 1 and summary["abstention"]["abstained"] == 2
    assert manifest["answer"] == "query" and manifest["prompt"] == "query" and manifest["guardrails"] == []
    assert isinstance(summary["compiles"], int)
    schema = json.loads(manifest["sampling"]["schema_json"])
    assert "unanswerable" in json.dumps(schema) and "customer_id__region" in json.dumps(schema)
    assert len(sent) == 4


def test_score_flags_a_gold_with_no_rows(tmp_path: Path) -> None:
    empty = _write(tmp_path / "empty.jsonl", [{"id": "e", "question": "q", "category": "breakdown", "gold": {
        "metrics": ["revenue"], "group_by": ["customer_id__region"],
        "where": [{"field": "customer_id__region", "op": "eq", "values": ["Atlantis"]}]}}])
    responses = _write(tmp_path / "r.jsonl", [{"id": "e", "text": '{"unanswerable": "no such region"}'}])
    res = runner.invoke(app, ["score", "--answer", "query", "--evalset", str(empty), "--responses", str(responses),
                              "--out", str(tmp_path / "run")])
    assert res.exit_code == 0 and "gold returns no rows" in " ".join(res.output.split()), res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["empty_golds"] == {"n": 1, "first_ids": ["e"]}


def test_example_bank_for_the_v2_answer_writes_metricflow_queries(tmp_path: Path) -> None:
    """Retrieved examples work with --answer query: the dev bank's solutions become v2 queries
    (the schema's key order) that parse back to the bank's gold, and the run records their ids."""
    from fakeserver import FakeServer, script

    from nlq2sql.conditions.example_bank import load_bank
    from nlq2sql.semantic.contract import parse_answer

    bank = load_bank(None, CAT, 3, "query")
    messages, ids = bank.messages([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
                                  "Top 3 regions by revenue", 3)
    assert len(ids) == 3 and [m["role"] for m in messages] == ["system", *["user", "assistant"] * 3, "user"]
    cases = {c.id: c for c in bank.cases}
    for turn, cid in zip(messages[2:-1:2], ids, strict=True):
        assert turn["content"].startswith('{"metrics"')
        assert parse_answer(turn["content"], CAT).key() == cases[cid].gold.key()  # type: ignore[union-attr]
    qs = _set(tmp_path)
    with FakeServer(tmp_path / "fake", script(default={"kind": "text", "text": json.dumps(GOLD)}),
                    model="fake-model") as fake:
        res = runner.invoke(app, ["eval", "--answer", "query", "--evalset", str(qs), "--endpoint", fake.url,
                                  "--model", "fake-model", "--out", str(tmp_path / "run"), "--examples", "2"])
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert all(len(r["example_ids"]) == 2 for r in recs)
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["examples"]["k"] == 2
