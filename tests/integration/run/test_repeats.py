"""eval --repeats: the same items N times in seeded orders, summarised across repeats; resume
finishes each repeat exactly once; gate and compare pair items over repeats with standard
errors clustered by pair_id."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from fakeserver import FakeServer, script
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.run.repeats import cluster_mean, paired_difference, repeat_dirs

N_ITEMS = 6


def _ids(run: Path) -> list[str]:
    return [json.loads(x)["id"] for x in (run / "records.jsonl").read_text().splitlines()]


def _eval(fake: FakeServer, out: Path, *extra: str) -> None:
    res = CliRunner().invoke(app, ["eval", "--endpoint", fake.url, "--model", "m", "--limit", str(N_ITEMS),
                                   "--concurrency", "1", "--out", str(out), "--max-failure-rate", "1", *extra])
    assert res.exit_code == 0, res.output


def test_cluster_standard_error_by_pair_id() -> None:
    values = {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0}
    res = cluster_mean(values, {"a": "g1", "b": "g1", "c": "g2", "d": "g2"})
    assert res.mean == 0.5 and res.n_clusters == 2
    assert res.se_cluster is not None and math.isclose(res.se_cluster, 0.5)  # sqrt(2/1 * (1² + 1²)) / 4
    assert res.se_naive is not None and math.isclose(res.se_naive, 0.5773502691896258 / 2)
    independent = cluster_mean(values, {k: k for k in values})
    assert independent.se_cluster is not None
    assert independent.se_cluster < res.se_cluster  # paraphrases agreeing are weaker evidence


def test_repeats_seeded_orders_summary_and_resume(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    with FakeServer(tmp_path / "fake", script(), model="m") as fake:
        _eval(fake, out, "--repeats", "3")
        dirs = repeat_dirs(out)
        assert [d.name for d in dirs] == ["r0", "r1", "r2"]
        orders = [_ids(d) for d in dirs]
        assert all(sorted(o) == sorted(orders[0]) and len(o) == N_ITEMS for o in orders)
        assert len({tuple(o) for o in orders}) > 1  # each repeat its own order
        seeds = [json.loads((d / "manifest.json").read_text())["load"]["order_seed"] for d in dirs]
        assert seeds == [0, 1, 2]
        result = json.loads((out / "repeats.json").read_text())
        assert result["repeats"] == 3 and len(result["per_repeat"]) == 3
        assert result["item_level_accuracy"]["n_items"] == N_ITEMS
        acc = result["across_repeats"]["accuracy"]
        assert acc["n"] == 3 and acc["sd"] == 0.0  # the fake answers deterministically
        # Interrupt: r1 lost whole, r2 lost its summary and all but two records.
        r0_mtime = os.stat(dirs[0] / "records.jsonl").st_mtime_ns
        for f in (dirs[1]).iterdir():
            f.unlink()
        dirs[1].rmdir()
        (dirs[2] / "summary.json").unlink()
        kept = (dirs[2] / "records.jsonl").read_text().splitlines()[:2]
        (dirs[2] / "records.jsonl").write_text("\n".join(kept) + "\n")
        before = len(fake.chat_requests())
        _eval(fake, out, "--repeats", "3", "--resume")
        assert len(fake.chat_requests()) - before == N_ITEMS + (N_ITEMS - 2)  # r1 whole, r2's missing items
        assert os.stat(dirs[0] / "records.jsonl").st_mtime_ns == r0_mtime  # a finished repeat is kept
        for d in repeat_dirs(out):
            ids = _ids(d)
            assert len(ids) == len(set(ids)) == N_ITEMS  # every item exactly once per repeat
        res = CliRunner().invoke(app, ["eval", "--endpoint", fake.url, "--model", "m", "--out", str(out),
                                       "--repeats", "3"])
        assert res.exit_code == 2 and "--resume" in res.output


def test_gate_and_compare_pair_items_over_repeats(tmp_path: Path) -> None:
    from nlq2sql.stages.evalset import load_evalset

    base, cand = tmp_path / "base", tmp_path / "cand"
    cases = load_evalset("heldout", retail_wh()).cases[:N_ITEMS]
    gold = {c.question: [{"kind": "text", "text": c.gold.model_dump_json()}] * 2 for c in cases}
    with FakeServer(tmp_path / "fb", script(by_question=gold), model="m") as fake:  # every answer right
        _eval(fake, base, "--repeats", "2")
    right = [json.loads(x)["id"] for x in (base / "r0" / "records.jsonl").read_text().splitlines()
             if json.loads(x)["correct_final"]]
    assert len(right) == N_ITEMS
    broken = {c.question: ["schema_invalid"] * 2 for c in cases[:3]}  # three items wrong in every repeat
    with FakeServer(tmp_path / "fc", script(by_question={**gold, **broken}), model="m") as fake:
        _eval(fake, cand, "--repeats", "2")
    right = right[:3]
    diff = paired_difference(repeat_dirs(base), repeat_dirs(cand))
    assert diff.mean is not None and math.isclose(diff.mean, -len(right) / N_ITEMS) and diff.n_items == N_ITEMS
    res = CliRunner().invoke(app, ["gate", "--baseline", str(base), "--candidate", str(cand), "--max-drop", "100",
                                   "--out", str(tmp_path / "g")])
    gate = json.loads((tmp_path / "g" / "gate.json").read_text())
    check = next(c for c in gate["checks"] if c["id"] == "accuracy_repeats")
    assert math.isclose(check["numbers"]["difference"], -len(right) / N_ITEMS)
    assert res.exit_code == (1 if gate["verdict"] == "fail" else 0)
    res = CliRunner().invoke(app, ["gate", "--baseline", str(base), "--candidate", str(cand / "r0")])
    assert res.exit_code == 2 and "repeated run" in res.output
    res = CliRunner().invoke(app, ["compare", str(base), str(cand), "--out", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Repeated runs" in md and f"{-100 * len(right) / N_ITEMS:+.1f} pp" in md
