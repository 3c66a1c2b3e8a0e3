"""The experiments' typed reports (``records.typed.Typed``): a field never given stays out of the
file (not ``null``), a ``null`` given is written and read back as given, ints stay ints, and a
report read back from its JSON is the report that was written."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nlq2sql.experiments.compact import ArmFigures, CompactResult, Comparison
from nlq2sql.experiments.compact import render_markdown as compact_md
from nlq2sql.experiments.loadcheck import Divergent, Identity, LoadCheck, Split, render_markdown
from nlq2sql.records.summary_parts import Percentiles
from nlq2sql.run.repeats import RepeatRow

NUMS = st.none() | st.integers(-1000, 1000) | st.floats(-1e6, 1e6, allow_nan=False)


def _as_written(data: dict[str, Any]) -> Any:
    return json.loads(json.dumps(data))


def _check(n: int = 2) -> LoadCheck:
    return LoadCheck(items=n, runs=[], identical_items=n, intent_divergent_items=0, divergent=[])


def test_an_unset_field_is_absent_and_a_given_null_is_written() -> None:
    missing = Divergent(id="a", reason="present in 1 of 2 runs")
    assert missing.to_json() == {"id": "a", "reason": "present in 1 of 2 runs"}
    empty = Divergent(id="b", first_run="r0", other_run="r1", first_diff_at=0, text_a=None, text_b="x",
                      intents_equal=False)
    assert empty.to_json()["text_a"] is None and "reason" not in empty.to_json()
    # The report tells the two apart by what was given, not by the value: a run with no text differs at byte 0.
    md = render_markdown(_check().model_copy(update={"divergent": [missing, empty]}))
    assert "- `a`: present in 1 of 2 runs" in md and "- `b` differs at byte 0" in md


def test_an_empty_split_leaves_the_report_without_its_keys() -> None:
    res = _check().with_split(Split())
    assert set(res.to_json()) == {"items", "runs", "identical_items", "intent_divergent_items", "divergent"}
    ident = Identity(items=2, runs=2, identical_items=2, intent_divergent_items=0, divergent_ids=[])
    res = _check().with_split(Split(across_levels_first_repeat=ident))
    assert "run_to_run" not in res.to_json() and res.to_json()["across_levels_first_repeat"]["runs"] == 2
    assert LoadCheck.from_json(_as_written(res.to_json())) == res


@given(NUMS, NUMS, NUMS)
def test_a_repeat_row_keeps_its_numbers_as_given(p50: Any, p95: Any, rps: Any) -> None:
    row = RepeatRow(run="r0", n=3, accuracy=0.5, raw_accuracy=None, latency_p50_s=p50, latency_p95_s=p95,
                    ttft_p50_s=None, req_per_s=rps)
    written = _as_written(row.to_json())
    for key, value in (("latency_p50_s", p50), ("latency_p95_s", p95), ("req_per_s", rps)):
        assert written[key] == value and type(written[key]) is type(value)
    assert RepeatRow.from_json(written) == row


_OPTIONAL = {"completion_tokens": st.just(Percentiles(n=2, mean=3, p50=3, p95=4, p99=4)),
             "completion_tokens_median": NUMS, "schema_valid": st.integers(0, 9), "tokens_per_char": NUMS,
             "note": st.text(max_size=5)}


@given(st.fixed_dictionaries({}, optional=_OPTIONAL))
def test_a_compact_report_reads_back_as_written(given_fields: dict[str, Any]) -> None:
    arm = ArmFigures(n=2, chars=Percentiles(n=0), **given_fields)
    res = CompactResult(arms={"pretty": arm}, comparisons={"prompt-compact": Comparison(
        honoured=1, ignored=0, backfired=1, tokens_saved_mean=None, predicted_saving_s=None, measured_saving_s=-1,
        itl_used_s=None)})
    written = _as_written(res.to_json())
    assert set(written["arms"]["pretty"]) == {"n", "chars", *given_fields}
    back = CompactResult.from_json(written)
    assert back.to_json() == written and compact_md(back) == compact_md(res)
