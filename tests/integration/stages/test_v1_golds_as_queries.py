"""Issue 21's migration check on every shipped warehouse with v1 sets: each v1 gold restated as a
MetricFlow query (``from_v1``, how v2 runs read those sets, and what ``evalset upgrade`` writes)
returns the rows the v1 SQL builder's query returns; the written v2 set reads back as the same
items; a gold whose rows would change is reported with every other one, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.evalset import evalset_dir
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.queryset import load_query_set, upgrade_v1_set


@pytest.mark.parametrize("warehouse", ["retail", "tpch", "flights"])
def test_every_v1_set_upgrades_to_v2_with_the_same_rows(warehouse: str, tmp_path: Path) -> None:
    wh = open_warehouse(warehouse)
    n = 0
    with Executor(wh.db_path) as ex:
        for name in ("dev", "heldout", "adversarial"):
            up = upgrade_v1_set(evalset_dir(warehouse) / f"{name}.jsonl", wh, ex)
            assert up.problems == (), (warehouse, name, up.problems[:3])
            out = tmp_path / f"{name}.jsonl"
            out.write_text("".join(line + "\n" for line in up.lines))
            # The written v2 set is the set v2 runs read from the v1 file: same items, same golds.
            assert load_query_set(out, wh.catalog).cases == load_query_set(name, wh.catalog).cases
            assert all(json.loads(line)["gold"].get("metrics") for line in up.lines)
            n += len(up.lines)
    assert n >= 80, n  # dev + held-out + adversarial: every line read


def test_upgrade_reports_every_changed_gold_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nlq2sql.stages.queryset as qs

    src = tmp_path / "v1.jsonl"
    src.write_text("".join(line for line in (evalset_dir("retail") / "dev.jsonl").read_text().splitlines(True)[:5]))
    out = tmp_path / "v2.jsonl"
    real = qs.rows_equal
    calls = iter(range(100))
    # Two golds whose v2 rows would differ (the check itself is what is under test here).
    monkeypatch.setattr(qs, "rows_equal",
                        lambda a, b, *, ordered: real(a, b, ordered=ordered) and next(calls) not in (1, 3))
    res = CliRunner().invoke(app, ["evalset", "upgrade", str(src), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert res.output.count("rows differ from the v1 gold's") == 2 and "nothing written" in res.output
    assert not out.exists() and not (tmp_path / "v2.jsonl.tmp").exists()
    monkeypatch.setattr(qs, "rows_equal", real)
    res = CliRunner().invoke(app, ["evalset", "upgrade", str(src), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert len(out.read_text().splitlines()) == 5
    again = CliRunner().invoke(app, ["evalset", "upgrade", str(src), "--out", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
    assert CliRunner().invoke(app, ["evalset", "upgrade", str(out), "--out", str(tmp_path / "x.jsonl")]).exit_code == 2
    assert CliRunner().invoke(app, ["evalset", "check", str(out)]).exit_code == 0
