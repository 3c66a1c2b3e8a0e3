"""Scoring: statistics, error taxonomy, per-item scoring and the streaming summary."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from retail import RETAIL, retail_wh
from scipy.stats import binomtest

from nlq2sql.records.item import ItemRecord
from nlq2sql.stages.evalset import EvalCase
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.intent import FIELDS, Intent, canonicalise
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.stages.score import case_record, error_class, mcnemar_exact, rate, spread, wrong_fields
from nlq2sql.stages.summary import Summary

RANKING = load_guardrails(["ranking"])
BOTH = load_guardrails(["consistency", "ranking"])


def intent(**over: Any) -> Intent:
    base: dict[str, Any] = {"intent": "breakdown", "metric": "revenue", "dimension": "region",
                            "time_grain": None, "filters": [], "limit": None, "order": None}
    return Intent.model_validate({**base, **over})


def case(question: str, gold: Intent, cid: str = "c1", category: str = "breakdown") -> EvalCase:
    return EvalCase(id=cid, question=question, gold=gold, category=category)


def text(i: Intent, **over: Any) -> str:
    return json.dumps({**i.model_dump(mode="json"), **over})


def scored(*args: Any, **kw: Any) -> dict[str, Any]:
    """An item's record line as ``case_record`` builds it (without the version)."""
    return case_record(*args, **kw).to_json(version=False)


# ---------------------------------------------------------------- statistics


def _wilson_formula(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return centre - half, centre + half


def test_wilson_known_values() -> None:
    w = rate(38, 60)
    assert (w.k, w.n) == (38, 60) and w.value == pytest.approx(38 / 60)
    assert w.ci95 == [pytest.approx(0.5068, abs=1e-4), pytest.approx(0.7438, abs=1e-4)]
    for k, n in ((38, 60), (0, 10), (10, 10), (1, 2), (57, 104)):
        lo, hi = _wilson_formula(k, n)
        assert rate(k, n).ci95 == [pytest.approx(lo, abs=6e-5), pytest.approx(hi, abs=6e-5)]
    assert (rate(0, 10).ci95 or [])[0] == 0.0 and (rate(10, 10).ci95 or [])[1] == 1.0
    assert rate(0, 0).to_json() == {"value": None, "k": 0, "n": 0, "ci95": None}
    json.dumps(w.to_json())  # serialisable as written


@pytest.mark.parametrize("b, c", [(10, 2), (2, 10), (3, 3), (0, 5), (25, 12), (1, 0), (40, 60)])
def test_mcnemar_exact_matches_binomtest(b: int, c: int) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(binomtest(b, b + c, 0.5).pvalue)
    assert mcnemar_exact(b, c) == mcnemar_exact(c, b)


def test_mcnemar_exact_hand_values() -> None:
    assert mcnemar_exact(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 2**12)
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 2**5)
    assert mcnemar_exact(0, 0) == 1.0


def test_percentiles() -> None:
    empty = spread([]).to_json()
    assert empty == {"n": 0, "p50": None, "p95": None, "p99": None, "mean": None}
    assert set(empty) == {"n", "p50", "p95", "p99", "mean"}
    p = spread([float(i) for i in range(1, 101)])
    assert p.n == 100 and p.p50 == pytest.approx(50.5) and p.mean == pytest.approx(50.5)
    assert p.p99 == pytest.approx(99.01)
    assert set(p.to_json()) == {"n", "mean", "p50", "p95", "p99"}


# ---------------------------------------------------------------- taxonomy


@pytest.mark.parametrize("pred, gold, label", [
    (intent(intent="top_n_by_metric", limit=5, order="desc"), intent(), "false_ranking"),
    (intent(), intent(intent="top_n_by_metric", limit=5, order="desc"), "false_breakdown"),
    (intent(intent="time_series", time_grain="month"), intent(), "wrong_intent"),
    (intent(metric="units"), intent(), "wrong_metric"),
    (intent(dimension="segment"), intent(), "wrong_dimension"),
    (intent(intent="time_series", time_grain="year"), intent(intent="time_series", time_grain="month"),
     "wrong_time_grain"),
    (intent(filters=[{"field": "year", "op": "eq", "value": "2024"}]), intent(), "wrong_filters"),
    (intent(limit=10), intent(), "wrong_limit"),
    (intent(order="desc"), intent(), "wrong_order"),
    (intent(metric="units", limit=3), intent(), "wrong_metric"),  # first differing field wins
    (intent(), intent(), None),
])
def test_error_class(pred: Intent, gold: Intent, label: str | None) -> None:
    assert error_class("ok", canonicalise(pred), canonicalise(gold)) == label


