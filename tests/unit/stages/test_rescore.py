"""Offline re-scoring at scale: remembered records, shared summaries and repeated lines change
no byte of any record and no summary figure (against scoring every item on its own)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from retail import RETAIL, retail_wh

from nlq2sql.answers.offline import score_responses
from nlq2sql.errors import ExecutionError, InputError
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.store import RecordWriter
from nlq2sql.stages import summary
from nlq2sql.stages.evalset import EvalCase, load_evalset
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.pipeline import ScoreConfig, as_missing, read_responses
from nlq2sql.stages.rescore import RecordMemo
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.stages.score import case_record
from nlq2sql.stages.sqlbuild import Query
from nlq2sql.stages.summary import Summary

RANKING = load_guardrails(["ranking"])


def scored(*args: Any, **kw: Any) -> dict[str, Any]:
    """An item's record line as ``case_record`` builds it (without the version)."""
    return case_record(*args, **kw).to_json(version=False)


def answers(gold: dict[str, Any]) -> list[tuple[str | None, str | None]]:
    """(raw text, finish reason): repeats, one meaning in several texts, failures of each kind."""
    compact = json.dumps(gold, separators=(",", ":"))
    ranked = {**gold, "intent": "top_n_by_metric", "limit": 10, "order": "desc"}
    return [(compact, "stop"), (json.dumps(gold, indent=2), "stop"), (compact + " ", "stop"), (compact, None),
            (compact[:20], "length"), (compact[:20], "stop"), (compact[:21], "stop"), ("", "stop"), (None, "stop"),
            (json.dumps(ranked), "stop"), (json.dumps({**ranked, "limit": 10.0}), "stop"),
            (json.dumps({**gold, "metric": "profit"}), "stop"), (json.dumps({**gold, "limit": 0}), "stop"),
            (json.dumps({**gold, "time_grain": "month"}), "stop"), ("[1]", "stop"), (compact, "stop")]


def items() -> list[tuple[EvalCase, str | None, str | None]]:
    """Held-out cases, each under several ids (sharing one gold intent, as an index shares it)."""
    out = []
    for n, case in enumerate(load_evalset("heldout", retail_wh()).cases[:12]):
        for k, (text, finish) in enumerate(answers(case.gold.model_dump(mode="json"))):
            copy = case.model_copy(update={"id": f"{case.id}-{k}"}) if (n + k) % 2 else case
            out.append((copy, text, finish))
    return out


def test_remembered_records_are_the_records(tmp_path: Path, executor: Executor) -> None:
    """Each line written from a RecordMemo equals case_record's record line for that item, byte for byte."""
    with RecordWriter(tmp_path / "each.jsonl") as each, RecordWriter(tmp_path / "memo.jsonl") as mem:
        memo = RecordMemo(RANKING, executor, RETAIL, mem)
        for case, text, finish in items() * 2:
            each.write(scored(case, text, RANKING, executor, finish_reason=finish, catalog=RETAIL))
            memo.write(case.id, case, text, finish)
    assert (tmp_path / "each.jsonl").read_bytes() == (tmp_path / "memo.jsonl").read_bytes()
    assert 0 < len(memo._by_meaning) < len(memo._by_text) < len(items())


class FlakyExecutor:
    """The shared executor, but a predicted query fails once (as a timeout may)."""

    def __init__(self, inner: Executor, fail: Query) -> None:
        self.inner, self.fail = inner, fail

    def run(self, query: Query) -> list[Any]:
        if query == self.fail:
            self.fail = Query("", ())
            raise ExecutionError("query exceeded 10s timeout")
        return self.inner.run(query)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_failed_query_is_not_remembered(tmp_path: Path, executor: Executor) -> None:
    case, text, _ = items()[9]  # a false ranking: its query is not the gold query
    rec = scored(case, text, [], executor, catalog=RETAIL)
    flaky = FlakyExecutor(executor, Query(rec["sql"], tuple(rec["params"])))
    with RecordWriter(tmp_path / "r.jsonl") as w:
        memo = RecordMemo([], flaky, RETAIL, w)  # type: ignore[arg-type]
        assert memo.write("a", case, text, "stop").answer.exec_error == "query exceeded 10s timeout"
        assert memo.write("b", case, text, "stop").answer.exec_error is None


