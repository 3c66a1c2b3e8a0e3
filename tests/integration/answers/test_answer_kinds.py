"""Answer kinds are registered plugins (``nlq2sql.answers.kinds``): a new kind is one class.

The kind declared below lives only in this module: its answer is the v2 query wrapped in an
envelope, ``{"query": {...}}``.  It goes through the request construction (prompt, structured
output) and the offline scorer (``nlq2sql score --answer envelope``) with nothing else changed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.answers.kinds import (
    KINDS,
    AnswerKind,
    StructuredRequest,
    answer_kind,
    bind_sampling,
    register,
    summary_fields,
)
from nlq2sql.cli.main import app
from nlq2sql.errors import InputError
from nlq2sql.records.item import ItemRecord
from nlq2sql.semantic import load_catalog
from nlq2sql.semantic.contract import PARTS, answer_schema
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.stages.query_score import query_record
from nlq2sql.stages.queryset import QueryCase
from nlq2sql.transport.client import Sampling, request_kwargs

CAT = load_catalog("retail")
GOLD = {"metrics": ["revenue", "orders"], "group_by": ["customer_id__region"]}
TOP = {"metrics": ["units"], "group_by": ["product_id__category"],
       "order_by": [{"field": "units", "descending": True}], "limit": 2}
runner = CliRunner()


class EnvelopeKind(AnswerKind):
    """A v2 query inside ``{"query": …}``: scored by the query's rows, under its own schema."""

    name = "envelope"
    help = "a v2 query inside {\"query\": …}"
    form = "envelope"
    case_type = QueryCase
    prompt = "query"
    summary_fields = PARTS

    @classmethod
    def structured(cls, catalog: Any, schema_mode: str, values: Any = (), grammar: str | None = None
                   ) -> StructuredRequest:
        inner = answer_schema(catalog, schema_mode, values=values)
        schema = {"type": "object", "properties": {"query": inner}, "required": ["query"],
                  "additionalProperties": False}
        return StructuredRequest(schema_json=json.dumps(schema, separators=(",", ":")))

    @classmethod
    def record(cls, case: Any, raw_text: str | None, executor: Any, catalog: Any, *,
               rulesets: Sequence[Any] = (), sandbox: Any = None, finish_reason: str | None = None,
               request_error: str | None = None) -> ItemRecord:
        inner = raw_text
        try:
            obj = json.loads(raw_text or "")
            if isinstance(obj, dict) and "query" in obj:
                inner = json.dumps(obj["query"])
        except ValueError:
            pass  # not JSON: the query scorer records it as such
        rec = query_record(case, inner, executor, catalog, finish_reason=finish_reason,
                           request_error=request_error, rulesets=rulesets)
        rec.answer.answer, rec.answer.raw_text = cls.name, raw_text
        return rec


@pytest.fixture
def envelope() -> Iterator[type[AnswerKind]]:
    register(EnvelopeKind)
    try:
        yield EnvelopeKind
    finally:
        KINDS.remove(EnvelopeKind.name)


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_the_built_in_kinds_are_registered_in_cli_order() -> None:
    assert KINDS.names()[:4] == ("intent", "query", "sql", "sql-grammar")
    assert answer_kind(None) is KINDS["intent"]  # a run that recorded no answer is a v1 intent run
    assert all(k.help for k in KINDS) and "sql-grammar" in KINDS.help()


def test_an_unknown_kind_is_an_input_error_naming_the_known_ones() -> None:
    with pytest.raises(InputError) as exc:
        KINDS["sqll"]
    msg = str(exc.value)
    assert "unknown answer kind 'sqll'" in msg and "intent, query, sql, sql-grammar" in msg
    assert "did you mean 'sql'" in msg and exc.value.field == "--answer"
    with pytest.raises(InputError) as far:
        KINDS["zzzzzz"]
    assert "did you mean" not in str(far.value)


def test_a_kind_registers_once_and_unregisters(envelope: type[AnswerKind]) -> None:
    assert KINDS["envelope"] is envelope and "envelope" in KINDS.names()
    with pytest.raises(ValueError, match="registered twice"):
        register(EnvelopeKind)


