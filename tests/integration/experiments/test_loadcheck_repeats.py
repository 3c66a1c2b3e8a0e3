"""load-check --repeats: identity run to run at one concurrency (plain nondeterminism) is reported
apart from identity across concurrency levels (batch effects)."""

from __future__ import annotations

import json
from pathlib import Path

from fakeserver import FakeServer, by_ids, script
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.experiments import loadcheck
from nlq2sql.run.config import EvalConfig, LoadShape

OTHER = '{"intent":"breakdown","metric":"revenue","dimension":"category","time_grain":null,"filters":[],' \
        '"limit":null,"order":null}'


def test_run_to_run_and_across_levels_are_told_apart(tmp_path: Path) -> None:
    # Runs go c1-r0, c1-r1, c2-r0, c2-r1: item 1 answers differently only in c1's second repeat,
    # so c1 is not reproducible run to run while c1 and c2 agree on their first repeats.
    ids = ["ho-001", "ho-002", "ho-003"]
    spec = script(by_question=by_ids("heldout", {ids[0]: ["ok", {"kind": "text", "text": OTHER}, "ok", "ok"]}))
    with FakeServer(tmp_path / "fake", spec, model="m") as fake:
        base = EvalConfig(evalset="heldout", out=tmp_path / "lc", endpoint=fake.url, model="m", limit=3,
                          load=LoadShape(metrics_interval_s=0.05))
        dirs = loadcheck.run_levels(loadcheck.LoadCheckConfig(base, (1, 2), repeats=2))
    assert [d.name for d in dirs] == ["c1-r0", "c1-r1", "c2-r0", "c2-r1"]
    split = loadcheck.split_identity(dirs)
    assert isinstance(split.run_to_run, dict) and split.across_levels_first_repeat is not None
    assert split.run_to_run["c1"].identical_items == 2 and split.run_to_run["c1"].divergent_ids == [ids[0]]
    assert split.run_to_run["c2"].identical_items == 3
    assert split.across_levels_first_repeat.identical_items == 3
    md = loadcheck.render_markdown(loadcheck.compare_runs(dirs).with_split(split))
    assert "run to run at c1 | 2 | 2 / 3" in md and "across levels (first repeat) | 2 | 3 / 3" in md


def test_cli_records_the_split_and_refuses_batch_invariant_for_an_endpoint(tmp_path: Path) -> None:
    with FakeServer(tmp_path / "fake", script(), model="m") as fake:
        out = tmp_path / "lc"
        res = CliRunner().invoke(app, ["load-check", "--endpoint", fake.url, "--model", "m", "--limit", "2",
                                       "--concurrency", "1", "--repeats", "2", "--out", str(out)])
        assert res.exit_code == 0, res.output
        result = json.loads((out / "loadcheck.json").read_text())
        assert result["run_to_run"]["c1"]["identical_items"] == 2 and "across_levels_first_repeat" not in result
        assert result["server"] == {"started_by_us": False, "batch_invariant": None, "structured_outputs": None}
        res = CliRunner().invoke(app, ["load-check", "--endpoint", fake.url, "--model", "m", "--limit", "2",
                                       "--concurrency", "1,2", "--batch-invariant", "--out", str(tmp_path / "x")])
        assert res.exit_code == 2 and "only for a local server" in res.output
        assert not (tmp_path / "x").exists()