@pytest.mark.parametrize("pending_max", [1, 3, 4096])
def test_shared_adds_give_the_same_summary(executor: Executor, monkeypatch: pytest.MonkeyPatch,
                                           pending_max: int) -> None:
    """Figures and the order of every table's keys, whatever the flushes; timings keep their order."""
    monkeypatch.setattr(summary, "PENDING_MAX", pending_max)
    recs = [scored(case, text, RANKING, executor, finish_reason=finish, catalog=RETAIL)
            for case, text, finish in items()]
    recs[5] = {**recs[5], "latency_s": 0.25}
    recs[30] = {**recs[30], "latency_s": 0.5, "ttft_s": 0.1}
    order = [recs[i % len(recs)] for i in (7, 3, 3, 100, 7, 5, 30, 3, 41, 5, *range(len(recs)), 7, 30)]
    typed = {id(r): ItemRecord.from_json(r) for r in recs}  # each distinct record passed again as the same object
    one, shared = Summary(RANKING), Summary(RANKING)
    for rec in order:
        one.add(ItemRecord.from_json(rec))
        shared.add_shared(typed[id(rec)])
    assert json.dumps(shared.result().to_json()) == json.dumps(one.result().to_json())
    assert shared.n == one.n and shared.field_ok == one.field_ok


def _files(tmp_path: Path) -> tuple[Path, Path, list[dict[str, Any]]]:
    """An eval set of repeated lines and a responses file of repeated answers, in another order,
    with lines that must not be reused (escaped id, a second "id" key) and items left out."""
    cases = [c.model_dump(mode="json") for c in load_evalset("heldout", retail_wh()).cases[:6]]
    es_lines, rs = [], []
    for i in range(60):
        case = {**cases[i % 6], "id": f"x{i}"}
        es_lines.append(json.dumps(case, ensure_ascii=i != 13).replace('"x13"', '"\\u0078\\u00e913"'))
        text, finish = answers(case["gold"])[i // 6 % 8]
        rs.append({"id": "x\u00e913" if i == 13 else f"x{i}", "text": text, "finish_reason": finish})
    rs = [r for i, r in enumerate(rs) if i % 11 != 4]
    rs.reverse()
    lines = [json.dumps(r) for r in rs]
    lines[3] = lines[3][:-1] + f', "id": "{rs[3]["id"]}"}}'  # a second id key (the same id)
    es_path, rs_path = tmp_path / "es.jsonl", tmp_path / "rs.jsonl"
    es_path.write_text("\n".join(es_lines) + "\n")
    rs_path.write_text("\n".join(lines) + "\n")
    return es_path, rs_path, rs


def test_score_responses_equals_scoring_each_item(tmp_path: Path, executor: Executor) -> None:
    """End to end: records byte for byte, and every summary figure, as scoring item by item."""
    es_path, rs_path, rs = _files(tmp_path)
    summary = score_responses(ScoreConfig(str(es_path), rs_path, tmp_path / "run", allow_missing=True)).to_json()
    es = load_evalset(str(es_path), retail_wh())
    cases = es.by_id()
    summ = Summary(RANKING)
    with RecordWriter(tmp_path / "expected.jsonl") as w:
        for r in rs:
            rec = scored(cases[r["id"]], r["text"], RANKING, executor, finish_reason=r["finish_reason"],
                         catalog=RETAIL)
            w.write(rec)
            summ.add(ItemRecord.from_json(rec))
        answered = {r["id"] for r in rs}
        for case in es.cases:
            if case.id not in answered:
                rec = as_missing(case_record(case, None, RANKING, executor, request_error="no response in file",
                                             catalog=RETAIL))
                w.write(rec)
                summ.add(rec)
    assert (tmp_path / "run" / "records.jsonl").read_bytes() == (tmp_path / "expected.jsonl").read_bytes()
    expected = summ.result().to_json()
    assert {k: summary[k] for k in expected} == expected
    assert summary["missing"]["n"] == 60 - len(rs) > 0


def test_repeated_response_lines_keep_every_check(tmp_path: Path) -> None:
    """A line that repeats an earlier one but for its id still has its id checked, in order."""
    known = {"a": 0, "b": 1, "c": 2}
    first = '{"id": "a", "text": "{}", "finish_reason": "stop"}'
    for bad, message in ((first, "duplicate id 'a'"), (first.replace('"a"', '"zz"'), "unknown id 'zz'"),
                         (first.replace('"a"', '""'), "missing or non-string id"),
                         (first[:-1] + ', "id": "a"}', "duplicate id 'a'")):
        path = tmp_path / "rs.jsonl"
        path.write_text(first + "\n" + bad + "\n")
        with pytest.raises(InputError, match=f"^{path}:2: .*{message}"):
            list(read_responses(path, known))
    override = first[:-1] + ', "id": "c"}'  # the last "id" wins: the line's id is "c", however it starts
    path.write_text(override + "\n" + override.replace('"a"', '"b"', 1) + "\n")
    with pytest.raises(InputError, match=f"^{path}:2: .*duplicate id 'c'"):
        list(read_responses(path, known))
    path.write_text(first + "\n" + first.replace('"a"', '"b"') + "\n" + override.replace('"a"', '"b"', 1) + "\n")
    got = [(r.id, r.text, r.finish_reason) for r in read_responses(path, known)]
    assert got == [("a", "{}", "stop"), ("b", "{}", "stop"), ("c", "{}", "stop")]