def test_error_class_status_wins() -> None:
    for status in ("invalid_json", "schema_invalid", "truncated", "request_error", "inconsistent"):
        assert error_class(status, None, intent()) == status
        assert error_class(status, intent(), intent()) == status


def test_wrong_fields() -> None:
    assert wrong_fields(intent(), intent()) == []
    assert wrong_fields(intent(metric="units", order="asc"), intent()) == ["metric", "order"]


# ---------------------------------------------------------------- case_record


def test_correct_answer(executor: Executor) -> None:
    gold = intent(intent="top_n_by_metric", limit=3, order="desc")
    rec = scored(case("Top 3 regions by revenue", gold), json.dumps(gold.model_dump(), indent=2),
                     RANKING, executor, finish_reason="stop", catalog=RETAIL)
    assert rec["status"] == rec["final_status"] == "ok"
    assert rec["correct_raw"] and rec["correct_final"] and rec["correct_exec"]
    assert rec["error_raw"] is None and rec["error_final"] is None and rec["wrong_fields_raw"] == []
    assert rec["result_hash"] == rec["gold_result_hash"] and rec["result_rows"] == 3
    assert rec["interventions"] == [] and rec["guardrail_scope"] == []
    assert "LIMIT 3" in rec["sql"] and rec["params"] == []
    json.dumps(rec)


def test_default_top_n_equals_explicit(executor: Executor) -> None:
    gold = intent(intent="top_n_by_metric", limit=5, order="desc")
    rec = scored(case("Top regions by revenue", gold), text(gold, limit=None, order=None), [], executor,
                     catalog=RETAIL)
    assert rec["correct_raw"] and rec["correct_exec"]


def test_schema_invalid(executor: Executor) -> None:
    rec = scored(case("revenue by region", intent()), text(intent(), metric="profit"), RANKING,
                     executor, catalog=RETAIL)
    assert rec["status"] == rec["final_status"] == "schema_invalid"
    assert rec["status_reason"].startswith("metric: ")
    assert rec["raw_intent"] is None and rec["final_intent"] is None and rec["sql"] is None
    assert not (rec["correct_raw"] or rec["correct_final"] or rec["correct_exec"])
    assert rec["error_raw"] == rec["error_final"] == "schema_invalid"
    assert rec["wrong_fields_raw"] == list(FIELDS)
    assert rec["gold_result_hash"] and rec["result_hash"] is None


@pytest.mark.parametrize("raw, finish, status", [
    ('{"intent": "breakdown", "metric": "rev', "length", "truncated"),
    ('{"intent": "breakdown", "metric": "rev', "stop", "invalid_json"),
    ('{"intent": "breakdown", "metric": "rev', None, "invalid_json"),
    ("```json\n{}\n```", "stop", "invalid_json"),
    ('{"intent": "breakdown"}', "length", "truncated"),
    ('{"intent": "breakdown"}', "stop", "schema_invalid"),
    (None, "stop", "invalid_json"),
])
def test_unparseable(executor: Executor, raw: str | None, finish: str | None, status: str) -> None:
    rec = scored(case("revenue by region", intent()), raw, RANKING, executor, finish_reason=finish, catalog=RETAIL)
    assert rec["status"] == rec["error_raw"] == rec["error_final"] == status
    assert rec["finish_reason"] == finish and not rec["correct_final"]


def test_request_error(executor: Executor) -> None:
    rec = scored(case("revenue by region", intent()), None, RANKING, executor,
                     request_error="timeout after 120 s", catalog=RETAIL)
    assert (rec["status"], rec["status_reason"]) == ("request_error", "timeout after 120 s")
    assert rec["error_final"] == "request_error" and not rec["correct_exec"]


