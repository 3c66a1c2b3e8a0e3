"""A record read back through the conditions' declared traces (conditions.trace.Trace).

Scoring and summaries sit below the conditions: ``stages.abstention`` and ``stages.summary`` name
no trace key, each condition reads its own keys as its trace declares them, through the one
registry -- so a condition declared in this test module alone adds its confidence to the
summary's curve, and a malformed trace value is one error naming the item and the key.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field

from nlq2sql.conditions.abstain import AbstainTrace
from nlq2sql.conditions.confidence import Evidence
from nlq2sql.conditions.registry import REGISTRY, Condition, Settings
from nlq2sql.conditions.selfcheck import SelfCheckTrace
from nlq2sql.conditions.trace import Trace
from nlq2sql.errors import RecordError
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.item import ItemRecord, iter_item_records
from nlq2sql.stages.abstention import abstain_reason, apply_abstention, carry_evidence, decided
from nlq2sql.stages.summary import Summary, confidence

INTENT = {"intent": "breakdown"}
SCORED = {"gold_intent": INTENT, "raw_intent": INTENT, "final_intent": INTENT, "correct_raw": True,
          "correct_final": True, "correct_exec": True, "category": "breakdown"}


def _rec(**fields: Any) -> ItemRecord:
    return ItemRecord.from_json({"id": "x", "question": "q", **fields})


@pytest.mark.parametrize("module", ["stages/summary.py", "stages/abstention.py"])
def test_scoring_reads_no_trace_by_key(module: str) -> None:
    tree = ast.parse((PROJECT_ROOT / "nlq2sql" / module).read_text(encoding="utf-8"))
    touched = [node.lineno for node in ast.walk(tree)
               if (isinstance(node, ast.Attribute) and node.attr == "traces")
               or (isinstance(node, ast.Name) and node.id == "traces")]
    assert not touched, f"{module} reads a record's traces itself (lines {touched}): ask the conditions' registry"


def test_a_malformed_trace_value_names_the_item_and_the_key() -> None:
    rec = _rec(id="q7", votes={"winner": "first", "tie": False}, **SCORED)
    with pytest.raises(RecordError) as err:
        abstain_reason(rec)
    assert err.value.field is not None and err.value.field.startswith("votes.")
    assert "q7" in str(err.value)


def test_the_decision_is_the_abstain_trace() -> None:
    rec = apply_abstention(_rec(abstain_below=0.8, intent_evidence={
        "kind": "breakdown", "token": "break", "token_index": 3, "p_token": 0.5,
        "kinds": {"breakdown": 0.5, "time_series": 0.5}, "confidence": 0.5}, **SCORED))
    decided = AbstainTrace.model_validate({k: rec.traces[k] for k in AbstainTrace.model_fields if k in rec.traces})
    assert decided.abstained is True and decided.answer_correct is True
    assert decided.abstain_reason == "intent-token confidence 0.50 < 0.8"
    assert rec.judgement is not None and rec.judgement.correct_final is False  # an abstention is never right
    assert confidence(rec) == 0.5


class GaugeSettings(Settings):
    gauge: bool = Field(False, description="Test only: records a confidence of its own.")


class GaugeTrace(Trace):
    """A confidence this condition measures per item."""

    gauge_p: float

    timing_keys = ("gauge_p",)

    @classmethod
    def confidence(cls, rec: ItemRecord) -> float | None:
        p: float | None = cls.read(rec, "gauge_p")
        return p


class Gauge(Condition[GaugeSettings]):
    name = "gauge"
    settings_model = GaugeSettings
    trace = GaugeTrace


@pytest.fixture
def gauge() -> Iterator[None]:
    REGISTRY.add(Gauge)
    try:
        yield
    finally:
        REGISTRY.remove(Gauge.name)


def test_a_registered_condition_adds_its_confidence_to_the_curve(gauge: None) -> None:
    def run(gauges: list[float]) -> list[float]:
        s = Summary([])
        for i, p in enumerate(gauges):
            rec = _rec(id=f"x{i}", gauge_p=p, **SCORED)
            s.add(apply_abstention(rec))  # answered: no condition's evidence says otherwise
        figures = s.figures()
        assert figures.selective is not None
        assert figures.timing["gauge_p"].n == len(gauges)  # its cost keys, in the summary's timing
        return [point.min_confidence for point in figures.selective.curve]

    assert run([0.9, 0.4]) == [0.9, 0.4]
    # registry order: the vote share, measured first, wins over a later condition's
    both = _rec(gauge_p=0.3, votes={"n": 4, "valid": 4, "winner": 0, "votes": 3, "tie": False, "share": 0.75})
    assert confidence(both) == 0.75
    assert SelfCheckTrace.confidence(both) == 0.75 and GaugeTrace.confidence(both) == 0.3


def test_without_the_condition_its_keys_say_nothing() -> None:
    rec = _rec(gauge_p=0.3, **SCORED)
    assert confidence(rec) == 1.0 and abstain_reason(rec) is None


_EVIDENCE = st.builds(
    lambda kinds, kind, conf, over: {"kind": kind, "token": "t", "token_index": 0, "p_token": 0.5,
                                     "kinds": kinds, "confidence": conf, **over},
    st.dictionaries(st.sampled_from(["breakdown", "time_series", "top_n_by_metric"]),
                    st.floats(0, 1, allow_nan=False), max_size=3),
    st.sampled_from(["breakdown", "time_series", "top_n_by_metric"]), st.floats(0, 1, allow_nan=False),
    st.sampled_from([{}, {"over": "answer"}, {"over": "metric"}, {"over": "intent"}]))


@given(_EVIDENCE, st.sampled_from([None, "breakdown", "time_series", "top_n_by_metric", "listing"]))
def test_the_share_of_a_kind_is_a_share(evidence: dict[str, Any], kind: str | None) -> None:
    ev = Evidence.model_validate(evidence)
    share = ev.share(kind)
    assert 0.0 <= share <= 1.0
    if kind is None or kind == ev.kind or evidence.get("over", "intent") != "intent":
        assert share == ev.confidence  # the model's own share of what it answered
    else:
        total = sum(evidence["kinds"].values())
        assert share == (evidence["kinds"].get(kind, 0.0) / total if total > 0 else 0.0)


def test_the_committed_runs_are_read_through_their_traces() -> None:
    """Every committed run's records read back through the declared traces (a key whose value no
    longer fits its declaration would fail here, not in a reader later)."""
    runs = sorted((PROJECT_ROOT / "reports").rglob("records.jsonl"))
    assert runs
    seen = 0
    for path in runs:
        for rec in iter_item_records(path):
            confidence(rec)
            if rec.scored:
                abstain_reason(rec)
            seen += 1
    assert seen > 0


def test_re_scoring_carries_the_evidence_each_condition_declares() -> None:
    votes = {"n": 2, "valid": 2, "winner": None, "votes": 1, "tie": True, "share": 0.5}
    old = apply_abstention(_rec(votes=votes, sample_texts=["a", "b"], planner_choice=None, abstain_below=0.4,
                                example_ids=["e1"], **SCORED))
    assert decided(old) and old.traces["abstain_reason"] == "no majority among samples"
    new = _rec(**SCORED)
    assert not decided(new)
    carry_evidence(old, new)
    assert new.traces == {"planner_choice": None, "votes": votes, "abstain_below": 0.4}
    assert apply_abstention(new).traces["abstain_reason"] == old.traces["abstain_reason"]
