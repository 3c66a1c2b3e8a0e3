"""Unanswerable precision/recall at every cut-off, re-derived from records (issue 22's report)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nlq2sql.experiments.abstention import best_at_recall, cut, decisions, leave_one_out, render, sweep
from nlq2sql.records.item import ItemRecord


def _evidence(conf: float) -> dict[str, object]:
    """An intent-token evidence as the abstain condition records it (its kind chosen at ``conf``)."""
    return {"kind": "breakdown", "token": "break", "token_index": 4, "p_token": conf,
            "kinds": {"breakdown": conf, "top_n_by_metric": 1 - conf}, "confidence": conf}


def rec(i: int, answerable: bool, conf: float | None, right: bool = False, said: bool = False) -> ItemRecord:
    return ItemRecord.from_json({"id": f"i{i}", "question": "q", "answerable": answerable,
                                 "unanswerable": "no such data" if said else None,
                                 "intent_evidence": None if conf is None else _evidence(conf),
                                 "answer_correct": right, "correct_final": right})


RECORDS = [rec(0, True, 0.9, right=True), rec(1, True, 0.8, right=True), rec(2, True, 0.3, right=False),
           rec(3, True, None, right=False), rec(4, False, 0.2), rec(5, False, 0.6), rec(6, False, 0.95, said=True)]


def test_a_cut_off_declines_what_said_unanswerable_and_what_it_is_unsure_of() -> None:
    items = decisions(RECORDS)
    only_said = cut(items, 0.0)
    assert (only_said.abstained, only_said.abstained_right, only_said.unanswerable) == (1, 1, 3)
    p = cut(items, 0.7)  # declines i2 (0.3, answerable), i4, i5 and i6
    assert (p.abstained, p.abstained_right) == (4, 3)
    assert p.answered_answerable == 3 and p.answered_right == 2 and p.n == 7  # i3 has no confidence: answered
    assert p.precision.k == 3 and p.precision.n == 4 and p.recall.k == 3 and p.recall.n == 3
    assert p.coverage.k == 3 and p.coverage.n == 4
    assert p.accuracy.k == 5  # two right answers + three right abstentions


def test_best_point_at_recall_prefers_precision_and_says_when_recall_is_never_reached() -> None:
    items = decisions(RECORDS)
    best = best_at_recall(sweep(items), 0.6)
    # recall 2/3 is first reached at a cut-off in (0.2, 0.3] (i4 and i6 declined, nothing answerable): precision 1
    assert best is not None and (best.abstained, best.abstained_right) == (2, 2)
    assert any("met" in x for x in render({"w": items}, 0.5))
    # an unanswerable item with no confidence is never declined: recall 1/2 at most
    never = decisions([rec(0, True, 0.9, right=True), rec(1, False, None), rec(2, False, 0.4)])
    lines = render({"w": never}, 0.5)
    assert any("recall never reaches" in x and "missed" in x for x in lines)


def test_a_run_without_abstention_reads_its_final_correctness() -> None:
    d = decisions([ItemRecord.from_json({"id": "a", "question": "q", "answerable": True, "correct_final": True})])[0]
    assert d.answer_correct and d.confidence is None and not d.said_unanswerable


@given(st.lists(st.tuples(st.booleans(), st.one_of(st.none(), st.floats(0, 1)), st.booleans(), st.booleans()),
                min_size=1, max_size=30))
def test_recall_grows_with_the_cut_off(spec: list[tuple[bool, float | None, bool, bool]]) -> None:
    items = decisions([rec(i, a, c, right=r, said=s) for i, (a, c, r, s) in enumerate(spec)])
    points = sweep(items)
    rights = [p.abstained_right for p in sorted(points, key=lambda p: p.threshold)]
    assert rights == sorted(rights)
    assert all(p.abstained_right <= p.abstained and p.abstained_right <= p.unanswerable for p in points)


def test_a_cut_off_chosen_on_the_other_groups_is_applied_to_each() -> None:
    # group a: confident when right, unsure when unanswerable -> a cut-off near 0.5 works;
    # group b: the same shape shifted up -> the cut-off chosen on b is too high for a
    a = decisions([rec(0, True, 0.9, right=True), rec(1, False, 0.4), rec(2, False, 0.45)])
    b = decisions([rec(3, True, 0.99, right=True), rec(4, False, 0.8), rec(5, False, 0.85), rec(6, True, 0.95)])
    moved = leave_one_out({"a": a, "b": b})
    on_a, on_b = moved["a"], moved["b"]
    assert on_a is not None and on_b is not None
    assert on_a.threshold == pytest.approx(0.9)  # chosen on b: halfway between 0.85 (declined) and 0.95 (kept)
    assert (on_a.abstained, on_a.abstained_right) == (2, 2)
    assert on_b.threshold == pytest.approx(0.675)  # chosen on a: halfway between 0.45 and 0.9
    assert (on_b.abstained, on_b.abstained_right) == (0, 0)  # too low for b: nothing of b declined
    assert any("other warehouses" in x for x in render({"a": a, "b": b}, None, moved))
