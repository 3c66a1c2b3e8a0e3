"""The main job's run spec (``--preset main-job``) runs unchanged through every command that
runs the model — eval, eval --repeats, load-check, sweep, tune, matrix and batch — against the
fault suite's fake server (answering a v2 query to everything), every run records the preset's
spec, and ``score --run`` re-derives each scored run byte for byte."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, script
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.run.presets import presets
from nlq2sql.run.spec import RunSpec

MODEL = "fake-model"
QUERY = {"metrics": ["revenue"], "group_by": ["customer_id__region"], "where": [], "order_by": [], "limit": None}
runner = CliRunner()

#: Each command with the options of its own beside the preset, and where its runs' manifests land.
COMMANDS: dict[str, tuple[list[str], str]] = {
    "eval": (["eval", "--limit", "2", "--max-failure-rate", "1"], "manifest.json"),
    "repeats": (["eval", "--limit", "2", "--repeats", "2", "--max-failure-rate", "1"], "r*/manifest.json"),
    "load-check": (["load-check", "--limit", "2", "--concurrency", "1,2", "--allow-diff"], "c*/manifest.json"),
    "sweep": (["sweep", "--concurrency", "1,2", "--requests", "2"], "levels/*/manifest.json"),
    "tune": (["tune", "--slo", "e2e_p95<=60s", "--hi", "2", "--probes", "2", "--requests", "4", "--warmup", "0"],
             "probes/*/manifest.json"),
    "matrix": (["matrix", "--limit", "2"], "*/manifest.json"),
}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    tmp = tmp_path_factory.mktemp("fake")
    with FakeServer(tmp / "fake", script(default={"kind": "text", "text": json.dumps(QUERY)}), model=MODEL) as f:
        yield f


def _expected() -> dict[str, Any]:
    """The preset's spec as a run records it, with the test's model given beside it (it wins)."""
    return RunSpec.build({**presets()["main-job"].values, "model": MODEL}).recorded().to_json()


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_main_job_spec_runs_through_every_command(name: str, fake: FakeServer, tmp_path: Path) -> None:
    argv, pattern = COMMANDS[name]
    out = tmp_path / name
    res = runner.invoke(app, [*argv, "--preset", "main-job", "--model", MODEL, "--endpoint", fake.url,
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    manifests = sorted(out.glob(pattern))
    assert len(manifests) >= (1 if name in ("eval", "matrix") else 2), manifests  # (the matrix: one cell)
    for path in manifests:
        manifest = json.loads(path.read_text())
        want = _expected()
        if name == "matrix":  # its live run goes without guardrails: they are its axis, re-scored offline
            want["guardrails"] = []
            arms = [c["guardrails"] for c in json.loads((out / "matrix.json").read_text())["conditions"]]
            assert arms == [[], ["learned:ranking", "sort"]]
        assert manifest["spec"] == want, path  # compared as parsed
        assert (manifest["answer"], manifest["examples"]["k"], manifest["link_values"]) == ("query", 8, "both")
        again = tmp_path / "rescored" / path.parent.relative_to(out)
        res = runner.invoke(app, ["score", "--run", str(path.parent), "--out", str(again)])
        assert res.exit_code == 0, res.output
        for file in ("records.jsonl", "summary.json", "manifest.json"):
            assert (again / file).read_bytes() == (path.parent / file).read_bytes(), (path.parent, file)


def test_batch_takes_the_main_job_spec(fake: FakeServer, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    res = runner.invoke(app, ["batch", "--engine", "local", "--evalset", "heldout", "--limit", "2", "--format",
                              "jsonl", "--preset", "main-job", "--model", MODEL, "--endpoint", fake.url,
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["answer"], manifest["model"], manifest["examples"]["k"], manifest["link_values"]) == \
        ("query", MODEL, 8, "both")
    assert manifest["guardrails"][:2] == ["learned:ranking", "sort"]
