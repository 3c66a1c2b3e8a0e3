"""matrix --repeats: each prompt's run repeated in seeded orders, every repeat re-scored under
every condition; accuracy and latency mean ± CI across repeats, pairs compared item by item over
the repeats with standard errors clustered by pair_id (as eval --repeats, gate and compare)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from fakeserver import FakeServer, script
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.run.repeats import cluster_mean, repeat_dirs

N_ITEMS = 6
REPEATS = 3


def _ids(run: Path) -> list[str]:
    return [json.loads(x)["id"] for x in (run / "records.jsonl").read_text().splitlines()]


def test_matrix_repeats_across_repeats_and_paired_over_repeats(tmp_path: Path) -> None:
    from nlq2sql.stages.evalset import load_evalset

    cases = load_evalset("heldout", retail_wh()).cases[:N_ITEMS]
    gold = [{"kind": "text", "text": c.gold.model_dump_json()} for c in cases]
    # Requests per question: baseline r0, r1, r2, then contrastive r0, r1, r2 (concurrency 1).
    # Items 0-1 right everywhere; items 2-3 right under baseline only; item 4 right in baseline's
    # first repeat only (flaky); item 5 wrong everywhere.
    plan = {0: "RRRRRR", 1: "RRRRRR", 2: "RRRWWW", 3: "RRRWWW", 4: "RWWWWW", 5: "WWWWWW"}
    by_q = {c.question: [g if x == "R" else "schema_invalid" for x in plan[i]]
            for i, (c, g) in enumerate(zip(cases, gold, strict=True))}
    out = tmp_path / "mx"
    with FakeServer(tmp_path / "fake", script(by_question=by_q), model="m") as fake:
        res = CliRunner().invoke(app, ["matrix", "--endpoint", fake.url, "--model", "m", "--limit", str(N_ITEMS),
                                       "--prompts", "baseline,contrastive", "--guardrails", "none",
                                       "--concurrency", "1", "--repeats", str(REPEATS), "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert len(fake.chat_requests()) == 2 * REPEATS * N_ITEMS
    for prompt in ("baseline", "contrastive"):
        dirs = repeat_dirs(out / f"heldout-{prompt}")
        assert [d.name for d in dirs] == [f"r{k}" for k in range(REPEATS)]
        seeds = [json.loads((d / "manifest.json").read_text())["load"]["order_seed"] for d in dirs]
        assert seeds == list(range(REPEATS))  # each repeat its own seeded order
        orders = [_ids(d) for d in dirs]
        assert all(sorted(o) == sorted(orders[0]) for o in orders) and len({tuple(o) for o in orders}) > 1
    table = json.loads((out / "matrix.json").read_text())
    rows = {c["condition"]: c for c in table["conditions"]}
    ids = [c.id for c in cases]
    expected = {"baseline": [sum(plan[i][k] == "R" for i in range(N_ITEMS)) / N_ITEMS for k in range(REPEATS)],
                "contrastive": [sum(plan[i][REPEATS + k] == "R" for i in range(N_ITEMS)) / N_ITEMS
                                for k in range(REPEATS)]}
    for prompt, accs in expected.items():
        rep = rows[prompt]["repeats"]
        assert rep["repeats"] == REPEATS
        assert all(math.isclose(a, b) for a, b in zip(rep["per_repeat_accuracy"], accs, strict=True))
        assert math.isclose(rep["accuracy"]["mean"], sum(accs) / REPEATS)
        lo, hi = rep["accuracy"]["ci95"]
        assert lo <= rep["accuracy"]["mean"] <= hi and (hi > lo) == (len(set(accs)) > 1)
        assert rep["latency_p50_s"]["n"] == REPEATS and rep["latency_p95_s"]["mean"] is not None
        assert rep["item_level_accuracy"]["n_items"] == N_ITEMS
    # Baseline: item 4 right in 1 of 3 repeats -> its item-level accuracy is (2 + 2 + 1/3) / 6.
    assert math.isclose(rows["baseline"]["repeats"]["item_level_accuracy"]["mean"], (4 + 1 / 3) / N_ITEMS)
    pair = table["pairs"][0]
    assert (pair["a"], pair["b"]) == ("baseline", "contrastive")
    over = pair["over_repeats"]
    diffs = {ids[i]: (plan[i][REPEATS:].count("R") - plan[i][:REPEATS].count("R")) / REPEATS for i in range(N_ITEMS)}
    recs = [json.loads(x) for x in (out / "heldout-baseline" / "r0" / "records.jsonl").read_text().splitlines()]
    clusters = {r["id"]: r.get("pair_id") or r["id"] for r in recs}
    assert len(set(clusters.values())) < N_ITEMS  # paraphrases among these items: clustering matters
    want = cluster_mean(diffs, clusters)
    assert want.se_cluster is not None and want.mean is not None
    assert not math.isclose(want.se_cluster, cluster_mean(diffs, {i: i for i in ids}).se_cluster or 0.0)
    assert math.isclose(over["mean"], want.mean) and math.isclose(over["se_cluster"], want.se_cluster)
    assert over["baseline_repeats"] == over["candidate_repeats"] == REPEATS
    assert pair["a_right_b_wrong"] == 3 and pair["b_right_a_wrong"] == 0  # McNemar on the first repeat
    md = (out / "matrix.md").read_text()
    assert "Across repeats" in md and f"{100 * want.mean:+.1f} pp" in md
    # Re-scoring the recorded repeated runs gives the same table.
    again = tmp_path / "again"
    res = CliRunner().invoke(app, ["matrix", "--runs", str(out / "heldout-baseline"), "--runs",
                                   str(out / "heldout-contrastive"), "--guardrails", "none", "--out", str(again)])
    assert res.exit_code == 0, res.output
    redo = json.loads((again / "matrix.json").read_text())
    assert math.isclose(redo["pairs"][0]["over_repeats"]["mean"], over["mean"])


def test_matrix_repeats_bad_input(tmp_path: Path) -> None:
    for args, needle in ((["--repeats", "0"], "--repeats"), (["--repeats", "101"], "--repeats"),
                         (["--repeats", "2", "--answers", "query,sql"], "--answers")):
        res = CliRunner().invoke(app, ["matrix", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m",
                                       "--out", str(tmp_path / "x"), *args])
        assert res.exit_code == 2 and needle in res.output, res.output
        assert not (tmp_path / "x").exists()
