"""The README's first command, as written there, runs end to end against the real server
(the test's model and endpoint swapped in, a few items): the main job's options stay valid."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.run.presets import presets
from nlq2sql.run.server import LocalServer


def readme_main_job() -> list[str]:
    """The arguments of the ``nlq2sql eval`` in the README's first code block (after setup.sh)."""
    text = (PROJECT_ROOT / "README.md").read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    first = block.split("# 2.", 1)[0].replace("\\\n", " ")
    line = next(x for x in first.splitlines() if "nlq2sql eval" in x)
    args = shlex.split(line.split(".venv/bin/nlq2sql", 1)[1])
    assert args[0] == "eval", line
    return args[1:]


def _swap(args: list[str], option: str, value: str) -> list[str]:
    i = args.index(option)
    return [*args[:i + 1], value, *args[i + 2:]]


def test_the_readme_main_job_runs_as_written(vllm_server: LocalServer, tmp_path: Path) -> None:
    args = readme_main_job()
    assert "--preset" in args and "--out" in args  # what the README promises: the recommended spec, by name
    preset = presets()[args[args.index("--preset") + 1]]
    out = tmp_path / "run"
    args = _swap(args, "--out", str(out))  # the test's model and endpoint: given options win over the preset
    res = CliRunner().invoke(app, ["eval", *args, "--model", vllm_server.model_name, "--endpoint", vllm_server.url,
                                   "--limit", "3", "--max-tokens", "160"])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert manifest["answer"] == preset.values["answer"] and summary["n"] == 3
    assert manifest["spec"]["conditions"]["examples"] == preset.values["examples"]
    assert re.search(r"final accuracy", res.output)