def test_inconsistent_without_and_with_repair(executor: Executor) -> None:
    gold = intent()
    raw = text(gold, time_grain="month")
    rec = scored(case("revenue by region", gold), raw, RANKING, executor, catalog=RETAIL)
    assert rec["status"] == rec["final_status"] == "inconsistent"
    assert rec["status_reason"] == "time_grain must be null for breakdown"
    assert rec["raw_intent"]["time_grain"] == "month" and rec["sql"] is None
    assert rec["error_raw"] == "inconsistent" and not rec["correct_final"]

    fixed = scored(case("revenue by region", gold), raw, BOTH, executor, catalog=RETAIL)
    assert fixed["status"] == "inconsistent" and fixed["final_status"] == "ok"
    assert not fixed["correct_raw"] and fixed["correct_final"] and fixed["correct_exec"]
    assert [iv["rule"] for iv in fixed["interventions"]] == ["stray_time_grain"]
    assert fixed["interventions"][0]["correct"] is True
    assert fixed["guardrail_scope"] == ["stray_time_grain"]


def test_false_ranking_repaired(executor: Executor) -> None:
    gold = intent()
    rec = scored(case("revenue by region", gold),
                     text(gold, intent="top_n_by_metric", limit=10, order="desc"), RANKING, executor, catalog=RETAIL)
    assert rec["error_raw"] == "false_ranking" and rec["error_final"] is None
    assert not rec["correct_raw"] and rec["correct_final"] and rec["correct_exec"]
    iv = rec["interventions"][0]
    assert iv["rule"] == "false_ranking" and iv["correct"] is True
    assert iv["before"] == {"intent": "top_n_by_metric", "limit": 10, "order": "desc"}
    assert iv["after"] == {"intent": "breakdown", "limit": None, "order": None}
    assert rec["final_intent"]["intent"] == "breakdown" and rec["raw_intent"]["intent"] == "top_n_by_metric"


def test_bound_filter_values_in_record(executor: Executor) -> None:
    gold = intent(filters=[{"field": "region", "op": "eq", "value": "North"}])
    rec = scored(case("revenue in the North by region", gold),
                     text(gold, filters=[{"field": "region", "op": "eq", "value": " North "}]), [], executor,
                     catalog=RETAIL)
    assert rec["correct_raw"] and rec["params"] == ["North"] and "North" not in rec["sql"]
    assert rec["result_rows"] == 1


# ---------------------------------------------------------------- summary


def _tiny_set(executor: Executor) -> list[dict[str, Any]]:
    top10 = {"intent": "top_n_by_metric", "limit": 10, "order": "desc"}
    a = scored(case("revenue by region", intent(), "A"), text(intent(), **top10), RANKING, executor, catalog=RETAIL)
    b_gold = intent(intent="top_n_by_metric", limit=3, order="desc")
    b = scored(case("Top 3 regions by revenue", b_gold, "B", "top_n"), text(b_gold), RANKING, executor,
                   catalog=RETAIL)
    c_gold = intent(order="desc")
    c = scored(case("revenue by region for the board", c_gold, "C"), text(c_gold, **top10), RANKING,
                   executor, catalog=RETAIL)
    d = scored(case("revenue by region", intent(), "D"), "{oops", RANKING, executor, catalog=RETAIL)
    e = scored(case("revenue by region, best guess", intent(), "E"), text(intent(), **top10), RANKING,
                   executor, catalog=RETAIL)
    return [a, b, c, d, e]


