"""Eval sets: the shipped sets load; every kind of bad input names file, line and field."""

from __future__ import annotations

import gc
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from retail import RETAIL, retail_wh

from nlq2sql.errors import MAX_PROBLEMS, EvalSetError, EvalSetProblems
from nlq2sql.inputs import reusable_rest, split_id
from nlq2sql.stages.evalset import CATEGORY, EVALSET_DIR, _lines, index_evalset, load_evalset, resolve_path
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.intent import canonicalise
from nlq2sql.stages.sqlbuild import build_sql

GOLD: dict[str, Any] = {"intent": "breakdown", "metric": "revenue", "dimension": "region",
                        "time_grain": None, "filters": [], "limit": None, "order": None}


def line(**over: Any) -> str:
    obj = {"id": "x1", "question": "revenue by region", "gold": GOLD, "category": "breakdown", **over}
    return json.dumps({k: v for k, v in obj.items() if v is not ...})


OK1, OK2 = line(id="a1"), line(id="a2")


@pytest.mark.parametrize("name, size", [("dev", 20), ("heldout", 60), ("adversarial", 24)])
def test_shipped_sets_load_and_execute(name: str, size: int, executor: Executor) -> None:
    es = load_evalset(name, retail_wh())
    assert es.name == name and len(es.cases) == size
    assert es.sha256 == hashlib.sha256(Path(es.path).read_bytes()).hexdigest()
    assert all(CATEGORY.match(c.category) for c in es.cases)
    assert len(es.by_id()) == size
    for c in es.cases:
        assert executor.run(build_sql(canonicalise(c.gold), RETAIL)), c.id


def test_heldout_pairs_contrast_breakdown_and_top_n() -> None:
    pairs: dict[str, set[str]] = {}
    for c in load_evalset("heldout", retail_wh()).cases:
        if c.pair_id:
            pairs.setdefault(c.pair_id, set()).add(c.gold.intent)
    assert pairs and all(v == {"breakdown", "top_n_by_metric"} for v in pairs.values())


def test_load_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(OK1 + "\n" + OK2 + "\n")
    es = load_evalset(str(path), retail_wh())
    assert es.name == "mine" and [c.id for c in es.cases] == ["a1", "a2"]
    assert resolve_path("heldout", "retail") == EVALSET_DIR / "heldout.jsonl"


# (title, file text, line number or None, field or None, message fragment)
BAD: list[tuple[str, str, int | None, str | None, str]] = [
    ("malformed JSON line", OK1 + "\n{\"id\": \"a2\",\n", 2, None, "malformed JSON"),
    ("empty line", OK1 + "\n\n" + OK2 + "\n", 2, None, "empty line"),
    ("whitespace-only line", OK1 + "\n   \n", 2, None, "empty line"),
    ("missing id", OK1 + "\n" + line(id=...) + "\n", 2, "id", "Field required"),
    ("empty id", line(id="") + "\n", 1, "id", "at least 1 character"),
    ("duplicate id", OK1 + "\n" + OK2 + "\n" + OK1 + "\n", 3, "id", "first on line 1"),
    ("wrong type: question", line(question=5) + "\n", 1, "question", "string"),
    ("wrong type: tags", line(tags="a") + "\n", 1, "tags", "tuple"),
    ("unknown key", line(difficulty="hard") + "\n", 1, "difficulty", "Extra inputs"),
    ("unknown enum value in gold", line(gold={**GOLD, "metric": "profit"}) + "\n", 1, "gold.metric",
     "'revenue'"),
    ("gold limit out of bounds", line(gold={**GOLD, "limit": 0}) + "\n", 1, "gold.limit",
     "greater than or equal to 1"),
    ("gold missing key", line(gold={k: v for k, v in GOLD.items() if k != "order"}) + "\n", 1,
     "gold.order", "Field required"),
    ("inconsistent gold", line(gold={**GOLD, "time_grain": "month"}) + "\n", 1, "gold",
     "inconsistent gold intent: time_grain must be null for breakdown"),
    ("unknown filter value", OK1 + "\n" + line(id="a2", gold={**GOLD, "filters": [
        {"field": "year", "op": "eq", "value": "2025"},
        {"field": "region", "op": "eq", "value": "Atlantis"}]}) + "\n", 2, "gold.filters.1.value",
     "'Atlantis' is not a known region in warehouse 'retail'"),
    ("unknown filter field", line(gold={**GOLD, "filters": [{"field": "city", "op": "eq", "value": "x"}]})
     + "\n", 1, "gold.filters.0.field", "'region'"),
    ("category not a short label", line(category="pie chart!") + "\n", 1, "category",
     "category 'pie chart!' must be a short label"),
    ("unknown metric", line(gold={**GOLD, "metric": "profit"}) + "\n", 1, "gold.metric", "unknown metric 'profit'"),
    ("unknown dimension", line(gold={**GOLD, "dimension": "city"}) + "\n", 1, "gold.dimension",
     "unknown dimension 'city'"),
    ("not-an-object line", OK1 + "\n[1, 2]\n", 2, None, "must be a JSON object"),
    ("JSON string line", '"hello"\n', 1, None, "must be a JSON object"),
    ("empty file", "", None, None, "eval set is empty"),
    # Lines equal but for the id reuse the first one's case: the id is still checked as a whole line's is.
    ("repeated line, id too long", OK1 + "\n" + line(id="x" * 129) + "\n", 2, "id", "at most 128 characters"),
    ("repeated line, empty id", OK1 + "\n" + line(id="") + "\n", 2, "id", "at least 1 character"),
    ("repeated line, id overridden by a later key", OK1 + "\n" + OK2[:-1] + ', "id": "a1"}\n', 2, "id",
     "duplicate id 'a1' (first on line 1)"),
    ("repeated line, both ids overridden", OK1[:-1] + ', "id": "z"}\n' + OK2[:-1] + ', "id": "z"}\n', 2, "id",
     "duplicate id 'z' (first on line 1)"),
]


