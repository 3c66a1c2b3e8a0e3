"""The synthetic example bank (issue 22): made from the semantic layer and data alone, checked by
execution, deterministic for a seed, disjoint from every shipped eval set, the default bank of a
warehouse that has no dev set, and recorded in the manifest like any bank."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from repo_paths import ROOT
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.conditions.example_bank import load_bank, normalise
from nlq2sql.conditions.synth import SYNTHETIC_TAG, synthesize, to_jsonl
from nlq2sql.errors import InputError
from nlq2sql.semantic import open_warehouse
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import SPEC_FILE, WAREHOUSE_DIR
from nlq2sql.semantic.warehouse import build
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.queryset import check_query_set, load_query_set

runner = CliRunner()
N = 60


@pytest.fixture(scope="module")
def retail(small_warehouse: Path) -> Warehouse:
    return open_warehouse("retail", small_warehouse)


@pytest.fixture(scope="module")
def jaffle(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    return open_warehouse("jaffle", build(tmp_path_factory.mktemp("jaffle") / "jaffle.duckdb", name="jaffle"))


def _shipped_questions() -> dict[str, str]:
    files = [*(ROOT / "evalsets").glob("*.jsonl"), *WAREHOUSE_DIR.glob("*/evalsets/*.jsonl")]
    out = {}
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out[normalise(json.loads(line)["question"])] = f.name
    assert len(out) > 400, "the shipped sets were found"
    return out


def test_same_seed_same_bytes_other_seed_other_bank(retail: Warehouse) -> None:
    a = to_jsonl(synthesize(retail, N, 7), 7)
    assert a == to_jsonl(synthesize(retail, N, 7), 7)
    assert a != to_jsonl(synthesize(retail, N, 8), 8)


@pytest.mark.parametrize("name", ["retail", "jaffle"])
def test_every_example_compiles_returns_rows_and_is_distinct(name: str, request: pytest.FixtureRequest,
                                                             tmp_path: Path) -> None:
    wh: Warehouse = request.getfixturevalue(name)
    examples = synthesize(wh, N, 0)
    assert len(examples) == N
    path = tmp_path / "bank.jsonl"
    path.write_text(to_jsonl(examples, 0))
    bank = load_query_set(path, wh.catalog)  # a v2 eval set: every gold compiles on load
    with Executor(wh.db_path) as ex:
        assert check_query_set(bank, wh.catalog, ex) == []  # and returns rows
    assert len({normalise(c.question) for c in bank.cases}) == N
    assert len({c.gold.key() for c in bank.cases if c.gold is not None}) == N
    assert all(SYNTHETIC_TAG in c.tags and "seed:0" in c.tags for c in bank.cases)
    golds = [c.gold for c in bank.cases if c.gold is not None]
    # the v2 shapes are there, not one shape repeated
    assert any(len(g.metrics) == 2 for g in golds) and any(len(g.group_by) == 2 for g in golds)
    assert any(g.limit and g.order_by for g in golds) and any(g.kind == "time_series" for g in golds)
    assert any(w.op == "in" for g in golds for w in g.where or ())
    assert any(w.field == "metric_time__day" for g in golds for w in g.where or ())
    if name == "jaffle":
        assert any(gb.count("__") >= 2 for g in golds for gb in g.group_by), "a multi-hop group-by"


@pytest.mark.parametrize("name", ["retail", "jaffle"])
def test_default_bank_shares_no_question_with_any_shipped_set(name: str, request: pytest.FixtureRequest) -> None:
    wh: Warehouse = request.getfixturevalue(name)
    shipped = _shipped_questions()
    clashes = [(e.question, shipped[normalise(e.question)]) for e in synthesize(wh) if normalise(e.question) in shipped]
    assert clashes == []


def test_a_warehouse_without_a_dev_set_gets_the_synthetic_bank(tmp_path: Path, small_warehouse: Path) -> None:
    model = tmp_path / "shop" / SPEC_FILE
    model.parent.mkdir()
    shutil.copy(WAREHOUSE_DIR / "retail" / SPEC_FILE, model)
    wh = open_warehouse(model, small_warehouse)
    bank = load_bank(None, wh, 8, "query")
    m = bank.manifest(8)
    assert m.synthetic is True and m.seed == 0 and m.bank_size == len(bank.cases) > 8
    assert m.bank.startswith("synthetic-") and not m.bank_path.startswith("/")
    again = load_bank(None, wh, 8, "query").manifest(8)
    assert again.bank_sha256 == m.bank_sha256, "cached and deterministic"
    with pytest.raises(InputError, match="--answer query"):
        load_bank(None, wh, 8, "intent")
    shipped = load_bank(None, open_warehouse("retail", small_warehouse), 8, "query").manifest(8)
    assert shipped.bank == "dev" and shipped.synthetic is False
    named = load_bank("synthetic", open_warehouse("retail", small_warehouse), 8, "query").manifest(8)
    assert named.synthetic is True


def test_cli_writes_the_bank_and_refuses_bad_input(tmp_path: Path, small_warehouse: Path) -> None:
    out = tmp_path / "bank.jsonl"
    args = ["examples", "synth", "--semantic-model", "retail", "--db", str(small_warehouse)]
    res = runner.invoke(app, [*args, "--n", "12", "--seed", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "wrote 12 examples" in res.output and len(out.read_text().splitlines()) == 12
    res = runner.invoke(app, ["evalset", "check", str(out), "--semantic-model", "retail", "--db", str(small_warehouse)])
    assert res.exit_code == 0, res.output
    for bad, expect in (([*args, "--n", "0"], "--n"), ([*args, "--n", "-3"], "--n"),
                        (["examples", "synth", "--semantic-model", str(tmp_path / "nosuch.yml")], "no semantic model")):
        target = tmp_path / "never.jsonl"
        res = runner.invoke(app, [*bad, "--out", str(target)])
        assert res.exit_code == 2, res.output
        assert expect in res.output and "Traceback" not in res.output
        assert not target.exists(), "nothing half-written"
    res = runner.invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 2 and "--force" in res.output
