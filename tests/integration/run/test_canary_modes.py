"""The canary in every constraint mode the harness sends — regex (the compact experiment's), choice
(the two-stage planner's first stage), grammar (the sql-grammar answer's) — and the backend an
endpoint the run did not start reports (vLLM's /server_info), else "unknown (external endpoint)"."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fakeserver import FakeServer, script

from nlq2sql.run import live
from nlq2sql.run.canary import (
    CANARY_GRAMMAR,
    CANARY_REGEX,
    ConstraintsNotEnforced,
    choice_verdict,
    require_constraints,
    run_modes,
)
from nlq2sql.run.config import EvalConfig, LoadShape, preflight
from nlq2sql.run.serving import UNKNOWN_BACKEND
from nlq2sql.transport.client import Sampling


def _cfg(url: str, out: Path, **kw: object) -> EvalConfig:
    return EvalConfig(evalset="heldout", out=out, endpoint=url, model="fake-model", limit=2, concurrency=1,
                      timeout_s=10.0, load=LoadShape(metrics_interval_s=0.05), **kw)  # type: ignore[arg-type]


def test_run_modes() -> None:
    assert run_modes("json", "intent") == ("json",)
    assert run_modes("json", "intent", ["choice"]) == ("json", "choice")  # the planner's first stage too
    assert run_modes("none", "intent", ["choice"]) == ("choice",)
    assert run_modes("json", "sql-grammar") == ("grammar",)  # the answer's own constraint
    assert run_modes("json", "sql") == ()  # free SQL carries none
    assert run_modes("regex", "intent") == ("regex",)


def test_the_canary_constraints_allow_exactly_the_canary_answers() -> None:
    assert re.fullmatch(CANARY_REGEX, '{"color":"red"}') and re.fullmatch(CANARY_REGEX, '{"color":"green"}')
    assert not re.fullmatch(CANARY_REGEX, '{ "color": "red" }') and not re.fullmatch(CANARY_REGEX, '{"color":"purple"}')
    xgrammar = pytest.importorskip("xgrammar")  # installed with vLLM
    compiled = xgrammar.Grammar.from_ebnf(CANARY_GRAMMAR)
    assert "red" in str(compiled) and "green" in str(compiled)
    assert choice_verdict("red", "stop") is None and choice_verdict("gr", "length") is None
    assert "outside the choices" in (choice_verdict('{ "color" : "purple" , "size" : 7 }', "stop") or "")


@pytest.mark.parametrize("mode", ["regex", "choice", "grammar"])
def test_a_server_that_ignores_one_constraint_kind_trips_the_canary_in_that_mode(tmp_path: Path, mode: str) -> None:
    spec = {**script(), "canary_ignores": [mode]}  # enforces every other kind (JSON Schemas too)
    with FakeServer(tmp_path, spec) as fake:
        assert require_constraints(fake.url, "fake-model", "EMPTY", "json", compact=False) is not None
        with pytest.raises(ConstraintsNotEnforced, match=f"structured mode {mode}"):
            require_constraints(fake.url, "fake-model", "EMPTY", ("json", mode), compact=False)
        sent = [e["structured_outputs"] for e in fake.canary_requests()]
        assert list(sent[-1]) == [mode]  # the canary carried a constraint of that kind
        ok = require_constraints(fake.url, "fake-model", "EMPTY", "json", compact=False)
        assert ok is not None and ok.passed
    with FakeServer(tmp_path / "ok", script()) as fake:  # an enforcing server passes in every mode
        res = require_constraints(fake.url, "fake-model", "EMPTY", ("json", mode), compact=False)
        assert res is not None and res.passed and [a.structured for a in res.also] == [mode]
        assert res.to_json()["also"][0]["passed"] is True


def test_a_planner_run_canaries_the_choice_too(tmp_path: Path) -> None:
    from nlq2sql.conditions.registry import REGISTRY

    conds = REGISTRY.from_options(planner="two-stage")
    out = tmp_path / "run"
    with FakeServer(tmp_path, {**script(), "canary_ignores": ["choice"]}) as fake:
        with pytest.raises(ConstraintsNotEnforced, match="structured mode choice"):
            live.run_eval(_cfg(fake.url, out, conditions=conds))
        assert not out.exists() and fake.chat_requests() == []
        with pytest.raises(ConstraintsNotEnforced, match="structured mode choice"):
            preflight(_cfg(fake.url, out, conditions=conds))


def test_a_sql_grammar_run_canaries_the_grammar(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with FakeServer(tmp_path, {**script(), "canary_ignores": ["grammar"]}) as fake:
        with pytest.raises(ConstraintsNotEnforced, match="structured mode grammar"):
            live.run_eval(_cfg(fake.url, out, answer="sql-grammar", guardrails=(),
                               sampling=Sampling(structured="none")))
        assert not out.exists()
        with pytest.raises(ConstraintsNotEnforced, match="structured mode grammar"):
            preflight(_cfg(fake.url, out, answer="sql-grammar", guardrails=()))


def test_the_compact_experiments_regex_run_is_canaried(tmp_path: Path) -> None:
    with FakeServer(tmp_path, {**script(), "canary_ignores": ["regex"]}) as fake, \
            pytest.raises(ConstraintsNotEnforced, match="structured mode regex"):
        live.run_eval(_cfg(fake.url, tmp_path / "run", sampling=Sampling(structured="regex", regex="x")))


def test_an_endpoint_records_its_reported_backend_or_unknown_and_is_still_canaried(tmp_path: Path) -> None:
    with FakeServer(tmp_path / "a", script()) as fake:
        live.run_eval(_cfg(fake.url, tmp_path / "plain"))
        assert len(fake.canary_requests()) == 1
        assert any(e.get("path") == "/server_info" for e in fake.entries())  # it was asked
    manifest = json.loads((tmp_path / "plain" / "manifest.json").read_text())
    assert manifest["structured_outputs"] == {"backend": UNKNOWN_BACKEND, "disable_any_whitespace": None,
                                              "source": None}
    assert manifest["structured_canary"]["passed"] is True
    with FakeServer(tmp_path / "b", {**script(), "server_info_backend": "guidance"}) as fake:
        live.run_eval(_cfg(fake.url, tmp_path / "dev"))
        assert len(fake.canary_requests()) == 1
    so = json.loads((tmp_path / "dev" / "manifest.json").read_text())["structured_outputs"]
    assert so == {"backend": "guidance", "disable_any_whitespace": False, "source": "endpoint /server_info"}
    with FakeServer(tmp_path / "c", {**script(), "server_info_backend": "xgrammar", "canary": "ignore"}) as fake, \
            pytest.raises(ConstraintsNotEnforced):  # a reported backend does not excuse the canary
        live.run_eval(_cfg(fake.url, tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()
