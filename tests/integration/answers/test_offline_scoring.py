"""One offline scorer over answer kinds (``nlq2sql.answers.offline``): a kind's answers are scored by
that kind's scorer whatever its cases are -- v1 eval-set cases included, which once went through the
v1 intent scorer whoever the kind was -- and a recorded run is re-scored through the same scorer."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.answers.kinds import KINDS, AnswerKind, IntentKind, register
from nlq2sql.answers.offline import rescore_run
from nlq2sql.cli.main import app
from nlq2sql.records.item import ItemRecord
from nlq2sql.stages.evalset import load_evalset

runner = CliRunner()


class WrappedIntentKind(IntentKind):
    """A v1 intent inside ``{"answer": …}``, on v1 eval-set cases: a kind the v1 path would misread."""

    name = "wrapped-intent"
    help = "a v1 intent inside {\"answer\": …}"
    form = "wrapped-intent"
    implicit = False

    @classmethod
    def record(cls, case: Any, raw_text: str | None, executor: Any, catalog: Any, *,
               rulesets: Sequence[Any] = (), sandbox: Any = None, finish_reason: str | None = None,
               request_error: str | None = None) -> ItemRecord:
        inner: str | None = raw_text
        with contextlib.suppress(ValueError, KeyError, TypeError):  # not the envelope: scored as it is
            inner = json.dumps(json.loads(raw_text or "")["answer"])
        rec = super().record(case, inner, executor, catalog, rulesets=rulesets, finish_reason=finish_reason,
                             request_error=request_error)
        rec.answer.raw_text = raw_text
        return rec


@pytest.fixture
def wrapped() -> Iterator[type[AnswerKind]]:
    register(WrappedIntentKind)
    try:
        yield WrappedIntentKind
    finally:
        KINDS.remove(WrappedIntentKind.name)


def _score(tmp_path: Path, name: str, answer: str, texts: Mapping[str, str | None]) -> tuple[list[Any], Any, Any]:
    responses = tmp_path / f"{name}.jsonl"
    responses.write_text("".join(json.dumps({"id": cid, "text": t}) + "\n" for cid, t in texts.items()))
    out = tmp_path / name
    res = runner.invoke(app, ["score", "--answer", answer, "--evalset", "heldout", "--responses", str(responses),
                              "--allow-missing", "--out", str(out)])
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return records, json.loads((out / "summary.json").read_text()), json.loads((out / "manifest.json").read_text())


def test_a_kind_on_v1_cases_is_scored_by_its_own_scorer(tmp_path: Path, wrapped: type[AnswerKind]) -> None:
    cases = load_evalset("heldout", retail_wh()).cases[:12]
    golds = {c.id: c.gold.model_dump(mode="json") for c in cases}
    wrong = {"intent": "aggregate", "metric": "revenue", "dimension": None}
    plain = {cid: json.dumps(g if i % 3 else wrong) for i, (cid, g) in enumerate(golds.items())}
    plain[cases[5].id] = "not JSON"
    inner = {cid: json.loads(t) if t != "not JSON" else t for cid, t in plain.items()}
    box = {cid: json.dumps({"answer": v}) if not isinstance(v, str) else v for cid, v in inner.items()}
    ref, ref_summary, _ = _score(tmp_path, "plain", "intent", plain)
    got, summary, manifest = _score(tmp_path, "wrapped", wrapped.name, box)
    # The same judgement of every item (the answers left out too): only the raw text differs.
    assert [{k: v for k, v in r.items() if k != "raw_text"} for r in got] == \
        [{k: v for k, v in r.items() if k != "raw_text"} for r in ref]
    assert [r["raw_text"] for r in got[:12]] == list(box.values())
    assert sum(r["correct_final"] for r in got) == 7 and sum(r["status"] == "missing" for r in got) > 0
    figures = {k for k in ref_summary if k not in ("records", "missing")}
    assert {k: summary[k] for k in figures} == {k: ref_summary[k] for k in figures}
    assert summary["answer"] == manifest["answer"] == wrapped.name and "answer" not in ref_summary
    # and a recorded run of it is re-scored through the same kind's scorer
    figs, raw_ok, final_ok = rescore_run(tmp_path / "wrapped", ("ranking",))
    assert figs.final_accuracy.to_json() == summary["final_accuracy"]
    assert sum(final_ok.values()) == 7 and set(raw_ok) == {r["id"] for r in got}
