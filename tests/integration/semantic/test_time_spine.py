"""The time spine when a project declares none: dbt's legacy convention (a ``metricflow_time_spine``
table with a ``date_day`` column) when the database holds it, else the generated day table; the
run records which one MetricFlow compiled against."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
from byo_warehouse import build_db, write_model
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.semantic import open_warehouse
from nlq2sql.semantic.binding import has_legacy_spine
from nlq2sql.semantic.query import MetricQuery
from nlq2sql.stages.execute import Executor

runner = CliRunner()
#: A running total needs the spine: every day of it is a row of the answer.
CUMULATIVE_YML = """\
metrics:
  - name: loans_to_date
    label: Loans to date
    type: cumulative
    type_params:
      measure: loan_count
      cumulative_type_params:
        period_agg: last
"""
#: The legacy table covers the first half of 2024 only, so its rows cannot be the generated spine's.
SPINE_FROM, SPINE_TO = "2024-01-01", "2024-06-30"
MONTHLY = MetricQuery(metrics=("loans_to_date",), group_by=("metric_time__month",))


def library(tmp: Path, *, legacy: bool) -> tuple[Path, Path]:
    model = write_model(tmp / "models")
    (model / "cumulative.yml").write_text(CUMULATIVE_YML)
    db = build_db(tmp / "library.duckdb")
    if legacy:
        con = duckdb.connect(str(db))
        con.execute("CREATE TABLE metricflow_time_spine AS SELECT CAST(range AS DATE) AS date_day FROM "
                    f"range(DATE '{SPINE_FROM}', DATE '{SPINE_TO}' + INTERVAL 1 DAY, INTERVAL 1 DAY)")
        con.close()
    return model, db


def months(model: Path, db: Path) -> tuple[str, str, list[str]]:
    wh = open_warehouse(model, db)
    compiled = wh.catalog.engine.compile(MONTHLY)
    with Executor(db) as ex:
        rows = ex.run(compiled)
    return wh.catalog.spine, compiled.sql, sorted(str(r[0])[:7] for r in rows)


def test_the_legacy_spine_is_used_when_the_database_has_it(tmp_path: Path) -> None:
    model, db = library(tmp_path / "legacy", legacy=True)
    spine, sql, got = months(model, db)
    assert spine == "legacy" and "metricflow_time_spine" in sql and "range(" not in sql
    assert got == [f"2024-{m:02d}" for m in range(1, 7)]  # the table's days, not the generated range
    plain_model, plain_db = library(tmp_path / "plain", legacy=False)
    spine, sql, got = months(plain_model, plain_db)
    assert spine == "generated" and "metricflow_time_spine" not in sql
    assert len(got) > 6 and got[0] == "2023-01"  # every month of the data


def test_a_table_without_date_day_is_not_the_legacy_spine(tmp_path: Path) -> None:
    model, db = library(tmp_path, legacy=False)
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE metricflow_time_spine (ds DATE)")
    assert not has_legacy_spine(con)
    con.close()
    assert open_warehouse(model, db).catalog.spine == "generated"


def test_which_spine_is_recorded_and_shown(tmp_path: Path) -> None:
    """``semantic show`` says which spine; an offline run's manifest records it."""
    model, db = library(tmp_path, legacy=True)
    res = runner.invoke(app, ["semantic", "show", "--semantic-model", str(model), "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["time_spine"] == "legacy"
    res = runner.invoke(app, ["semantic", "show", "--semantic-model", str(model), "--db", str(db)])
    assert res.exit_code == 0 and "time spine: legacy" in res.stdout.splitlines()[0], res.output
    evalset = tmp_path / "set.jsonl"
    gold = {"metrics": ["loans_to_date"], "group_by": ["metric_time__month"]}
    evalset.write_text(json.dumps({"id": "q1", "question": "Loans to date by month", "gold": gold,
                                   "category": "time_series"}) + "\n")
    responses = tmp_path / "responses.jsonl"
    responses.write_text(json.dumps({"id": "q1", "text": json.dumps(gold)}) + "\n")
    res = runner.invoke(app, ["score", "--answer", "query", "--semantic-model", str(model), "--db", str(db),
                              "--evalset", str(evalset), "--responses", str(responses), "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["time_spine"] == "legacy"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["final_accuracy"]["k"] == 1
    # the same layer on a copy of the data without the table: the generated spine, recorded as such
    other = tmp_path / "other.duckdb"
    shutil.copy(db, other)
    con = duckdb.connect(str(other))
    con.execute("DROP TABLE metricflow_time_spine")
    con.close()
    assert open_warehouse(model, other).catalog.spine == "generated"
