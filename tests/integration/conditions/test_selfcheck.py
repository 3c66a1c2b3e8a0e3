"""Self-consistency and abstention (nlq2sql.conditions.selfcheck)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from retail import RETAIL

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.conditions.selfcheck import vote
from nlq2sql.errors import InputError
from nlq2sql.records.item import ItemRecord
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.abstention import abstain_reason, apply_abstention
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.summary import Summary

A = {"intent": "breakdown", "metric": "revenue", "dimension": "region", "time_grain": None, "filters": [],
     "limit": None, "order": None}
B = {**A, "metric": "orders"}


def text(d: dict[str, Any], **kw: Any) -> str:
    return json.dumps(d, **kw)


def test_vote_majority_over_canonical_intents() -> None:
    # the same intent written two ways (key order, spacing) is one vote
    v = vote([text(A), text(dict(reversed(A.items())), indent=1), text(B)], RETAIL)
    assert (v.winner, v.votes, v.valid, v.tie, v.distinct) == (0, 2, 3, False, 2)
    assert vote([text(A), text(B)], RETAIL).tie is True
    v = vote(["not json", text(B), "{}"], RETAIL)
    assert (v.winner, v.votes, v.valid) == (1, 1, 1)
    assert vote(["nope"], RETAIL).winner is None
    # as the record writes ``votes``: ``distinct`` absent when no sample was valid
    assert set(vote(["nope"], RETAIL).to_json()) == {"n", "valid", "winner", "votes", "tie", "share"}
    assert v.to_json()["distinct"] == v.distinct is not None


def _votes(winner: int, *, tie: bool, share: float = 0.5) -> dict[str, Any]:
    """A record's ``votes`` (a ``selfcheck.Vote``) over ten valid samples."""
    return {"n": 10, "valid": 10, "winner": winner, "votes": round(share * 10), "tie": tie, "share": share}


def _rec(**fields: Any) -> ItemRecord:
    return ItemRecord.from_json({"id": "x", "question": "q", **fields})


def test_abstention_reasons_and_scoring() -> None:
    rec = _rec(votes=_votes(0, tie=True), correct_final=True, correct_exec=True, final_intent=A)
    assert abstain_reason(rec) == "no majority among samples"
    apply_abstention(rec)
    assert rec.get("abstained") and rec.get("answer_correct")
    assert not rec.get("correct_final") and not rec.get("correct_exec")
    planner = _rec(planner_choice="top_n_by_metric", final_intent=A, correct_final=False, correct_exec=False)
    assert abstain_reason(planner) == "planner chose top_n_by_metric, guardrail made it breakdown"
    agree = _rec(planner_choice="breakdown", final_intent=A, votes=_votes(1, tie=False),
                 correct_final=True, correct_exec=True)
    assert not apply_abstention(agree).get("abstained") and agree.get("correct_final")
    # the decision's keys follow the record's traces, as the flat record had them appended
    assert list(agree.traces) == ["planner_choice", "votes", "abstained", "abstain_reason", "answer_correct"]


def test_selective_summary_and_curve() -> None:
    wh = open_warehouse("retail")
    case = load_evalset("heldout", wh).cases[0]
    from nlq2sql.stages.pipeline import make_executor
    from nlq2sql.stages.score import case_record

    summ = Summary([])
    with make_executor(wh) as ex:
        for i, (share, tie, good) in enumerate([(1.0, False, True), (1.0, False, False), (0.6, False, True),
                                                 (0.4, True, True)]):
            answer = case.gold.model_dump(mode="json") if good else B
            rec = case_record(case, json.dumps(answer), [], ex, catalog=wh.catalog)
            rec.id = f"x{i}"
            rec.merge({"votes": _votes(0, tie=tie, share=share)})
            summ.add(apply_abstention(rec))
    sel = summ.result().to_json()["selective"]
    assert sel["n"] == 4 and sel["abstained"] == 1
    assert (sel["coverage"]["k"], sel["accuracy_answered"]["k"], sel["accuracy_answered"]["n"]) == (3, 2, 3)
    assert [(p["min_vote_share"], p["coverage"]["k"], p["accuracy"]["k"]) for p in sel["curve"]] == [
        (1.0, 2, 1), (0.6, 3, 2), (0.4, 4, 3)]
    assert summ.result().to_json()["final_accuracy"]["k"] == 2  # the abstention is not counted correct
    assert "selective" not in Summary([]).result().to_json()  # runs without --abstain are unchanged


