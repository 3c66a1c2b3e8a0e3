"""Conditions as registered plugins (nlq2sql.conditions.registry).

The point of the registry is that a condition is one module: here a trivial one is declared in
this test module only — no package file names it — registered, and run on the fake server in
one process and in worker processes; its prompt change reaches the server and its traces (declared
as types: :class:`NoteTrace`, :class:`NoteAfter`) reach the records and the manifest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, script
from pydantic import Field

from nlq2sql.conditions.registry import REGISTRY, Condition, ConditionSet, Messages, Settings
from nlq2sql.conditions.trace import Trace
from nlq2sql.errors import InputError, RecordError
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.manifest_parts import Part
from nlq2sql.records.store import RECORDS, iter_records
from nlq2sql.records.typed import Typed
from nlq2sql.run.config import EvalConfig, LoadShape, validate
from nlq2sql.run.live import run_eval
from nlq2sql.transport.stream import Completion

MODEL = "fake-model"
SENTENCE = " Answer with the intent only."


class NoteSettings(Settings):
    note: str = Field("", description="A fixed sentence appended to the system prompt (test only).")


class NoteTrace(Trace):
    """What ``before`` records per item."""

    note_chars: int


class Outcome(Typed):
    outcome: str
    scored: bool


class NoteAfter(Trace):
    """What ``after`` adds over the scored record."""

    note_after: Outcome


class Note(Condition[NoteSettings]):
    """Appends a sentence to the system prompt; records its length per item, and after scoring
    whether the item was answered."""

    name = "note"
    settings_model = NoteSettings
    answers = frozenset({"intent", "query"})
    conflicts = ("planner",)
    manifest_keys = ("note_sentence",)
    label_rank = 5.0
    trace = NoteTrace

    def manifest(self) -> Part:
        return self.manifest_part().model_validate(
            {"note_sentence": {"sha256": hashlib.sha256(self.settings.note.encode()).hexdigest()} if self.on else None})

    @classmethod
    def label(cls, manifest: Mapping[str, Any]) -> str | None:
        return "note" if manifest.get("note_sentence") else None

    def before(self, question: str, messages: Messages) -> tuple[Messages, NoteTrace]:
        note = [{**messages[0], "content": messages[0]["content"] + self.settings.note}, *messages[1:]]
        return note, NoteTrace(note_chars=len(self.settings.note))

    def after(self, rec: ItemRecord, comp: Completion, scored: bool) -> None:
        rec.merge(NoteAfter(note_after=Outcome(outcome=comp.outcome, scored=scored)))


@pytest.fixture
def note() -> Iterator[type[Note]]:
    REGISTRY.add(Note)
    try:
        yield Note
    finally:
        REGISTRY.remove(Note.name)


def system_sha(sentence: str) -> str:
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.prompt import load_prompt

    system = load_prompt("baseline", "default", open_warehouse("retail")).messages("q")[0]["content"]
    return hashlib.sha256((system + sentence).encode()).hexdigest()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_condition_declared_in_a_test_runs_and_is_recorded(note: type[Note], tmp_path: Path,
                                                             workers: int) -> None:
    cfg = EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint="http://x/v1", model=MODEL, limit=4,
                     concurrency=2, workers=workers, conditions=REGISTRY.from_options(note=SENTENCE, examples=1),
                     load=LoadShape(metrics_interval_s=0.05))
    with FakeServer(tmp_path / "fake", script(), model=MODEL) as fake:
        cfg = replace(cfg, endpoint=fake.url)
        run_eval(cfg)
        asked = fake.chat_requests()
        # --resume compares its manifest key with the other conditions' keys
        with pytest.raises(RecordError, match="cannot resume: the run differs \\(note_sentence: was"):
            run_eval(replace(cfg, resume=True, conditions=REGISTRY.from_options(note=" Other.", examples=1)))
    assert len(asked) == 4 and {r["system_prompt_sha256"] for r in asked} == {system_sha(SENTENCE)}
    recs = list(iter_records(tmp_path / "run" / RECORDS))
    assert len(recs) == 4
    for rec in recs:
        keys = list(rec)
        assert rec["note_chars"] == len(SENTENCE) and rec["note_after"] == {"outcome": "ok", "scored": True}
        assert len(rec["example_ids"]) == 1  # a built-in condition next to it, its trace first (registry order)
        assert keys.index("example_ids") < keys.index("note_chars") < keys.index("note_after")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["note_sentence"] == {"sha256": hashlib.sha256(SENTENCE.encode()).hexdigest()}
    assert manifest["examples"]["k"] == 1 and manifest["planner"] is None
    assert REGISTRY.labels(manifest) == ["note", "1 examples"]  # label_rank puts it first


def test_an_unregistered_condition_leaves_no_trace(tmp_path: Path) -> None:
    """Once removed, its options, manifest keys and model fields are gone with it."""
    REGISTRY.add(Note)
    REGISTRY.remove(Note.name)
    assert "note_sentence" not in REGISTRY.manifest_keys()
    assert "note_sentence" not in REGISTRY.manifest_model().model_fields
    with pytest.raises(InputError, match="no condition has a setting 'note'"):
        REGISTRY.from_options(note="x")


def test_answer_kinds_and_conflicts_are_refused_by_name(note: type[Note], tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/v1"
    with pytest.raises(InputError, match=r"--note and --planner do not combine") as exc:
        validate(EvalConfig(out=tmp_path / "x", endpoint=url,
                            conditions=REGISTRY.from_options(note="x", planner="two-stage")))
    assert exc.value.field == "--note"
    with pytest.raises(InputError, match=r"not available with --answer sql yet: --note"):
        validate(EvalConfig(out=tmp_path / "x", endpoint=url, answer="sql", guardrails=(),
                            conditions=REGISTRY.from_options(note="x")))
    validate(EvalConfig(out=tmp_path / "x", endpoint=url, answer="query", guardrails=(),
                        conditions=REGISTRY.from_options(note="x")))  # declared for query: accepted


def test_registration_refuses_a_second_name_setting_or_key(note: type[Note]) -> None:
    class Again(Note):
        pass

    with pytest.raises(ValueError, match="registered twice"):
        REGISTRY.add(Again)

    class Clash(Condition[NoteSettings]):
        name = "clash"
        settings_model = NoteSettings

    with pytest.raises(ValueError, match="already declared"):
        REGISTRY.add(Clash)


@pytest.mark.parametrize(("options", "field", "message"), [
    ({"samples": 99}, "--samples", "must be between 1 and 16, got 99"),
    ({"planner": "three-stage"}, "--planner", "unknown planner 'three-stage' (known: none, two-stage)"),
    ({"link_values": "always"}, "--link-values", "unknown mode 'always'"),
    ({"abstain_below": 1.5}, "--abstain-below", "must be strictly between 0 and 1, got 1.5"),
    ({"examples": -1}, "--examples", "must be at least 0, got -1"),
])
def test_settings_bounds_name_the_option(options: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        REGISTRY.from_options(**options)
    assert exc.value.field == field and message in str(exc.value)


def test_a_condition_set_is_hashable_picklable_and_drops_what_is_off() -> None:
    import pickle

    cs = REGISTRY.from_options(examples=0, example_bank="dev", samples=1, link_values="hint")
    assert cs.names() == ("values",)  # a bank without --examples, one sample: off
    assert pickle.loads(pickle.dumps(cs)) == cs and hash(cs) == hash(REGISTRY.from_options(link_values="hint"))
    assert not ConditionSet() and ConditionSet().manifest().to_json() == dict.fromkeys(REGISTRY.manifest_keys())


def test_ray_vllm_refuses_conditions_by_name(tmp_path: Path) -> None:
    from nlq2sql.run.batch_config import BatchConfig, check

    base = EvalConfig(conditions=REGISTRY.from_options(examples=2, abstain=True))
    with pytest.raises(InputError, match=r"--engine ray-vllm does not apply conditions; drop --examples, --abstain"):
        check(BatchConfig(base=base, engine="ray-vllm", out=tmp_path / "b"))


def test_eval_options_are_generated_from_the_settings(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from nlq2sql.cli.main import app

    shown = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "300"}).output
    for cond in REGISTRY:
        for opt in cond.options():
            assert opt in shown, opt
    res = CliRunner().invoke(app, ["eval", "--samples", "99", "--temperature", "0.5", "--endpoint",
                                   "http://127.0.0.1:9/v1", "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "--samples: must be between 1 and 16, got 99" in res.output
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_every_ray_engine_applies_the_built_in_conditions(tmp_path: Path, cache_root: Path,
                                                          small_warehouse: Path) -> None:
    """``eval --engine ray`` (actors) and ``batch --engine ray`` (Ray Data) record what the
    in-process run records for the same conditions: the chosen examples, the linked values and
    the abstention decision per item, and the conditions in the manifest."""
    pytest.importorskip("ray.data")
    import ray

    from nlq2sql.run.batch import run_batch
    from nlq2sql.run.batch_config import BatchConfig
    from nlq2sql.run.batch_shards import iter_shard_records
    from nlq2sql.run.ray_engine import RayEngine

    conds = REGISTRY.from_options(examples=1, link_values="hint", abstain=True)
    keys = ("example_ids", "linked_values", "abstained", "abstain_reason", "correct_final")

    def picked(recs: Iterator[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
        return {r["id"]: tuple(r[k] for k in keys) for r in recs}

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NLQ2SQL_CACHE_DIR", str(cache_root))  # Ray's workers inherit it when Ray starts here
        started = not ray.is_initialized()
        RayEngine(None)
        try:
            with FakeServer(tmp_path / "fake", script(), model=MODEL) as fake:
                cfg = EvalConfig(evalset="heldout", out=tmp_path / "one", endpoint=fake.url, model=MODEL, limit=6,
                                 concurrency=2, timeout_s=10.0, conditions=conds,
                                 load=LoadShape(metrics_interval_s=0.1))
                run_eval(cfg)
                run_eval(replace(cfg, out=tmp_path / "ray", workers=2, engine="ray"))
                run_batch(BatchConfig(base=replace(cfg, out=tmp_path / "batch"), input="heldout",
                                      out=tmp_path / "batch", format="jsonl", concurrency=2, actors=2))
        finally:
            if started:
                ray.shutdown()
    one = picked(iter_records(tmp_path / "one" / RECORDS))
    assert len(one) == 6 and all(v[0] and v[2] is not None for v in one.values())
    assert picked(iter_records(tmp_path / "ray" / RECORDS)) == one
    assert picked(iter_shard_records(tmp_path / "batch")) == one
    m_one, m_ray, m_batch = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("one", "ray", "batch"))
    for m in (m_ray, m_batch):
        assert {k: m[k] for k in REGISTRY.manifest_keys()} == {k: m_one[k] for k in REGISTRY.manifest_keys()}
    assert m_one["examples"]["k"] == 1 and m_one["link_values"] == "hint" and m_one["abstain"] is True


def test_each_built_in_declares_its_per_item_trace() -> None:
    """What each condition records per item is declared once, as a type whose fields are its record
    keys; two conditions that may run together declare no key twice, save ``intent_evidence``: the
    planner's first stage records it, and abstention's hook adds it only where it is absent."""
    from nlq2sql.conditions.abstain import AbstainTrace
    from nlq2sql.conditions.examples import ExamplesTrace
    from nlq2sql.conditions.linking import LinkingTrace
    from nlq2sql.conditions.planner import PlannerTrace
    from nlq2sql.conditions.selfcheck import SelfCheckTrace
    from nlq2sql.conditions.values import ValuesTrace

    declared = {c.name: c.trace for c in REGISTRY}
    assert declared == {"examples": ExamplesTrace, "planner": PlannerTrace, "values": ValuesTrace,
                        "linking": LinkingTrace, "selfcheck": SelfCheckTrace, "abstain": AbstainTrace}
    assert all(issubclass(t, Trace) for t in declared.values())
    by_name = {c.name: c for c in REGISTRY}
    for a in REGISTRY:
        for b in REGISTRY:
            if a.name < b.name and b.name not in a.conflicts and a.name not in b.conflicts:
                shared = set(a.trace.model_fields) & set(b.trace.model_fields)
                assert shared <= {"intent_evidence"}, (a.name, b.name, shared)
    assert "planner" in by_name["selfcheck"].conflicts  # both record ``requests``: never together
    # an empty trace writes nothing; unset keys are absent, None is written as null
    rec = ItemRecord(id="x", question="q")
    rec.merge(Trace())
    rec.merge(AbstainTrace(intent_evidence=None, abstain_below=0.5))
    assert rec.traces == {"intent_evidence": None, "abstain_below": 0.5}
    rec.merge(ValuesTrace())
    assert "linked_values" not in rec.traces
