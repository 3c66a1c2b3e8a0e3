"""Retrieved few-shot: deterministic nearest examples, turns in order, the bank never the test set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from retail import RETAIL, retail_wh

from nlq2sql.conditions.example_bank import ExampleBank, load_bank, normalise
from nlq2sql.errors import InputError
from nlq2sql.semantic import default_catalog
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.intent import compact_json, parse_intent


@pytest.fixture(scope="module")
def bank() -> ExampleBank:
    return load_bank(None, default_catalog(), 4)


def test_default_bank_is_the_dev_set(bank: ExampleBank) -> None:
    assert bank.evalset.name == "dev" and len(bank.cases) == 20
    info = bank.manifest(4)
    assert info.bank_path == "evalsets/dev.jsonl" and len(info.bank_sha256) == 64


def test_nearest_finds_the_same_wording_first_and_is_deterministic(bank: ExampleBank) -> None:
    for case in bank.cases:
        got = bank.nearest(case.question, 3)
        assert got[0].id == case.id, (case.question, [c.question for c in got])
        assert [c.id for c in bank.nearest(case.question, 3)] == [c.id for c in got]
    assert bank.nearest("anything", 0) == []


def test_messages_insert_solved_turns_before_the_question(bank: ExampleBank) -> None:
    base = [{"role": "system", "content": "S"}, {"role": "user", "content": "Top 3 regions by revenue"}]
    msgs, ids = bank.messages(base, "Top 3 regions by revenue", 2)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0] == base[0] and msgs[-1] == base[-1] and len(ids) == 2
    by_id = {c.id: c for c in bank.cases}
    for (q, a), cid in zip(zip(msgs[1:-1:2], msgs[2:-1:2], strict=True), ids, strict=True):
        assert q["content"] == by_id[cid].question
        assert a["content"] == compact_json(by_id[cid].gold)
        assert parse_intent(a["content"], RETAIL) == by_id[cid].gold  # a valid intent in the warehouse's vocabulary


def test_shipped_dev_banks_are_disjoint_from_heldout_and_adversarial() -> None:
    from nlq2sql.semantic import load_catalog

    for name in ("retail", "tpch", "flights"):
        cat = load_catalog(name)
        b = load_bank(None, cat, 4)
        for tested in ("heldout", "adversarial"):
            b.check_disjoint(load_evalset(tested, cat))


def test_overlap_by_id_or_question_is_refused(bank: ExampleBank, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="contains id"):
        bank.check_disjoint(bank.evalset)
    first = bank.cases[0]
    same_q = tmp_path / "t.jsonl"
    same_q.write_text(json.dumps({"id": "other-1", "question": "  " + first.question.upper() + " ?",
                                  "gold": first.gold.model_dump(mode="json"), "category": "x"}) + "\n")
    with pytest.raises(InputError, match="asks the same question"):
        bank.check_disjoint(load_evalset(same_q, retail_wh()))
    assert normalise(" Revenue  by REGION? ") == "revenue by region"


def test_bad_k_is_an_input_error() -> None:
    with pytest.raises(InputError, match="holds 20"):
        load_bank(None, default_catalog(), 21)
    with pytest.raises(InputError, match="at least 0"):
        load_bank(None, default_catalog(), -1)


def test_eval_refuses_an_overlapping_bank_before_any_request(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from nlq2sql.cli.main import app

    res = CliRunner().invoke(app, ["eval", "--evalset", "dev", "--examples", "2", "--endpoint",
                                   "http://127.0.0.1:9/v1", "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "contains id" in res.output
    assert not (tmp_path / "run").exists()


def test_planner_stage_samplings() -> None:
    from nlq2sql.conditions.planner import stage_one, stage_two
    from nlq2sql.stages.intent import INTENTS, branch_schema, intent_schema
    from nlq2sql.transport.client import Sampling, _extra_body

    one = stage_one(Sampling(max_tokens=160, schema="branches"))
    assert _extra_body(one)["structured_outputs"] == {"choice": list(INTENTS)} and one.max_tokens <= 12
    two = stage_two(Sampling(max_tokens=160), default_catalog(), "time_series")
    sent = _extra_body(two)["structured_outputs"]["json"]
    assert sent == branch_schema("time_series", RETAIL) and sent["properties"]["intent"]["const"] == "time_series"
    assert {**sent, "title": ""} != {**intent_schema(RETAIL, "branches"), "title": ""}
    with pytest.raises(InputError, match="unknown intent kind"):
        branch_schema("pie", RETAIL)
    with pytest.raises(InputError, match="needs choices"):
        Sampling(structured="choice")
    with pytest.raises(InputError, match="unknown structured mode"):
        Sampling(structured="jsn")