def test_summary_counts_and_intervention_metrics(executor: Executor) -> None:
    recs = _tiny_set(executor)
    assert [r["correct_raw"] for r in recs] == [False, True, False, False, False]
    assert [r["correct_final"] for r in recs] == [True, True, False, False, False]
    assert [bool(r["interventions"]) for r in recs] == [True, False, True, False, False]
    summ = Summary(RANKING)
    for r in recs:
        summ.add(ItemRecord.from_json(r))
    s = summ.result().to_json()
    assert s["n"] == 5
    assert (s["raw_accuracy"]["k"], s["final_accuracy"]["k"]) == (1, 2)
    assert s["schema_valid_rate"]["k"] == 4
    assert s["interventions"] == 2
    assert (s["intervention_precision"]["k"], s["intervention_precision"]["n"]) == (1, 2)
    recall = s["intervention_recall"]["false_ranking"]
    assert (recall["k"], recall["n"]) == (1, 3)  # A fixed; C fixed wrongly; E not fired
    rule = s["rules"]["false_ranking"]
    assert rule["interventions"] == 2 and rule["scope"] == 3 and rule["precision"]["k"] == 1
    assert s["status_counts"] == {"ok": 4, "invalid_json": 1}
    assert s["error_taxonomy_raw"] == {"false_ranking": 3, "correct": 1, "invalid_json": 1}
    assert s["error_taxonomy_final"] == {"correct": 2, "wrong_order": 1, "invalid_json": 1,
                                         "false_ranking": 1}
    assert s["majority_baseline"]["label"] == "breakdown" and s["majority_baseline"]["k"] == 4
    cm = s["confusion_matrix"]
    assert cm["labels"] == ["breakdown", "top_n_by_metric", "time_series", "invalid"]
    assert cm["rows_gold_cols_pred"] == [[0, 3, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    # E: top 10 of 5 regions holds the same rows as the unordered gold breakdown.
    assert recs[4]["correct_exec"] and not recs[2]["correct_exec"]
    assert s["execution_accuracy"]["k"] == sum(r["correct_exec"] for r in recs) == 3
    assert s["per_category"]["breakdown"]["n"] == 4 and s["per_category"]["top_n"]["final_accuracy"]["k"] == 1
    assert s["field_accuracy"]["intent"]["k"] == 1 and s["field_accuracy"]["metric"]["k"] == 4
    assert s["timing"] == {}
    json.dumps(s)


def test_summary_timing(executor: Executor) -> None:
    summ = Summary(RANKING)
    for i, rec in enumerate(_tiny_set(executor)):
        summ.add(ItemRecord.from_json({**rec, "latency_s": 0.1 * (i + 1), "ttft_s": None}))
    t = summ.result().to_json()["timing"]
    assert set(t) == {"latency_s"} and t["latency_s"]["n"] == 5
    assert t["latency_s"]["p50"] == pytest.approx(0.3)


def test_summary_empty() -> None:
    empty = Summary([]).result().to_json()
    assert empty["n"] == 0 and empty["raw_accuracy"]["value"] is None
    assert empty["confusion_matrix"]["rows_gold_cols_pred"] is None


def test_record_intents_are_independent_objects(executor: Executor) -> None:
    gold = intent(filters=[{"field": "year", "op": "eq", "value": "2024"}])
    rec = scored(case("revenue by region in 2024", gold), text(gold), RANKING, executor, catalog=RETAIL)
    assert rec["interventions"] == [] and rec["raw_intent"] == rec["final_intent"]
    rec["final_intent"]["filters"].append({"field": "region", "op": "eq", "value": "North"})
    assert len(rec["raw_intent"]["filters"]) == 1, "mutating one record field leaves the others alone"
    again = scored(case("revenue by region in 2024", gold), text(gold), RANKING, executor, catalog=RETAIL)
    assert again["raw_intent"]["filters"] == [{"field": "year", "op": "eq", "value": "2024"}]


def test_records_keep_the_first_rows_of_both_results(executor: Executor) -> None:
    from nlq2sql.stages.evalset import load_evalset
    from nlq2sql.stages.score import RESULT_HEAD_ROWS

    case = next(c for c in load_evalset("heldout", retail_wh()).cases if c.gold.intent == "breakdown")
    wrong = {**case.gold.model_dump(mode="json"), "intent": "top_n_by_metric", "limit": 2, "order": "asc"}
    rec = scored(case, json.dumps(wrong), [], executor, catalog=RETAIL)
    assert len(rec["result_head"]) == 2 and 0 < len(rec["gold_result_head"]) <= RESULT_HEAD_ROWS
    assert rec["result_head"] != rec["gold_result_head"][:2] or rec["correct_exec"]
    json.dumps(rec)  # rows are plain JSON values (dates as ISO text, decimals as floats)
