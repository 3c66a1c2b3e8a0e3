"""The command line: exit codes, clear input errors, no artifacts from bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from retail import retail_wh
from rich.console import Console
from typer.testing import CliRunner

from nlq2sql.cli import _common as cli_common
from nlq2sql.cli import main as cli_main
from nlq2sql.cli.main import app
from nlq2sql.records.store import iter_records
from nlq2sql.stages.evalset import load_evalset

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Error lines unwrapped, so a long temp path stays on one line."""
    for module in (cli_common, cli_main):
        monkeypatch.setattr(module, "err", Console(stderr=True, width=10_000))


def gold_responses(path: Path, evalset: str = "heldout", **text_over: Any) -> Path:
    rows = [{"id": c.id, "text": json.dumps({**c.gold.model_dump(mode="json"), **text_over}),
             "finish_reason": "stop"} for c in load_evalset(evalset, retail_wh()).cases]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def false_ranking_responses(path: Path) -> Path:
    """A model that ranks every plain breakdown: top 10, descending."""
    rows = []
    for c in load_evalset("heldout", retail_wh()).cases:
        gold = c.gold.model_dump(mode="json")
        if c.gold.intent == "breakdown":
            gold.update(intent="top_n_by_metric", limit=10, order="desc")
        rows.append({"id": c.id, "text": json.dumps(gold)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def score(*args: str) -> Any:
    return runner.invoke(app, ["score", *args])


def test_score_gold_responses(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = score("--evalset", "heldout", "--responses", str(gold_responses(tmp_path / "r.jsonl")),
                "--out", str(out), "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["raw_accuracy"]["value"] == 1.0 and summary["final_accuracy"]["value"] == 1.0
    assert summary["execution_accuracy"]["value"] == 1.0 and summary["n"] == 60
    assert summary["interventions"] == 0
    assert json.loads(res.stdout)["raw_accuracy"]["k"] == 60
    assert len(list(iter_records(out / "records.jsonl"))) == 60
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "score" and manifest["guardrails"] == ["ranking"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "run"]


def test_score_renders_a_table(tmp_path: Path) -> None:
    res = score("--evalset", "dev", "--responses", str(gold_responses(tmp_path / "r.jsonl", "dev")),
                "--out", str(tmp_path / "run"))
    assert res.exit_code == 0 and "raw intent accuracy" in res.stdout and "(20/20)" in res.stdout


def test_missing_responses_refused_unless_allowed(tmp_path: Path) -> None:
    resp = gold_responses(tmp_path / "r.jsonl")
    resp.write_text("".join(resp.read_text().splitlines(keepends=True)[:50]))
    res = score("--evalset", "heldout", "--responses", str(resp), "--out", str(tmp_path / "run"))
    assert res.exit_code == 2 and "10 of 60 eval set items have no response (first: ho-051" in res.output
    assert not (tmp_path / "run").exists()
    res = score("--evalset", "heldout", "--responses", str(resp), "--out", str(tmp_path / "run"),
                "--allow-missing")
    assert res.exit_code == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["n"] == 60 and s["raw_accuracy"]["k"] == 50 and s["status_counts"]["missing"] == 10
    assert "request_error" not in s["status_counts"]


@pytest.mark.parametrize("bad_line, lineno, field, fragment", [
    ({"id": "nope-999", "text": "{}"}, 3, "id", "unknown id 'nope-999'"),
    ({"text": "{}"}, 3, "id", "missing or non-string id"),
    ({"id": "ho-001", "text": "{}"}, 3, "id", "duplicate id 'ho-001'"),
    ({"id": "ho-003", "text": 5}, 3, "text", "text must be a string or null"),
])
def test_bad_response_line_exit_2_and_no_output(tmp_path: Path, bad_line: dict[str, Any], lineno: int,
                                                field: str, fragment: str) -> None:
    resp = gold_responses(tmp_path / "r.jsonl")
    lines = resp.read_text().splitlines(keepends=True)
    resp.write_text("".join(lines[:2]) + json.dumps(bad_line) + "\n" + "".join(lines[2:]))
    out = tmp_path / "run"
    res = score("--evalset", "heldout", "--responses", str(resp), "--out", str(out))
    assert res.exit_code == 2
    assert f"{resp}:{lineno}: field '{field}': " in res.stderr and fragment in res.stderr
    assert "Traceback" not in res.output
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"], "no partial directory is left"


@pytest.mark.parametrize("content, lineno, fragment", [
    ("{not json\n", 1, "malformed JSON"), ("\n", 1, "empty line"), ("[1]\n", 1, "JSON object"),
])
def test_malformed_responses_file(tmp_path: Path, content: str, lineno: int, fragment: str) -> None:
    resp = tmp_path / "r.jsonl"
    resp.write_text(content)
    res = score("--evalset", "dev", "--responses", str(resp), "--out", str(tmp_path / "run"))
    assert res.exit_code == 2 and f"{resp}:{lineno}: " in res.stderr and fragment in res.stderr
    assert not (tmp_path / "run").exists()


def test_missing_responses_file(tmp_path: Path) -> None:
    res = score("--evalset", "dev", "--responses", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and "cannot read responses" in res.stderr


def test_unknown_evalset_and_guardrail(tmp_path: Path) -> None:
    resp = gold_responses(tmp_path / "r.jsonl", "dev")
    res = score("--evalset", "nope", "--responses", str(resp), "--out", str(tmp_path / "o"))
    assert res.exit_code == 2 and "no eval set named 'nope'" in res.stderr
    res = score("--evalset", "dev", "--responses", str(resp), "--out", str(tmp_path / "o"),
                "--guardrails", "ghost")
    assert res.exit_code == 2 and "no guardrail rule set 'ghost'" in res.stderr and "ranking" in res.stderr
    assert not (tmp_path / "o").exists()


def test_existing_output_needs_force(tmp_path: Path) -> None:
    resp = gold_responses(tmp_path / "r.jsonl", "dev")
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    res = score("--evalset", "dev", "--responses", str(resp), "--out", str(out))
    assert res.exit_code == 2 and "--force" in res.stderr and str(out) in res.stderr
    assert (out / "keep.txt").read_text() == "mine" and len(list(out.iterdir())) == 1
    res = score("--evalset", "dev", "--responses", str(resp), "--out", str(out), "--force")
    assert res.exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "records.jsonl", "summary.json"]


@pytest.mark.parametrize("name", ["dev", "heldout", "adversarial"])
def test_evalset_check_shipped(name: str) -> None:
    res = runner.invoke(app, ["evalset", "check", name])
    assert res.exit_code == 0, res.output
    n = len(load_evalset(name, retail_wh()).cases)
    assert f"{n} items OK" in res.stdout and "every gold intent executes" in res.stdout


def test_evalset_check_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    res = runner.invoke(app, ["evalset", "check", str(bad)])
    assert res.exit_code == 2 and f"{bad}:1: field 'question'" in res.stderr


def test_guardrails_none_gives_zero_interventions(tmp_path: Path) -> None:
    resp = false_ranking_responses(tmp_path / "r.jsonl")
    res = score("--evalset", "heldout", "--responses", str(resp), "--out", str(tmp_path / "on"))
    assert res.exit_code == 0
    res = score("--evalset", "heldout", "--responses", str(resp), "--out", str(tmp_path / "off"),
                "--guardrails", "none")
    assert res.exit_code == 0
    on = json.loads((tmp_path / "on" / "summary.json").read_text())
    off = json.loads((tmp_path / "off" / "summary.json").read_text())
    assert on["interventions"] > 0 and off["interventions"] == 0
    assert off["final_accuracy"] == off["raw_accuracy"] and off["rules"] == {}
    assert json.loads((tmp_path / "off" / "manifest.json").read_text())["guardrails"] == []
    assert all(not r["interventions"] for r in iter_records(tmp_path / "off" / "records.jsonl"))


def test_false_ranking_model_is_repaired_on_heldout(tmp_path: Path) -> None:
    resp = false_ranking_responses(tmp_path / "r.jsonl")
    res = score("--evalset", "heldout", "--responses", str(resp), "--out", str(tmp_path / "run"),
                "--guardrails", "consistency,ranking")
    assert res.exit_code == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    n_breakdown = sum(c.gold.intent == "breakdown" for c in load_evalset("heldout", retail_wh()).cases)
    assert s["raw_accuracy"]["k"] == 60 - n_breakdown
    assert s["error_taxonomy_raw"]["false_ranking"] == n_breakdown
    assert s["final_accuracy"]["value"] > s["raw_accuracy"]["value"]
    prec = s["intervention_precision"]
    assert prec["n"] == s["interventions"] > 0 and prec["value"] is not None and prec["ci95"] is not None
    assert s["intervention_recall"]["false_ranking"]["n"] == n_breakdown
    assert s["final_accuracy"]["k"] - s["raw_accuracy"]["k"] == prec["k"]


def test_db_build_rejects_bad_scale(tmp_path: Path) -> None:
    res = runner.invoke(app, ["db", "build", "--out", str(tmp_path / "w.duckdb"), "--scale", "0"])
    assert res.exit_code == 2 and "--scale" in res.stderr
    assert not (tmp_path / "w.duckdb").exists()


def test_db_build(tmp_path: Path) -> None:
    res = runner.invoke(app, ["db", "build", "--out", str(tmp_path / "w.duckdb"), "--scale", "0.01"])
    assert res.exit_code == 0 and (tmp_path / "w.duckdb").is_file()


def test_scoring_leaves_the_garbage_collector_as_it_was(tmp_path: Path) -> None:
    import gc

    res = score("--evalset", "dev", "--responses", str(gold_responses(tmp_path / "r.jsonl", "dev")),
                "--out", str(tmp_path / "run"))
    assert res.exit_code == 0
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_serve_stops_its_server_on_sigterm_even_with_sigint_ignored(tmp_path: Path) -> None:
    """A script's background job starts with SIGINT ignored; TERM (and INT) must still stop vLLM."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from fakeserver import free_port

    from nlq2sql.paths import PROJECT_ROOT

    model = tmp_path / "fakemodel"
    model.mkdir()
    (model / "config.json").write_text("{}")
    wrapper = tmp_path / "fake-vllm-python"
    wrapper.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'child.pid'}\n"
                       f"exec {sys.executable} {PROJECT_ROOT / 'tests' / 'fakeserver.py'} \"$@\"\n")
    wrapper.chmod(0o755)
    env = dict(os.environ, NLQ2SQL_VLLM_PYTHON=str(wrapper))
    proc = subprocess.Popen([sys.executable, "-m", "nlq2sql.cli", "serve", "--model", str(model), "--port",
                             str(free_port())], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(1)]
    while "serving" not in lines[-1] and lines[-1]:
        lines.append(proc.stdout.readline())
    assert "serving" in lines[-1], lines
    child = int((tmp_path / "child.pid").read_text())
    os.kill(child, 0)  # the stand-in server runs
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    deadline = time.time() + 15
    while time.time() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("serve left its server running after SIGTERM")


def test_an_interrupt_suggests_resume_only_to_a_command_that_has_it() -> None:
    import typer

    demo = typer.Typer()

    @demo.command("resumable")
    @cli_common.handled
    def resumable(resume: bool = False) -> None:
        raise KeyboardInterrupt

    @demo.command("oneshot")
    @cli_common.handled
    def oneshot(port: int = 1) -> None:
        raise KeyboardInterrupt

    with_resume = runner.invoke(demo, ["resumable"])
    without = runner.invoke(demo, ["oneshot"])
    assert with_resume.exit_code == 130 and "rerun with --resume" in with_resume.output
    assert without.exit_code == 130 and "interrupted" in without.output and "--resume" not in without.output


def test_command_modules_import_only_the_shared_module() -> None:
    """No cycle: a command module imports ``cli._common``, never ``main`` or another command module."""
    import ast

    from nlq2sql.paths import PROJECT_ROOT

    cli_dir = PROJECT_ROOT / "nlq2sql" / "cli"
    offenders = []
    for path in sorted(cli_dir.glob("*.py")):
        if path.name in ("main.py", "__main__.py", "__init__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module != "_common":
                offenders.append(f"{path.name}: from .{node.module or ''} import …")
    assert offenders == []


def test_score_records_its_version_and_no_machine_path(tmp_path: Path) -> None:
    import hashlib

    responses = gold_responses(tmp_path / "answers.jsonl", "dev")
    res = score("--evalset", "dev", "--responses", str(responses), "--out", str(tmp_path / "run"))
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert summary["record_version"] == manifest["record_version"] == 1
    # Outside the project: the file's name and its sha256, never the absolute path.
    assert manifest["responses"] == "answers.jsonl"
    assert manifest["responses_sha256"] == hashlib.sha256(responses.read_bytes()).hexdigest()
    assert str(tmp_path) not in (tmp_path / "run" / "manifest.json").read_text()


def test_every_warehouse_option_lists_what_ships_from_the_registry() -> None:
    """``--semantic-model`` and ``db build --warehouse`` list the registry's names (jaffle too), not a
    hand-written list that falls behind when a warehouse is added."""
    import typer

    from nlq2sql.paths import WAREHOUSE_DIR
    from nlq2sql.semantic.catalog import shipped_names

    names = shipped_names()
    assert "jaffle" in names and names == sorted(p.parent.name for p in WAREHOUSE_DIR.glob("*/semantic_model.yml"))
    seen: list[str] = []

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            walk(sub, (*path, name))
        for p in getattr(cmd, "params", ()):
            if "--semantic-model" in p.opts or (path == ("db", "build") and "--warehouse" in p.opts):
                seen.append(" ".join(path))
                assert f"({', '.join(names)})" in (p.help or ""), (path, p.opts, p.help)

    walk(typer.main.get_command(app), ())
    assert "db build" in seen and "eval" in seen and "sql" in seen and len(seen) >= 10, seen