@pytest.mark.parametrize("load", [load_evalset, index_evalset])
@pytest.mark.parametrize("title, text, lineno, field, fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_file_line_and_field(tmp_path: Path, title: str, text: str, lineno: int | None,
                                             field: str | None, fragment: str, load: Any) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(EvalSetError) as exc:
        load(str(path), retail_wh())
    msg = str(exc.value)
    assert (exc.value.path, exc.value.line, exc.value.field) == (str(path), lineno, field)
    where = str(path) + (f":{lineno}" if lineno is not None else "")
    assert msg.startswith(where), msg
    if field is not None:
        assert f"{where}: field '{field}': " in msg
    assert fragment in msg


def test_bad_input_catalogue_is_broad() -> None:
    assert len(BAD) >= 12


def test_every_problem_of_a_file_at_once(tmp_path: Path) -> None:
    """Three bad lines (schema, unknown name, wrong-case value) among good ones: all three in one
    error, each with its line and field, in file order."""
    path = tmp_path / "three.jsonl"
    path.write_text("\n".join([OK1, line(id="b2", question=5), line(id="b3", gold={**GOLD, "metric": "revenu"}),
                               line(id="b4", gold={**GOLD, "filters": [{"field": "region", "op": "eq",
                                                                        "value": "west"}]}), OK2]) + "\n")
    with pytest.raises(EvalSetProblems) as exc:
        load_evalset(str(path), retail_wh())
    found = [(p.line, p.field) for p in exc.value.problems]
    assert found == [(2, "question"), (3, "gold.metric"), (4, "gold.filters.0.value")]
    text = str(exc.value)
    assert "closest: 'revenue'" in text
    assert "the data spells it 'West'" in text
    with pytest.raises(EvalSetProblems) as again:  # the offline index reads the same way
        index_evalset(str(path), retail_wh())
    assert [(p.line, p.field) for p in again.value.problems] == found


def test_many_problems_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text("".join(line(id=f"x{i}", question=5) + "\n" for i in range(MAX_PROBLEMS + 7)))
    with pytest.raises(EvalSetProblems) as exc:
        load_evalset(str(path), RETAIL)
    assert len(exc.value.problems) == MAX_PROBLEMS + 1
    assert "and 7 more problem(s) not shown" in str(exc.value.problems[-1])


