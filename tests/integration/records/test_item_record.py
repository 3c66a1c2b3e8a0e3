"""The typed item record (``records.item.ItemRecord``) is the flat record on disk.

Every committed ``records.jsonl`` is read through the type and written back: each line must come
out one JSON line equal to the committed one as parsed (every key and value with its JSON type;
key order is not compared).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from repo_paths import ROOT
from retail import RETAIL
from snapshot import assert_same_json

from nlq2sql.errors import RecordError
from nlq2sql.records.item import UNSCORED, ItemRecord, iter_item_records
from nlq2sql.records.store import LINE_VERSION, RecordWriter
from nlq2sql.stages.execute import Executor


def _committed() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*records.jsonl"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return [ROOT / p for p in out]


def _parsed_lines(text: str) -> list[object]:
    """A JSON-lines text as its parsed lines (each line one JSON value, ending in a newline)."""
    assert text.endswith("\n"), "the last line has no newline"
    return [json.loads(line) for line in text.splitlines()]


def test_every_committed_record_round_trips_as_parsed() -> None:
    files = _committed()
    assert files, "no committed records to guard"
    lines = 0
    for path in files:
        raw = path.read_text(encoding="utf-8").splitlines()
        recs = list(iter_item_records(path))
        assert len(recs) == len(raw), path
        for lineno, (line, rec) in enumerate(zip(raw, recs, strict=True), start=1):
            written = rec.to_line()
            assert written.endswith("\n") and "\n" not in written[:-1], f"{path}:{lineno}"
            assert_same_json(json.loads(written), json.loads(line), f"{path}:{lineno}")
            lines += 1
    assert lines >= 1000


def test_parts_hold_what_readers_ask() -> None:
    path = next(p for p in _committed() if "fleet" in p.parts)
    rec = next(iter_item_records(path))
    line = json.loads(path.read_bytes().splitlines()[0])
    assert rec.outcome == rec.request.outcome == line["outcome"] is not None
    assert rec.request.replica == line.get("replica") and rec.get("replica") == line.get("replica")
    assert rec.judgement is not None and rec.scored and rec.judgement.gold_intent is not None
    assert rec.answer.status in ("ok", "schema_invalid", "inconsistent", "invalid_json", "truncated", "request_error")
    v2 = next(iter_item_records(next(p for p in _committed() if p.parent.name == "adversarial-query")))
    assert v2.answer.answer == "query" and v2.judgement is not None and isinstance(v2.judgement.answerable, bool)
    traced = next(iter_item_records(next(p for p in _committed() if "logprob-abstain" in p.parent.name)))
    assert list(traced.traces)[:2] == ["example_ids", "linked_values"] and "abstained" in traced.traces


def test_an_unscored_record_has_no_judgement_and_the_gold_keys_null() -> None:
    rec = ItemRecord(id="q1", question="Revenue by region?")
    data = rec.to_json()
    assert not rec.scored and rec.judgement is None
    assert data["gold_intent"] is None and data["correct_final"] is None and data["guardrail_scope"] == []
    back = ItemRecord.from_json(json.loads(rec.to_line()))
    assert back.judgement is None and back == rec
    assert ItemRecord(id="q1", question="Revenue by region?", judgement=UNSCORED).to_line() == rec.to_line()


def test_key_order_is_not_read_and_an_absent_key_stays_absent() -> None:
    data = {"record_version": 1, "question": "q", "id": "a", "category": None, "pair_id": None, "status": "ok",
            "raw_text": None, "linked_values": []}
    rec = ItemRecord.from_json(data)
    assert rec == ItemRecord.from_json(dict(reversed(data.items())))
    written = json.loads(rec.to_line())
    assert written["raw_text"] is None and "final_status" not in written and rec.answer.final_status is None
    assert rec.traces == {"linked_values": []} and not rec.scored
    assert_same_json(written, data, "line")


@pytest.mark.parametrize(("line", "field"), [
    ({"record_version": 1, "question": "q"}, "id"),
    ({"record_version": 1, "id": "a", "question": "q", "correct_final": "yes"}, "correct_final"),
    ({"record_version": 1, "id": "a", "question": "q", "latency_s": "fast"}, "latency_s"),
])
def test_a_line_that_is_not_a_record_names_file_line_and_key(tmp_path: Path, line: dict[str, object],
                                                               field: str) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"record_version": 1, "id": "ok", "question": "q"}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(RecordError) as err:
        list(iter_item_records(path))
    assert err.value.line == 2 and err.value.field == field and str(path) in str(err.value)


def test_the_writer_writes_a_typed_record_as_its_line(tmp_path: Path) -> None:
    path = next(p for p in _committed() if "conditions" in p.parts)
    recs = list(iter_item_records(path))[:5]
    out = tmp_path / "records.jsonl"
    with RecordWriter(out) as writer:
        for rec in recs:
            writer.write(rec)
    want = _parsed_lines("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:5]))
    assert_same_json(_parsed_lines(out.read_text(encoding="utf-8")), want, out)


def test_a_scorers_dict_without_its_version_reads_and_takes_later_parts() -> None:
    """A scorer's record has no ``record_version`` (the writer adds it): read back, it has the current
    one, and the request keys set afterwards are written."""
    path = next(p for p in _committed() if "fleet" in p.parts)
    data = json.loads(path.read_bytes().splitlines()[0])
    core = {k: v for k, v in data.items() if k != "record_version" and k not in ("outcome", "concurrency")}
    rec = ItemRecord.from_json(core)
    assert rec.record_version == LINE_VERSION
    rec.request.outcome, rec.request.concurrency = data["outcome"], data["concurrency"]
    assert_same_json(json.loads(rec.to_line()), {**data, "record_version": LINE_VERSION}, path)


@pytest.mark.parametrize("answer", [
    {"intent": "top_n_by_metric", "metric": "revenue", "dimension": "region", "time_grain": None,
     "filters": [], "limit": 3, "order": "desc"},
    {"intent": "breakdown", "metric": "revenue", "dimension": "region", "time_grain": None, "filters": [],
     "limit": None, "order": None},
    "not json",
])
def test_one_builder_for_scored_and_unscored_items(executor: Executor, answer: object) -> None:
    """``intent_record`` makes both: the answer part is the same with or without a gold; without
    one the judgement is absent and the record has the scored record's keys, the gold's side null."""
    from nlq2sql.stages.evalset import EvalCase
    from nlq2sql.stages.intent import Intent
    from nlq2sql.stages.rulesets import load_guardrails
    from nlq2sql.stages.score import case_record, intent_record

    rules = load_guardrails(["ranking"])
    gold = Intent.model_validate({"intent": "breakdown", "metric": "revenue", "dimension": "region",
                                  "time_grain": None, "filters": [], "limit": None, "order": None})
    raw = answer if isinstance(answer, str) else json.dumps(answer)
    question = "Revenue by region"
    scored = intent_record("c1", question, raw, rules, executor, gold=gold, category="breakdown", catalog=RETAIL)
    unscored = intent_record("c1", question, raw, rules, executor, gold=None, catalog=RETAIL)
    assert scored.scored and not unscored.scored and unscored.judgement is None
    same = ("raw_text", "status", "final_status", "raw_intent", "final_intent", "sql", "params", "result_rows",
            "result_head")
    assert all(getattr(scored.answer, k) == getattr(unscored.answer, k) for k in same)
    flat = case_record(EvalCase(id="c1", question=question, gold=gold, category="breakdown"), raw, rules, executor,
                       catalog=RETAIL).to_json(version=False)
    bare = unscored.to_json(version=False)
    assert set(flat) == set(bare) and "record_version" not in flat  # (the writer puts the version first)
    assert bare["gold_intent"] is None and bare["correct_final"] is None and bare["guardrail_scope"] == []
    assert [iv["rule"] for iv in flat["interventions"]] == [iv["rule"] for iv in bare["interventions"]]
    assert all(isinstance(iv["correct"], bool) for iv in flat["interventions"])
    assert all(iv["correct"] is None for iv in bare["interventions"])
    if isinstance(answer, str):
        assert flat["correct_final"] is False and flat["status"] == bare["status"] != "ok"
    else:  # the ranking rule repairs the top-N answer to the gold's breakdown: right after the rules
        assert flat["correct_final"] is True and flat["correct_raw"] is (answer["intent"] == "breakdown")
        assert bool(bare["interventions"]) is (answer["intent"] != "breakdown")
    for rec in (scored, unscored):
        assert ItemRecord.from_json(json.loads(rec.to_line())).to_line() == rec.to_line()


def test_older_lines_keep_their_version_and_a_newer_one_is_refused(tmp_path: Path) -> None:
    old = {"record_version": 1, "id": "a", "question": "q", "category": None, "pair_id": None, "status": "ok"}
    rec = ItemRecord.from_json(old)
    assert rec.record_version == 1 < LINE_VERSION and json.loads(rec.to_line()) == old
    assert ItemRecord(id="b", question="q").record_version == LINE_VERSION
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({**old, "record_version": LINE_VERSION + 1}) + "\n")
    with pytest.raises(RecordError) as err:
        list(iter_item_records(path))
    assert err.value.field == "record_version" and err.value.line == 1 and "newer" in str(err.value)


_SCALARS = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8)
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                             max_size=3), max_leaves=8)


@given(answer=st.fixed_dictionaries({}, optional={
           "raw_text": st.none() | st.text(max_size=20), "status": st.text(max_size=8),
           "result_rows": st.none() | st.integers(0, 10**6), "result_head": st.none() | st.lists(st.lists(_JSON,
                                                                                                        max_size=3),
                                                                                               max_size=3),
           "sql_exec_s": st.none() | st.integers(0, 100) | st.floats(0, 100)}),
       request=st.fixed_dictionaries({}, optional={
           "latency_s": st.none() | st.floats(0, 1e4), "attempts": st.integers(0, 9),
           "retry_waits_s": st.lists(st.floats(0, 60), max_size=3), "replica": st.none() | st.text(max_size=4)}),
       traces=st.dictionaries(st.sampled_from(["votes", "linked_values", "abstained", "planner"]), _JSON, max_size=3),
       correct=st.sampled_from([None, True, False, "absent"]))
def test_a_line_reads_back_to_the_keys_it_had(answer: dict[str, object], request: dict[str, object],
                                              traces: dict[str, object], correct: object) -> None:
    """Whatever subset of keys a line has (null included), it is written back with exactly those keys
    and values, each with its JSON type (an int stays an int); an absent key reads as None."""
    line: dict[str, object] = {"record_version": LINE_VERSION, "id": "x", "question": "q", "category": None,
                               "pair_id": None, **answer, **request, **traces}
    if correct != "absent":
        line["correct_final"] = correct
    rec = ItemRecord.from_json(json.loads(json.dumps(line)))
    assert_same_json(json.loads(rec.to_line()), json.loads(json.dumps(line)), "line")
    assert rec.answer.status == answer.get("status") and rec.request.replica == request.get("replica")
    assert rec.traces == traces and rec.retries() == len(request.get("retry_waits_s") or ())  # type: ignore[arg-type]
