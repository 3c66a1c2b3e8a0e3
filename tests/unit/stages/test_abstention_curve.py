"""Abstention in the coverage-accuracy curve and unanswerable precision/recall on every set (issue 22).

An "unanswerable" answer on an answerable item is not covered; on an unanswerable item it is a
covered, correct answer; the v1 ``--abstain`` curve is unchanged."""

from __future__ import annotations

import json
from typing import Any

from nlq2sql.records.item import ItemRecord
from nlq2sql.semantic import load_catalog
from nlq2sql.semantic.query import MetricQuery
from nlq2sql.stages.abstention import apply_abstention
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.query_score import query_record
from nlq2sql.stages.queryset import QueryCase
from nlq2sql.stages.summary import Summary

CAT = load_catalog("retail")
GOLD = {"metrics": ["revenue"], "group_by": ["customer_id__region"]}
OTHER = {"metrics": ["orders"], "group_by": ["customer_id__region"]}
NO = '{"unanswerable": "not in this layer"}'


def _case(i: int, answerable: bool = True) -> QueryCase:
    return QueryCase(id=f"i{i}", question=f"q{i}", gold=MetricQuery.model_validate(GOLD) if answerable else None,
                     answerable=answerable, category="breakdown" if answerable else "unanswerable")


def _summary(executor: Executor, answers: list[tuple[bool, str]]) -> dict[str, Any]:
    s = Summary([], fields=())
    for i, (answerable, text) in enumerate(answers):
        s.add(query_record(_case(i, answerable), text, executor, CAT))
    return s.result().to_json()


def test_v2_curve_counts_abstentions(executor: Executor) -> None:
    right, wrong = json.dumps(GOLD), json.dumps(OTHER)
    # 6 answerable: 3 right, 1 wrong, 2 abstained; 4 unanswerable: 3 abstained (right), 1 answered (wrong)
    result = _summary(executor, [(True, right)] * 3 + [(True, wrong)] + [(True, NO)] * 2
                      + [(False, NO)] * 3 + [(False, right)])
    sel = result["selective"]
    assert isinstance(sel, dict)
    assert sel["n"] == 10 and sel["abstained"] == 5
    assert sel["abstained_answerable"] == 2 and sel["abstained_unanswerable"] == 3
    # covered: 4 answered answerable + 1 answered unanswerable + 3 right abstentions = 8 of 10
    assert (sel["coverage"]["k"], sel["coverage"]["n"]) == (8, 10)
    # right among covered: 3 right answers + 3 right abstentions = 6 of 8
    assert (sel["accuracy_answered"]["k"], sel["accuracy_answered"]["n"]) == (6, 8)
    assert [(p["coverage"]["k"], p["accuracy"]["k"], p["accuracy"]["n"]) for p in sel["curve"]] == [(8, 6, 8)]
    ab = result["abstention"]
    assert isinstance(ab, dict)
    assert (ab["precision"]["k"], ab["precision"]["n"], ab["recall"]["k"], ab["recall"]["n"]) == (3, 5, 3, 4)


def test_every_v2_set_has_a_curve_and_precision_recall(executor: Executor) -> None:
    """A set with no unanswerable item still reports both: recall 0/0, the abstentions as false ones."""
    result = _summary(executor, [(True, json.dumps(GOLD)), (True, NO)])
    sel, ab = result["selective"], result["abstention"]
    assert isinstance(sel, dict) and isinstance(ab, dict)
    assert (sel["coverage"]["k"], sel["accuracy_answered"]["k"]) == (1, 1)
    assert ab["precision"]["n"] == 1 and ab["precision"]["k"] == 0 and ab["recall"]["n"] == 0
    all_out = _summary(executor, [(True, NO)] * 3)["selective"]
    assert isinstance(all_out, dict)
    assert all_out["coverage"]["k"] == 0 and all_out["curve"][0]["coverage"]["k"] == 0


def test_v1_abstain_runs_keep_their_curve_and_gain_precision() -> None:
    """The v1 --abstain curve is over the vote share as before; its abstentions are all on answerable items."""
    s = Summary([])
    base: dict[str, Any] = {"id": "x", "question": "q", "category": "breakdown", "status": "ok", "error_raw": None,
            "error_final": None,
            "finish_reason": "stop", "gold_intent": {"intent": "breakdown"}, "raw_intent": {"intent": "breakdown"},
            "final_intent": {"intent": "breakdown"}, "wrong_fields_raw": [], "guardrail_scope": [],
            "interventions": [], "correct_raw": True, "correct_final": True, "correct_exec": True,
            "schema_valid": True, "abstain": True}
    recs = [dict(base, votes={"n": 3, "winner": 0, "votes": 3, "valid": 3, "distinct": 1, "tie": False, "share": 1.0}),
            dict(base, votes={"n": 3, "winner": 0, "votes": 1, "valid": 3, "distinct": 3, "tie": True, "share": 0.34},
                 correct_raw=False, correct_final=False, correct_exec=False)]
    for r in recs:
        s.add(apply_abstention(ItemRecord.from_json(r)))
    result = s.result().to_json()
    sel, ab = result["selective"], result["abstention"]
    assert sel["abstained"] == 1 and sel["abstained_unanswerable"] == 0
    assert [p["coverage"]["k"] for p in sel["curve"]] == [1, 2]
    assert ab["abstained"] == 1 and ab["precision"]["k"] == 0 and ab["unanswerable_items"] == 0