def test_options_are_checked(tmp_path: Path) -> None:
    from nlq2sql.run.config import EvalConfig, validate
    from nlq2sql.transport.client import Sampling

    url = "http://127.0.0.1:9/v1"
    with pytest.raises(InputError, match="temperature"):
        validate(EvalConfig(out=tmp_path / "x", endpoint=url, conditions=REGISTRY.from_options(samples=3)))
    with pytest.raises(InputError) as exc:
        validate(EvalConfig(out=tmp_path / "x", endpoint=url, conditions=REGISTRY.from_options(samples=99),
                            sampling=Sampling(temperature=0.7)))
    assert exc.value.field == "--samples"
    with pytest.raises(InputError, match="planner"):
        validate(EvalConfig(out=tmp_path / "x", endpoint=url,
                            conditions=REGISTRY.from_options(samples=3, planner="two-stage"),
                            sampling=Sampling(temperature=0.7)))


def test_eval_with_samples_and_abstain(tmp_path: Path) -> None:
    """Against the fault server: three samples per item, one item with a majority and one with
    none; the second abstains, the summary says so, and re-scoring decides the same."""
    from fakeserver import FakeServer, script

    from nlq2sql.answers.offline import rescore_run
    from nlq2sql.records.store import iter_records
    from nlq2sql.run.config import EvalConfig, LoadShape
    from nlq2sql.run.live import run_eval
    from nlq2sql.transport.client import Sampling

    cases = load_evalset("heldout", open_warehouse("retail")).cases[:2]
    gold = [c.gold.model_dump(mode="json") for c in cases]
    wrong = [{**g, "metric": "units" if g["metric"] != "units" else "orders"} for g in gold]
    other = [{**g, "metric": "customers" if g["metric"] != "customers" else "revenue"} for g in gold]
    by_q = {cases[0].question: [{"kind": "text", "text": text(t)} for t in (gold[0], wrong[0], gold[0])],
            cases[1].question: [{"kind": "text", "text": text(t)} for t in (gold[1], wrong[1], other[1])]}
    with FakeServer(tmp_path / "fake", script(by_question=by_q), model="fake-model") as fake:
        cfg = EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint=fake.url, model="fake-model",
                         limit=2, concurrency=2, conditions=REGISTRY.from_options(samples=3, abstain=True),
                         guardrails=(),
                         sampling=Sampling(temperature=0.7, max_tokens=96), load=LoadShape(metrics_interval_s=0.05))
        summary = run_eval(cfg).to_json()
        assert len(fake.chat_requests()) == 6
    recs = {r["id"]: r for r in iter_records(cfg.out / "records.jsonl")}
    first, second = recs[cases[0].id], recs[cases[1].id]
    assert first["votes"]["votes"] == 2 and not first["abstained"] and first["correct_final"]
    assert len(first["sample_texts"]) == 3 and first["requests"] == 3
    assert second["votes"]["distinct"] == 3 and second["abstained"] and not second["correct_final"]
    sel = summary["selective"]
    assert (sel["abstained"], sel["coverage"]["k"], sel["accuracy_answered"]["k"]) == (1, 1, 1)
    manifest = json.loads((cfg.out / "manifest.json").read_text())
    assert manifest["samples"] == 3 and manifest["abstain"] is True
    again, _, final_ok = rescore_run(cfg.out, ())
    assert again.selective is not None and again.selective.abstained == 1
    assert final_ok == {cases[0].id: True, cases[1].id: False}
