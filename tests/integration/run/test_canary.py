"""The structured-output canary: a server that ignores the schema stops the run before anything is
written; a conforming one passes and the manifest records what it answered.  The effective
backend is read from the server's start-up log, not from the flag."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import fakeserver
import pytest
from fakeserver import FakeServer, free_port, script

from nlq2sql.errors import InputError
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run import canary, live
from nlq2sql.run.canary import ConstraintsNotEnforced, canary_verdict
from nlq2sql.run.config import EvalConfig, LoadShape, LocalServerSettings
from nlq2sql.run.server import ServerConfig
from nlq2sql.run.serving import batch_invariant_refusal, effective_structured_outputs
from nlq2sql.transport.client import Sampling


def test_the_fake_server_knows_the_canary_question() -> None:
    assert fakeserver.CANARY_QUESTION == canary.CANARY_QUESTION


@pytest.mark.parametrize(("text", "finish", "compact", "bad"), [
    ('{"color":"red"}', "stop", True, None),
    ('{ "color": "green" }', "stop", False, None),  # whitespace is allowed without the compact grammar
    ('{ "color": "green" }', "stop", True, "whitespace"),
    ('{"color":"purple"}', "stop", False, "enum value"),
    ('{"color":"red","size":7}', "stop", False, "property the schema forbids"),
    ('```json\n{"color":"red"}\n```', "stop", False, "not JSON"),
    ('["red"]', "stop", False, "not a JSON object"),
    ('{"color":"re', "length", True, None),  # cut short, still on the way to an allowed answer
    ('{ \n\n   ', "length", False, None),
    ('{"color":"pu', "length", False, "left the schema"),
    ('{"size', "length", False, "left the schema"),
])
def test_verdict(text: str, finish: str, compact: bool, bad: str | None) -> None:
    reason = canary_verdict(text, finish, compact)
    assert (reason is None) if bad is None else (reason is not None and bad in reason)


def _cfg(url: str, out: Path, structured: str = "json") -> EvalConfig:
    return EvalConfig(evalset="heldout", out=out, endpoint=url, model="fake-model", limit=2, concurrency=1,
                      timeout_s=10.0, sampling=Sampling(structured=structured),
                      load=LoadShape(metrics_interval_s=0.05))


@pytest.mark.parametrize("structured", ["json", "response_format"])
def test_a_server_that_ignores_the_schema_stops_the_run_before_anything_is_written(
        tmp_path: Path, structured: str) -> None:
    out = tmp_path / "run"
    with FakeServer(tmp_path, {**script(), "canary": "ignore"}) as fake:
        with pytest.raises(ConstraintsNotEnforced, match="constraints are not enforced by this server") as exc:
            live.run_eval(_cfg(fake.url, out, structured))
        assert isinstance(exc.value, InputError)  # the CLI's exit 2, one line
        assert "enum value" in str(exc.value) or "property" in str(exc.value)
        assert not out.exists()
        assert fake.chat_requests() == []  # no item was sent
        sent = fake.canary_requests()
        assert len(sent) == 1
        carried = sent[0]["structured_outputs"] if structured == "json" else sent[0]["response_format"]
        assert "purple" not in json.dumps(carried) and "red" in json.dumps(carried)  # the schema went along


def test_a_conforming_server_passes_and_the_manifest_says_so(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with FakeServer(tmp_path, script()) as fake:
        summary = live.run_eval(_cfg(fake.url, out)).to_json()
        assert summary["n"] == 2 and len(fake.chat_requests()) == 2 and len(fake.canary_requests()) == 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["structured_canary"]["passed"] is True
    assert manifest["structured_canary"]["text"] == '{"color":"red"}'
    assert manifest["structured_outputs"]["backend"] == "unknown (external endpoint)"  # it does not say


def test_no_canary_without_a_schema(tmp_path: Path) -> None:
    with FakeServer(tmp_path, {**script(), "canary": "ignore"}) as fake:
        live.run_eval(_cfg(fake.url, tmp_path / "run", "none"))
        assert fake.canary_requests() == []
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["structured_canary"] is None


def test_multi_level_commands_check_in_preflight(tmp_path: Path) -> None:
    from nlq2sql.run.config import preflight

    with FakeServer(tmp_path, {**script(), "canary": "ignore"}) as fake, \
            pytest.raises(ConstraintsNotEnforced, match="not enforced"):
        preflight(_cfg(fake.url, tmp_path / "run"))


def _wrapper(tmp_path: Path, extra: str) -> Path:
    wrapper = tmp_path / "fake-vllm-python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {PROJECT_ROOT / 'tests' / 'fakeserver.py'} {extra} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_local_server_records_the_backend_its_engine_logged_not_the_flag(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "fakemodel"
    model.mkdir()
    (model / "config.json").write_text("{}")
    # The stand-in logs vLLM's start-up line with *another* backend than it was asked for.
    monkeypatch.setenv("NLQ2SQL_VLLM_PYTHON", str(_wrapper(tmp_path, "--effective-backend guidance")))
    cfg = EvalConfig(evalset="heldout", out=tmp_path / "run", model=str(model), limit=1, concurrency=1,
                     timeout_s=10.0, server=LocalServerSettings(port=free_port(), structured_backend="xgrammar"),
                     load=LoadShape(metrics_interval_s=0.05))
    live.run_eval(cfg)
    manifest = json.loads((cfg.out / "manifest.json").read_text())
    so = manifest["structured_outputs"]
    assert so["requested_backend"] == "xgrammar" and so["backend"] == "guidance" and so["source"] == "server log"
    assert so["disable_any_whitespace"] is True and manifest["structured_canary"]["compact_checked"] is True
    args = manifest["server_args"]
    assert json.loads(args[args.index("--structured-outputs-config") + 1]) == {
        "backend": "xgrammar", "disable_any_whitespace": True}
    assert manifest["batch_invariant"] is False


def test_whitespace_under_the_compact_grammar_trips_a_local_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "fakemodel"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setenv("NLQ2SQL_VLLM_PYTHON", str(_wrapper(tmp_path, "--canary whitespace")))
    cfg = EvalConfig(evalset="heldout", out=tmp_path / "run", model=str(model), limit=1, concurrency=1,
                     timeout_s=10.0, server=LocalServerSettings(port=free_port()))
    with pytest.raises(ConstraintsNotEnforced, match="whitespace between JSON tokens"):
        live.run_eval(cfg)
    assert not cfg.out.exists()


def test_server_settings() -> None:
    assert ServerConfig().structured_outputs_config() == json.dumps(
        {"backend": "xgrammar", "disable_any_whitespace": True})  # compact auto = xgrammar, as before
    assert ServerConfig(compact=False).structured_outputs_config() is None
    assert json.loads(ServerConfig(compact=False, structured_backend="outlines").structured_outputs_config()
                      or "") == {"backend": "outlines"}
    with pytest.raises(InputError, match="cannot drop whitespace"):
        ServerConfig(structured_backend="lm-format-enforcer").structured_outputs_config()
    with pytest.raises(InputError, match="unknown structured-output backend"):
        ServerConfig(structured_backend="llguidance").structured_outputs_config()
    assert batch_invariant_refusal("cuda") is None and batch_invariant_refusal("xpu") is None
    assert "only on" in (batch_invariant_refusal("cpu") or "")


def test_effective_backend_from_a_real_vllm_log_line(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(  # as vLLM 0.32 logs it (API server, then engine core)
        "(APIServer pid=1) INFO non-default args: {'structured_outputs_config': StructuredOutputsConfig("
        "backend='xgrammar', disable_any_whitespace=True, disable_additional_properties=False)}\n"
        "(EngineCore pid=2) INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m', "
        "structured_outputs_config=StructuredOutputsConfig(backend='guidance', disable_any_whitespace=False, "
        "disable_additional_properties=False, reasoning_parser=''), observability_config=None\n")
    found = effective_structured_outputs(log)
    assert found is not None and found.to_json() == {"backend": "guidance", "disable_any_whitespace": False,
                                                      "source": "server log"}
    log.write_text("nothing here\n")
    assert effective_structured_outputs(log) is None