def test_a_duplicate_after_bad_lines_names_the_first_line(tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    path.write_text("\n".join(["{", line(id="a1", question=5), OK1, OK2, OK1]) + "\n")
    for load in (load_evalset, index_evalset):
        with pytest.raises(EvalSetProblems) as exc:
            load(str(path), RETAIL)
        assert str(exc.value.problems[-1]).endswith("duplicate id 'a1' (first on line 3)"), load


def test_a_v2_file_under_intent_suggests_answer_query() -> None:
    with pytest.raises(EvalSetError) as exc:
        load_evalset("heldout-v2", RETAIL)
    msg = str(exc.value)
    assert "holds v2 golds" in msg and "--answer query" in msg and "gold.intent" not in msg


def test_a_v2_line_in_a_v1_file_says_which_reader(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    v2 = {"id": "q2", "question": "q", "gold": {"metrics": ["revenue"]}, "answerable": True}
    path.write_text(OK1 + "\n" + json.dumps(v2) + "\n")
    with pytest.raises(EvalSetError) as exc:
        load_evalset(str(path), RETAIL)
    assert (exc.value.line, exc.value.field) == (2, "gold") and "--answer query" in str(exc.value)


@pytest.mark.parametrize("gold, category", [
    (GOLD, "breakdown"),
    ({**GOLD, "intent": "top_n_by_metric", "limit": 3, "order": "desc"}, "top_n"),
    ({**GOLD, "intent": "time_series", "dimension": None, "time_grain": "month"}, "time_series"),
])
def test_category_is_derived_from_the_gold_when_absent(tmp_path: Path, gold: dict[str, Any], category: str) -> None:
    path = tmp_path / "nocat.jsonl"
    path.write_text(line(gold=gold, category=...) + "\n" + line(id="x2", gold=gold, category=None) + "\n")
    es = load_evalset(str(path), RETAIL)
    assert [c.category for c in es.cases] == [category, category]
    path.write_text(line(gold=gold, category="mine") + "\n")
    assert load_evalset(str(path), RETAIL).cases[0].category == "mine"


def test_unknown_name_lists_shipped_sets() -> None:
    with pytest.raises(EvalSetError) as exc:
        load_evalset("nope", retail_wh())
    assert "no eval set named 'nope' for warehouse 'retail'" in str(exc.value)
    assert "(shipped: adversarial, dev, heldout, heldout-v2, unanswerable)" in str(exc.value)


def test_missing_file_names_path(tmp_path: Path) -> None:
    path = tmp_path / "missing.jsonl"
    with pytest.raises(EvalSetError) as exc:
        load_evalset(str(path), retail_wh())
    assert str(exc.value).startswith(f"{path}: cannot read")


@settings(max_examples=300, deadline=None)
@given(data=st.lists(st.sampled_from([b"a", b"{", b"\n", b"\r", b"\r\n", b"\xe2\x80\xa8", b"\xc2\x85",
                                      b"\x0b", b"\x1c", b"\xff", b"\xe2\x80", b" ", b"\xc3\xa9"]),
                     max_size=30).map(b"".join))
def test_streamed_lines_equal_whole_file_splitlines(data: bytes) -> None:
    """UTF-8: exactly ``data.decode().splitlines()``; otherwise refused (never replaced) at the
    first byte that is not UTF-8, with its line and byte offset."""
    digest = hashlib.sha256()
    try:
        expected = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = len((data[:exc.start].decode("utf-8") + "x").splitlines())
        with pytest.raises(EvalSetError, match=f"^f:{line}: not UTF-8: byte 0x{data[exc.start]:02x} at "
                                               f"byte offset {exc.start} "):
            list(_lines(io.BytesIO(data), digest, "f"))
        return
    assert list(_lines(io.BytesIO(data), digest)) == expected
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()


def test_crlf_file_and_gc_state(tmp_path: Path) -> None:
    path = tmp_path / "crlf.jsonl"
    path.write_bytes((OK1 + "\r\n" + OK2 + "\r\n").encode())
    assert gc.isenabled()
    assert [c.id for c in load_evalset(str(path), retail_wh()).cases] == ["a1", "a2"]
    assert gc.isenabled(), "the collector is re-enabled after loading"
    path.write_bytes((OK1 + "\n{oops\n").encode())
    with pytest.raises(EvalSetError):
        load_evalset(str(path), retail_wh())
    assert gc.isenabled(), "... and after a failed load"
    gc.disable()
    try:
        load_evalset("dev", retail_wh())
        assert not gc.isenabled(), "a disabled collector stays disabled"
    finally:
        gc.enable()


# ---------------------------------------------------------------- lines equal but for the id


def test_split_id_takes_only_a_plain_leading_id() -> None:
    assert split_id('{"id": "a-1", "q": 1}') == ("a-1", ', "q": 1}')
    assert split_id(r'{ "id" :"\u00e9x"}') is None  # escaped: the text is not the id
    assert split_id('{ "id" :"\u00e9x"}') == ("\u00e9x", "}")
    for text in ('{"q": 1, "id": "a"}', ' {"id": "a"}', '{"id": 5}', '{"id": "a\\"b"}', '{"id": "a\tb"}'):
        assert split_id(text) is None, text
    assert reusable_rest(', "q": "identity", "r": {"field": "x"}}')
    assert not reusable_rest(', "q": "id"}')  # cautious: "id" as a value is only a missed reuse
    for rest in (', "id": "b"}', ', "\\u0069d": "b"}', ', "i\\u0064": "b"}', ', "\\u0069\\u0064": "b"}'):
        assert json.loads('{"id": "a"' + rest)["id"] == "b" and not reusable_rest(rest), rest


def test_index_equals_load(tmp_path: Path) -> None:
    """Same cases, same order, same digest; equal lines share one case object."""
    path = tmp_path / "repeats.jsonl"
    lines = [line(id=f"r{i}", question=f"revenue by region {i % 3}") for i in range(9)]
    lines[4] = json.dumps({"question": "revenue by region 1", "id": "r4", "gold": GOLD, "category": "breakdown"})
    lines[5] = line(id="r5", question="revenue by region 2")[:-1] + ', "id": "r5b"}'
    lines[7] = line(id="r\u00e9", question="revenue by region 1", tags=["\u2713"])
    path.write_text("\n".join(lines) + "\n")
    es, ix = load_evalset(str(path), retail_wh()), index_evalset(str(path), retail_wh())
    assert (ix.name, ix.path, ix.sha256) == (es.name, es.path, es.sha256)
    assert list(ix.ids) == [c.id for c in es.cases] and "r5b" in ix.ids
    assert list(ix.ids.values()) == list(range(len(es.cases)))
    assert [ix.case(c.id) for c in es.cases] == list(es.cases)
    assert ix.shared[3] is ix.shared[0] and ix.shared[6] is ix.shared[0] and ix.shared[3].id == "r0"
    assert es.cases[3].gold is es.cases[0].gold and es.cases[3].question is es.cases[0].question
