"""Intent-token confidence from vLLM logprobs, and ``--abstain-below`` (conditions.confidence)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nlq2sql.conditions.confidence import intent_evidence
from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.errors import InputError
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.evalset import load_evalset


def lp(p: float) -> float:
    return math.log(p)


def test_the_decisive_token_of_a_compact_answer() -> None:
    # Shaped like CPU vLLM 0.32's stream for Qwen2.5-Coder (masked alternatives at -9999).
    tokens = [('{"', lp(0.99), [('{"', lp(0.99)), ("$", -9999.0)]),
              ("intent", 0.0, [("intent", 0.0), ("int", -10.1)]),
              ('":"', lp(0.98), [('":"', lp(0.98)), ('":', lp(0.01)), ("%", -9999.0)]),
              ("top", lp(0.6), [("top", lp(0.6)), ("break", lp(0.3)), ("time", lp(0.05)), ("to", lp(0.01)),
                                ("$", -9999.0)]),
              ("_n", 0.0, [("_n", 0.0)]), ("_by", 0.0, []), ("_metric", 0.0, []), ('","', 0.0, [])]
    ev = intent_evidence(tokens)
    assert ev is not None
    assert (ev.kind, ev.token, ev.token_index) == ("top_n_by_metric", "top", 3)
    # "to" fits top_n only as well (a prefix of it): its mass counts for top_n; "$" is masked
    assert ev.kinds == {"breakdown": 0.3, "time_series": 0.05, "top_n_by_metric": 0.61}
    assert ev.confidence == pytest.approx(0.61 / 0.96, abs=1e-4)
    assert ev.p_token == pytest.approx(0.6)
    # as the record holds it: v1's keys, no ``over`` / ``answer_share``
    flat = ev.to_json()
    assert set(flat) == {"kind", "token", "token_index", "p_token", "kinds", "confidence"}
    # the model's share on a kind a guardrail answered instead
    assert ev.share("breakdown") == pytest.approx(0.3 / 0.96, abs=1e-4)
    assert ev.share("top_n_by_metric") == ev.confidence == ev.share(None)


def test_an_ambiguous_token_defers_the_decision() -> None:
    tokens = [('{"intent":"', 0.0, []),
              ("t", lp(0.9), [("t", lp(0.9)), ("b", lp(0.1))]),  # top_n… or time_series: undecided
              ("op", lp(0.7), [("op", lp(0.7)), ("ime", lp(0.2)), ("x", lp(0.1))]),
              ("_n_by_metric", 0.0, [])]
    ev = intent_evidence(tokens)
    assert ev is not None and (ev.kind, ev.token_index) == ("top_n_by_metric", 2)
    assert ev.kinds == {"time_series": 0.2, "top_n_by_metric": 0.7}  # "x" fits no kind
    # a token that carries the value's opening quote and the kind's first letters at once
    joined = [('{"intent":', 0.0, []), ('"break', lp(0.8), [('"break', lp(0.8)), ('"top', lp(0.2)),
                                                             ("break", lp(0.1))])]
    ev = intent_evidence(joined)
    assert ev is not None and ev.kinds == {"breakdown": 0.8, "top_n_by_metric": 0.2}


def test_the_planners_bare_choice_and_what_gives_no_evidence() -> None:
    ev = intent_evidence([("time", lp(0.5), [("time", lp(0.5)), ("top", lp(0.25)), ("break", lp(0.25))]),
                          ("_series", 0.0, [])])
    assert ev is not None and ev.kind == "time_series" and ev.confidence == pytest.approx(0.5)
    assert intent_evidence(None) is None and intent_evidence([]) is None
    assert intent_evidence([('{"metric":"revenue"}', 0.0, [])]) is None  # no intent value at all
    assert intent_evidence([('{"intent":"', 0.0, []), ("pie", 0.0, [])]) is None  # fits no kind
    # the kind finished inside one token followed by the closing quote
    ev = intent_evidence([('{"intent":"', 0.0, []), ('breakdown","', lp(0.9), [])])
    assert ev is not None and ev.kind == "breakdown" and ev.confidence == 1.0


def test_abstain_below_is_checked(tmp_path: Path) -> None:
    from nlq2sql.run.config import EvalConfig, validate

    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(InputError) as exc:
            validate(EvalConfig(out=tmp_path / "x", endpoint="http://127.0.0.1:9/v1",
                                conditions=REGISTRY.from_options(abstain_below=bad)))
        assert exc.value.field == "--abstain-below"
    from nlq2sql.transport.client import Sampling

    with pytest.raises(InputError, match="top_logprobs"):
        Sampling(top_logprobs=0)


def compact(d: dict) -> str:
    return json.dumps(d, separators=(",", ":"))


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
def test_eval_abstains_below_the_threshold(tmp_path: Path, client: str) -> None:
    """Against the fault server, whose tokens carry a scripted probability on the intent kind:
    the confident item answers, the unsure one abstains; both clients read the same evidence,
    the manifest records what was asked, and re-scoring decides the same."""
    from fakeserver import FakeServer, script

    from nlq2sql.answers.offline import rescore_run
    from nlq2sql.records.store import iter_records
    from nlq2sql.run.config import EvalConfig, LoadShape
    from nlq2sql.run.live import run_eval

    cases = [c for c in load_evalset("heldout", open_warehouse("retail")).cases if c.gold.intent == "breakdown"][:2]
    by_q = {c.question: [{"kind": "text", "text": compact(c.gold.model_dump(mode="json")), "intent_p": p}]
            for c, p in zip(cases, (0.9, 0.3), strict=True)}
    with FakeServer(tmp_path / "fake", script(by_question=by_q), model="fake-model") as fake:
        cfg = EvalConfig(evalset="heldout", out=tmp_path / "run", endpoint=fake.url, model="fake-model",
                         limit=None, concurrency=2, conditions=REGISTRY.from_options(abstain_below=0.5), guardrails=(),
                         client=client,
                         load=LoadShape(metrics_interval_s=0.05))
        from dataclasses import replace

        path = tmp_path / "two.jsonl"  # the two chosen items as a set of their own
        path.write_text("".join(c.model_dump_json() + "\n" for c in cases))
        summary = run_eval(replace(cfg, evalset=str(path)))
        asked = fake.chat_requests()
    assert [(r["logprobs"], r["top_logprobs"]) for r in asked] == [(True, 8), (True, 8)]
    recs = {r["id"]: r for r in iter_records(cfg.out / "records.jsonl")}
    sure, unsure = recs[cases[0].id], recs[cases[1].id]
    assert sure["intent_evidence"]["confidence"] == pytest.approx(0.9)
    assert not sure["abstained"] and sure["correct_final"]
    assert unsure["abstained"] and unsure["answer_correct"] and not unsure["correct_final"]
    assert unsure["abstain_reason"] == "intent-token confidence 0.30 < 0.5"
    sel = summary.to_json()["selective"]
    assert (sel["abstained"], sel["coverage"]["k"], sel["accuracy_answered"]["k"]) == (1, 1, 1)
    assert [(p["min_confidence"], p["coverage"]["k"]) for p in sel["curve"]] == [(0.9, 1), (0.3, 2)]
    manifest = json.loads((cfg.out / "manifest.json").read_text())
    assert manifest["abstain_below"] == 0.5 and manifest["abstain"] is True
    assert manifest["sampling"]["top_logprobs"] == 8 and manifest["timeout_s"] == 120.0
    again, _, final_ok = rescore_run(cfg.out, ())
    assert again.selective is not None and again.selective.to_json() == sel
    assert final_ok == {cases[0].id: True, cases[1].id: False}


def test_a_server_without_logprobs_is_said_not_silently_answered(tmp_path: Path) -> None:
    """--abstain-below against an endpoint that strips logprobs: nothing can be judged, so the
    item is answered, and the summary and the printed report say how many were not judged."""
    import io
    from dataclasses import replace

    from fakeserver import FakeServer, script
    from rich.console import Console

    from nlq2sql.run.config import EvalConfig
    from nlq2sql.run.live import run_eval
    from nlq2sql.stages.report import render_summary

    case = next(c for c in load_evalset("heldout", open_warehouse("retail")).cases if c.gold.intent == "breakdown")
    by_q = {case.question: [{"kind": "text", "text": compact(case.gold.model_dump(mode="json")), "intent_p": 0.1,
                             "no_logprobs": True}]}
    path = tmp_path / "one.jsonl"
    path.write_text(case.model_dump_json() + "\n")
    with FakeServer(tmp_path / "fake", script(by_question=by_q), model="fake-model") as fake:
        cfg = EvalConfig(evalset=str(path), out=tmp_path / "run", endpoint=fake.url, model="fake-model",
                         conditions=REGISTRY.from_options(abstain_below=0.5), guardrails=())
        summary = run_eval(replace(cfg))
    sel = summary.to_json()["selective"]
    assert sel["without_logprob_evidence"] == 1 and sel["abstained"] == 0 and sel["coverage"]["k"] == 1
    buf = io.StringIO()
    render_summary(summary, console=Console(file=buf, width=200))
    assert "1 of 1 items came back without logprobs" in buf.getvalue()
