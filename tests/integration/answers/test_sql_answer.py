"""The direct-SQL answer (``--answer sql``) through the CLI: offline scoring and a live run against
the fake server — same eval sets and gold rows as the v2 answer, SQL guarded and sandboxed."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.semantic import load_catalog
from nlq2sql.stages.queryset import load_query_set

runner = CliRunner()
CAT = load_catalog("retail")


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _answers(secret: Path) -> dict[str, str]:
    qs = load_query_set("heldout", CAT)
    a, b, c, d = qs.cases[:4]
    assert a.gold is not None and b.gold is not None
    return {a.id: CAT.engine.compile(a.gold).sql.replace("$1", "'2025-01-01'").replace("$2", "'2025-12-31'"),
            b.id: f"SELECT * FROM read_csv('{secret}')",
            c.id: "Sure! Here is the answer: orders by category.",
            d.id: "SELECT 1; DROP TABLE order_lines"}


def test_score_answer_sql_guards_and_scores_by_rows(tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("token\nTOPSECRET-42\n")
    answers = _answers(secret)
    responses = _write(tmp_path / "r.jsonl", [{"id": k, "text": v} for k, v in answers.items()])
    res = runner.invoke(app, ["score", "--answer", "sql", "--evalset", "heldout", "--responses", str(responses),
                              "--out", str(tmp_path / "run"), "--allow-missing"])
    assert res.exit_code == 0, res.output
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "run" / "records.jsonl").read_text().splitlines())}
    first, second, third, fourth = answers
    assert recs[first]["correct_final"] and recs[first]["answer"] == "sql"
    assert recs[second]["status"] == "sql_refused" and not recs[second]["correct_final"]
    assert recs[third]["status"] == "unparsable"
    assert recs[fourth]["status"] == "sql_refused"
    everything = "".join(p.read_text() for p in (tmp_path / "run").iterdir())
    assert "TOPSECRET-42" not in everything, "nothing outside the warehouse is read"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["answer"] == "sql" and summary["final_accuracy"]["k"] == 1 and summary["field_accuracy"] == {}


def test_eval_answer_sql_against_the_fake_server(tmp_path: Path) -> None:
    from fakeserver import FakeServer, script

    qs = load_query_set("heldout", CAT)
    secret = tmp_path / "secret.csv"
    secret.write_text("TOPSECRET-42\n")
    answers = _answers(secret)
    by_q = {c.question: [{"kind": "text", "text": answers[c.id]}] for c in qs.cases[:4]}
    with FakeServer(tmp_path / "fake", script(by_question=by_q), model="fake-model") as fake:
        res = runner.invoke(app, ["eval", "--answer", "sql", "--evalset", "heldout", "--endpoint", fake.url,
                                  "--model", "fake-model", "--limit", "4", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert summary["answer"] == "sql" and summary["final_accuracy"]["k"] == 1 and summary["n"] == 4
    assert manifest["prompt"] == "sql" and manifest["sampling"]["structured"] == "none"
    assert "schema_json" not in manifest["sampling"]


def test_a_statement_nested_past_the_parser_is_an_outcome_and_unordered_rows_are_shown_sorted() -> None:
    """A model's SQL nested thousands deep (seen in a recorded run) must not crash the scorer;
    an answer without ORDER BY is hashed and shown order-free, so two runs record the same."""
    from nlq2sql.answers.sql.guard import check_sql
    from nlq2sql.answers.sql.score import sql_record
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.execute import Executor

    deep = "SELECT " + "CAST(" * 3000 + "1" + " AS INT)" * 3000
    assert check_sql(deep, ("customers",)).ordered is False
    assert check_sql("SELECT 1 ORDER BY 1", ()).ordered is True and check_sql("SELECT 1", ()).ordered is False
    wh = open_warehouse("retail")
    case = load_query_set("heldout", CAT).cases[0]
    with Executor(wh.db_path) as ex:
        rec = sql_record(case, deep, ex, CAT).to_json()
        assert rec["status"] != "ok" and rec["correct_final"] is False
        plain = "SELECT region FROM customers GROUP BY region"
        a = sql_record(case, plain, ex, CAT).to_json()
        b = sql_record(case, plain + " ORDER BY region DESC", ex, CAT).to_json()
    assert a["result_head"] == sorted(a["result_head"], key=repr)
    assert b["result_head"] == sorted(b["result_head"], key=repr, reverse=True)