def test_the_cli_refuses_an_unknown_kind_with_the_registry_s_names(tmp_path: Path) -> None:
    res = runner.invoke(app, ["score", "--answer", "nope", "--evalset", "x", "--responses", "y",
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "intent, query, sql, sql-grammar" in " ".join(res.output.split())


@pytest.mark.parametrize("name", ["intent", "query", "sql", "sql-grammar"])
def test_every_kind_s_structured_payload_round_trips(name: str) -> None:
    kind = KINDS[name]
    grammar = 'root ::= "SELECT 1"' if name == "sql-grammar" else None
    part = kind.structured(CAT, "flat", grammar=grammar)
    assert StructuredRequest.from_json(part.to_json()) == part  # plain data: JSON and back
    bound = bind_sampling(Sampling(), CAT, name, grammar=grammar)
    for field, value in part.changes().items():  # the transport's sampling carries exactly the part
        assert getattr(bound, field) == value, field
    assert bound.structured == kind.constraint_mode("json")
    if part.schema_json is not None:
        assert request_kwargs("m", [], bound)["extra_body"]["structured_outputs"]["json"] == \
            json.loads(part.schema_json)


@settings(max_examples=30, deadline=None)
@given(structured=st.sampled_from(["json", "none"]) | st.none(), schema=st.text() | st.none(),
       grammar=st.text() | st.none(), keep=st.booleans())
def test_a_structured_request_round_trips_through_json(structured: str | None, schema: str | None,
                                                      grammar: str | None, keep: bool) -> None:
    part = StructuredRequest(structured=structured, schema_json=schema, grammar=grammar, keep_grammar=keep)
    assert StructuredRequest.from_json(part.to_json()) == part
    changed = dataclasses.replace(Sampling(grammar="g0"), **part.changes())
    assert changed.schema_json == schema
    assert changed.grammar == ("g0" if keep else grammar)
    assert changed.structured == (structured or "json")


def test_a_new_kind_builds_its_own_request(envelope: type[AnswerKind]) -> None:
    wh = retail_wh()
    prompt = load_prompt(envelope.prompt, "default", wh)
    bound = bind_sampling(Sampling(), wh, "envelope")
    body = request_kwargs("m", prompt.messages("Revenue by region"), bound)
    schema = body["extra_body"]["structured_outputs"]["json"]
    assert schema["required"] == ["query"] and "customer_id__region" in json.dumps(schema["properties"]["query"])
    assert body["messages"][-1]["content"] == "Revenue by region"
    assert bound.recorded().schema_text == bound.schema_json  # what the manifest records is what was sent


def test_a_new_kind_is_scored_offline_by_the_cli(tmp_path: Path, envelope: type[AnswerKind]) -> None:
    qs = _write(tmp_path / "v2.jsonl", [
        {"id": "a", "question": "Revenue and orders by region", "gold": GOLD, "answerable": True,
         "category": "breakdown"},
        {"id": "b", "question": "Top 2 categories by units", "gold": TOP, "category": "top_n"},
        {"id": "c", "question": "Gross margin by supplier?", "gold": None, "answerable": False,
         "category": "unanswerable"}])
    responses = _write(tmp_path / "resp.jsonl", [
        {"id": "a", "text": json.dumps({"query": GOLD})},
        {"id": "b", "text": json.dumps({"query": {**TOP, "limit": 3}})},
        {"id": "c", "text": json.dumps({"query": {"unanswerable": "no cost data"}})}])
    res = runner.invoke(app, ["score", "--answer", "envelope", "--evalset", str(qs), "--responses", str(responses),
                              "--out", str(tmp_path / "run"), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    recs = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert summary["answer"] == manifest["answer"] == "envelope"
    assert summary["n"] == 3 and summary["final_accuracy"]["k"] == 2
    assert set(summary["field_accuracy"]) == set(PARTS)  # the kind's declared fields
    assert [r["error_final"] for r in recs] == [None, "wrong_limit", None]
    assert all(r["answer"] == "envelope" and r["raw_text"].startswith('{"query"') for r in recs)
    assert "search_path" not in manifest  # the kind writes no SQL
    assert summary_fields("envelope") == PARTS and summary_fields("envelope", gold_sql=True) == ()
    # the kind takes guardrails when named (AnswerKind's default), as the v2 query does
    res = runner.invoke(app, ["score", "--answer", "envelope", "--evalset", str(qs), "--responses", str(responses),
                              "--out", str(tmp_path / "run2"), "--guardrails", "ranking"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "run2" / "manifest.json").read_text())["guardrails"] == ["ranking"]


def test_a_response_file_of_another_kind_is_refused_by_the_kind_s_form(tmp_path: Path,
                                                                        envelope: type[AnswerKind]) -> None:
    qs = _write(tmp_path / "v2.jsonl", [{"id": "a", "question": "q", "gold": GOLD, "category": "breakdown"}])
    responses = _write(tmp_path / "resp.jsonl", [{"id": "a", "text": "SELECT 1"}])
    res = runner.invoke(app, ["score", "--answer", "envelope", "--evalset", str(qs), "--responses", str(responses),
                              "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "pass --answer sql" in res.output and not (tmp_path / "run").exists()
