"""Gold-SQL eval sets: questions whose answers are SQL, scored by result equivalence in every
answer kind (sql, sql-grammar, query, intent), checked in the sandbox, with search_path and import."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from nlq2sql.answers.kinds import KINDS
from nlq2sql.answers.sql.gold import COLUMN_RULE, GoldRunner, check_gold_sql_set
from nlq2sql.answers.sql.sandbox import Sandbox
from nlq2sql.cli.main import app
from nlq2sql.errors import EvalSetError, EvalSetProblems, InputError
from nlq2sql.semantic import Warehouse, open_warehouse
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.goldsql import (
    GoldSqlCase,
    derive_category,
    derive_ordered,
    layer_search_path,
    load_gold_sql_set,
    parse_search_path,
)
from nlq2sql.stages.goldsql_import import ImportOptions, defog_alternatives, import_gold_sql

runner = CliRunner()

REV = "l.quantity * l.unit_price * (1 - l.discount)"
BY_REGION = (f"SELECT c.region, SUM({REV}) AS revenue FROM order_lines l "
             "LEFT JOIN customers c ON l.customer_id = c.customer_id GROUP BY c.region")
# The same rows by another statement (a subquery, positional GROUP BY, other names).
BY_REGION_TOO = (f"SELECT r AS where_, SUM(v) AS total FROM (SELECT c.region AS r, {REV} AS v FROM order_lines l "
                 "LEFT JOIN customers c USING (customer_id)) GROUP BY 1")
UNITS_BY_REGION = ("SELECT c.region, SUM(l.quantity) AS units FROM order_lines l "
                   "LEFT JOIN customers c ON l.customer_id = c.customer_id GROUP BY c.region")
BY_REGION_ORDERED = BY_REGION + " ORDER BY revenue DESC"
EXTRA_COLUMN = (f"SELECT c.region, SUM({REV}) AS revenue, COUNT(*) AS n FROM order_lines l "
                "LEFT JOIN customers c ON l.customer_id = c.customer_id GROUP BY c.region")
MISSING_COLUMN = (f"SELECT SUM({REV}) AS revenue FROM order_lines l "
                  "LEFT JOIN customers c ON l.customer_id = c.customer_id GROUP BY c.region")
V2_BY_REGION = json.dumps({"metrics": ["revenue"], "group_by": ["customer_id__region"]})
V2_UNITS = json.dumps({"metrics": ["units"], "group_by": ["customer_id__region"]})
V1_BY_REGION = json.dumps({"intent": "breakdown", "metric": "revenue", "dimension": "region", "time_grain": None,
                           "filters": [], "limit": None, "order": None})
V1_UNITS = json.dumps({"intent": "breakdown", "metric": "units", "dimension": "region", "time_grain": None,
                       "filters": [], "limit": None, "order": None})

ITEMS: list[dict[str, Any]] = [
    {"id": "rev", "question": "Revenue by region", "gold_sql": BY_REGION},
    {"id": "rev-too", "question": "Total sales per region", "gold_sql": BY_REGION_TOO},
    {"id": "units", "question": "Units by region", "gold_sql": UNITS_BY_REGION},
    {"id": "ranked", "question": "Regions ranked by revenue", "gold_sql": BY_REGION_ORDERED},
    {"id": "either", "question": "Units or revenue by region", "gold_sql": [UNITS_BY_REGION, BY_REGION]},
    {"id": "nope", "question": "Revenue by weather", "gold_sql": None, "answerable": False},
]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def wh() -> Warehouse:
    return open_warehouse("retail")


@pytest.fixture(scope="module")
def gold_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("gold") / "gold.jsonl", ITEMS)


@pytest.fixture(scope="module")
def golds(wh: Warehouse) -> Any:
    with Sandbox(wh.db_path) as box:
        yield GoldRunner(box)


@pytest.fixture(scope="module")
def ex(wh: Warehouse) -> Any:
    with Executor(wh.db_path) as e:
        yield e


def _cases(gold_file: Path) -> dict[str, GoldSqlCase]:
    return {c.id: c for c in load_gold_sql_set(gold_file, "retail").cases}


def _score(case: GoldSqlCase, text: str, answer: str, wh: Warehouse, ex: Executor, golds: GoldRunner) -> Any:
    return KINDS[answer].gold_record(case, text, executor=ex, catalog=wh.catalog, golds=golds)


def test_loading_derives_ordered_and_category(gold_file: Path) -> None:
    cases = _cases(gold_file)
    assert [c.ordered for c in cases.values()] == [False, False, False, True, False, False]
    assert cases["rev"].category == "breakdown" and cases["ranked"].category == "breakdown"
    assert cases["either"].gold_sql == (UNITS_BY_REGION, BY_REGION)
    assert cases["nope"].gold_sql is None and cases["nope"].category == "unanswerable"


@pytest.mark.parametrize("sql, category, ordered", [
    ("SELECT date_trunc('month', order_date) AS m, SUM(quantity) FROM order_lines GROUP BY m ORDER BY m",
     "time_series", True),
    ("SELECT year(order_date), COUNT(*) FROM order_lines GROUP BY ALL", "time_series", False),
    ("SELECT region, SUM(x) AS s FROM t GROUP BY region ORDER BY s DESC LIMIT 3", "top_n", True),
    ("SELECT region, COUNT(*) FROM t GROUP BY 1", "breakdown", False),
    ("SELECT COUNT(*) FROM t", "aggregate", False),
    ("SELECT SUM(x) OVER () FROM t", "listing", False),
    ("SELECT a FROM t WHERE x > (SELECT AVG(x) FROM t) ORDER BY a", "listing", True),
])
def test_category_and_order_rules(sql: str, category: str, ordered: bool) -> None:
    assert derive_category(sql) == category
    assert derive_ordered(sql) is ordered


def test_the_gold_itself_scores_100_percent_in_the_sql_arm(gold_file: Path, wh: Warehouse, ex: Executor,
                                                           golds: GoldRunner) -> None:
    for case in _cases(gold_file).values():
        for i, sql in enumerate(case.gold_sql or ()):
            rec = _score(case, sql, "sql", wh, ex, golds)
            assert rec.judgement.correct_final, (case.id, rec.judgement.error_final)
            assert rec.judgement.column_rule == COLUMN_RULE
            assert rec.judgement.gold_alternative == (0 if case.id == "either" and i == 0 else i if
                                                      case.id != "either" else 1)


def test_another_items_sql_is_right_exactly_when_it_returns_this_items_rows(
        gold_file: Path, wh: Warehouse, ex: Executor, golds: GoldRunner) -> None:
    cases = _cases(gold_file)
    # rev and rev-too share rows; units does not; ranked has rev's rows (in order: rev's are unordered)
    assert _score(cases["rev"], BY_REGION_TOO, "sql", wh, ex, golds).judgement.correct_final
    assert _score(cases["rev-too"], BY_REGION, "sql", wh, ex, golds).judgement.correct_final
    wrong = _score(cases["rev"], UNITS_BY_REGION, "sql", wh, ex, golds)
    assert not wrong.judgement.correct_final and wrong.judgement.error_final == "wrong_rows"
    assert not _score(cases["units"], BY_REGION, "sql", wh, ex, golds).judgement.correct_final
    assert _score(cases["rev"], BY_REGION_ORDERED, "sql", wh, ex, golds).judgement.correct_final


def test_extra_answer_columns_are_allowed_missing_gold_columns_are_not(
        gold_file: Path, wh: Warehouse, ex: Executor, golds: GoldRunner) -> None:
    case = _cases(gold_file)["rev"]
    assert _score(case, EXTRA_COLUMN, "sql", wh, ex, golds).judgement.correct_final
    missing = _score(case, MISSING_COLUMN, "sql", wh, ex, golds)
    assert not missing.judgement.correct_final and missing.judgement.error_final in ("wrong_columns", "wrong_rows")


def test_order_counts_only_when_the_gold_orders(gold_file: Path, wh: Warehouse, ex: Executor,
                                                golds: GoldRunner) -> None:
    cases = _cases(gold_file)
    ascending = BY_REGION + " ORDER BY revenue ASC"
    rec = _score(cases["ranked"], ascending, "sql", wh, ex, golds)
    assert not rec.judgement.correct_final and rec.judgement.error_final == "wrong_order"
    assert _score(cases["ranked"], BY_REGION_ORDERED, "sql", wh, ex, golds).judgement.correct_final
    assert _score(cases["rev"], ascending, "sql", wh, ex, golds).judgement.correct_final


def test_alternatives_any_matches_and_the_match_is_recorded(gold_file: Path, wh: Warehouse, ex: Executor,
                                                            golds: GoldRunner) -> None:
    case = _cases(gold_file)["either"]
    by_rev = _score(case, BY_REGION_TOO, "sql", wh, ex, golds)
    assert by_rev.judgement.correct_final and by_rev.judgement.gold_alternative == 1
    assert by_rev.judgement.gold_sql == BY_REGION
    by_units = _score(case, UNITS_BY_REGION, "sql", wh, ex, golds)
    assert by_units.judgement.correct_final and by_units.judgement.gold_alternative == 0
    other = _score(case, "SELECT region FROM customers GROUP BY region", "sql", wh, ex, golds)
    assert not other.judgement.correct_final and other.judgement.gold_alternative is None


@pytest.mark.parametrize("answer, right, wrong", [
    ("query", V2_BY_REGION, V2_UNITS),
    ("intent", V1_BY_REGION, V1_UNITS),
])
def test_query_and_intent_answers_are_scored_by_their_rows(gold_file: Path, wh: Warehouse, ex: Executor,
                                                           golds: GoldRunner, answer: str, right: str,
                                                           wrong: str) -> None:
    cases = _cases(gold_file)
    ok = _score(cases["rev"], right, answer, wh, ex, golds)
    assert ok.judgement.correct_final and ok.judgement.correct_raw, ok.judgement.error_final
    assert _score(cases["rev-too"], right, answer, wh, ex, golds).judgement.correct_final
    bad = _score(cases["rev"], wrong, answer, wh, ex, golds)
    assert not bad.judgement.correct_final and bad.judgement.error_final == "wrong_rows"
    assert _score(cases["units"], wrong, answer, wh, ex, golds).judgement.correct_final


def test_unanswerable_items_want_an_abstention(gold_file: Path, wh: Warehouse, ex: Executor,
                                               golds: GoldRunner) -> None:
    case = _cases(gold_file)["nope"]
    abstain = json.dumps({"unanswerable": "no weather data"})
    assert _score(case, abstain, "sql", wh, ex, golds).judgement.correct_final
    assert _score(case, abstain, "query", wh, ex, golds).judgement.correct_final
    answered = _score(case, BY_REGION, "sql", wh, ex, golds)
    assert not answered.judgement.correct_final and answered.judgement.error_final == "answered_unanswerable"
    assert _score(_cases(gold_file)["rev"], abstain, "sql", wh, ex, golds).judgement.error_final == \
        "false_abstention"


@pytest.mark.parametrize("answer", ["sql", "query", "intent"])
def test_score_cli_every_kind_records_the_column_rule(tmp_path: Path, gold_file: Path, answer: str) -> None:
    text = {"sql": BY_REGION_TOO, "query": V2_BY_REGION, "intent": V1_BY_REGION}[answer]
    responses = _write(tmp_path / "r.jsonl", [{"id": "rev", "text": text}, {"id": "units", "text": text}])
    res = runner.invoke(app, ["score", "--answer", answer, "--evalset", str(gold_file), "--responses",
                              str(responses), "--out", str(tmp_path / "run"), "--allow-missing", "--json"])
    assert res.exit_code == 0, res.output
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "run" / "records.jsonl").read_text().splitlines())}
    assert recs["rev"]["correct_final"] and not recs["units"]["correct_final"]
    assert all(r["column_rule"] == COLUMN_RULE for r in recs.values())
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert summary["column_rule"] == COLUMN_RULE and summary["final_accuracy"]["k"] == 1
    assert summary["n"] == len(ITEMS)
    assert manifest["gold"] == "sql" and manifest["column_rule"] == COLUMN_RULE
    assert manifest["search_path"] == ["main"]


def test_eval_with_a_gold_sql_set_against_the_fake_server(tmp_path: Path, gold_file: Path) -> None:
    from fakeserver import FakeServer, script

    texts = {"Revenue by region": BY_REGION_TOO, "Total sales per region": UNITS_BY_REGION}
    by_q = {q: [{"kind": "text", "text": t}] for q, t in texts.items()}
    with FakeServer(tmp_path / "fake", script(by_question=by_q), model="fake-model") as fake:
        res = runner.invoke(app, ["eval", "--answer", "sql", "--evalset", str(gold_file), "--endpoint", fake.url,
                                  "--model", "fake-model", "--limit", "2", "--out", str(tmp_path / "run"),
                                  "--max-failure-rate", "1"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    recs = {r["id"]: r for r in map(json.loads, (tmp_path / "run" / "records.jsonl").read_text().splitlines())}
    assert recs["rev"]["correct_final"] and not recs["rev-too"]["correct_final"]
    assert summary["final_accuracy"]["k"] == 1 and summary["column_rule"] == COLUMN_RULE
    assert manifest["gold"] == "sql" and manifest["search_path"] == ["main"]


def test_check_reports_every_bad_gold_at_once(tmp_path: Path, gold_file: Path) -> None:
    ok = runner.invoke(app, ["evalset", "check", str(gold_file)])
    assert ok.exit_code == 0, ok.output
    assert "6 gold-SQL items OK" in " ".join(ok.output.split())
    bad = _write(tmp_path / "bad.jsonl", [
        {"id": "fails", "question": "q1", "gold_sql": "SELECT no_such_column FROM customers"},
        {"id": "empty", "question": "q2", "gold_sql": "SELECT region FROM customers WHERE 1 = 0"},
        {"id": "writes", "question": "q3", "gold_sql": "DELETE FROM customers"},
        {"id": "fine", "question": "q4", "gold_sql": BY_REGION},
    ])
    res = runner.invoke(app, ["evalset", "check", str(bad)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "3 gold SQL statement(s)" in out
    assert "fails: fails:" in out and "no_such_column" in out
    assert "empty: returns no rows" in out
    assert "writes: not a single read-only SELECT" in out
    assert "fine:" not in out


def test_loading_reports_every_bad_line_at_once(tmp_path: Path) -> None:
    bad = _write(tmp_path / "bad.jsonl", [
        {"id": "a", "question": "q", "gold_sql": BY_REGION},
        {"id": "b", "gold_sql": BY_REGION},  # no question
        {"id": "c", "question": "q", "gold": {"metrics": ["revenue"]}},  # another kind of gold: mixed
        {"id": "a", "question": "q", "gold_sql": BY_REGION},  # duplicate id
        {"id": "d", "question": "q", "gold_sql": None},  # null gold, answerable by default
    ])
    with pytest.raises(EvalSetProblems) as info:
        load_gold_sql_set(bad, "retail")
    where = [(p.line, p.field) for p in info.value.problems]
    assert where == [(2, "question"), (3, "gold_sql"), (4, "id"), (5, "(line)")]
    res = runner.invoke(app, ["evalset", "check", str(bad)])
    assert res.exit_code == 2 and "4 problems" in res.output and "Traceback" not in res.output


def test_search_path_resolves_unqualified_names_in_another_schema(tmp_path: Path) -> None:
    db = tmp_path / "team.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE SCHEMA analytics; CREATE TABLE analytics.sales AS SELECT * FROM (VALUES ('a', 1), ('b', 2)) "
                "t(region, amount); CREATE TABLE main.notes AS SELECT 1 AS x")
    con.close()
    with Sandbox(db, search_path=("analytics", "main")) as box:
        assert box.execute("SELECT region, amount FROM sales ORDER BY region").rows == [("a", 1), ("b", 2)]
        assert box.execute("SELECT x FROM notes").ok  # the second schema on the path
        assert box.execute("SELECT amount FROM analytics.sales").ok
        assert box.execute("SET search_path = 'main'").status == "sql_refused"
        assert not box.execute("SELECT * FROM read_csv('x.csv')").ok
    with Sandbox(db) as box:  # the default path is main: an unqualified name in analytics is not reached
        res = box.execute("SELECT amount FROM sales")
        assert not res.ok and "not in the warehouse" in str(res.reason)
        assert box.execute("SELECT amount FROM analytics.sales").ok  # qualified: any schema of the file
    with pytest.raises(InputError, match="not in the warehouse"):
        Sandbox(db, search_path=("nowhere",))
    with pytest.raises(InputError):
        Sandbox(db, search_path=("main'; ATTACH 'x' AS y; --",))
    with pytest.raises(EvalSetError, match="plain identifier"):
        parse_search_path("analytics,main'")
    assert parse_search_path(" analytics , main,analytics") == ("analytics", "main")


def test_search_path_of_a_layer_puts_its_main_schema_first() -> None:
    def sm(schema: str) -> Any:
        return SimpleNamespace(node_relation=SimpleNamespace(schema_name=schema))

    manifest = SimpleNamespace(semantic_models=[sm("seeds"), sm("marts"), sm("marts"), sm("bad-name"), sm("x")])
    assert layer_search_path(manifest) == ("marts", "seeds", "x")
    assert layer_search_path(SimpleNamespace(semantic_models=[])) == ("main",)


def test_check_of_a_gold_set_on_a_non_main_schema(tmp_path: Path) -> None:
    db = tmp_path / "team.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE SCHEMA analytics; CREATE TABLE analytics.sales AS SELECT 'a' AS region, 1 AS amount")
    con.close()
    gs_path = _write(tmp_path / "g.jsonl", [{"id": "s", "question": "q", "gold_sql": "SELECT * FROM sales"}])
    gs = load_gold_sql_set(gs_path, "retail")
    with Sandbox(db, search_path=("analytics",)) as box:
        assert check_gold_sql_set(gs, GoldRunner(box)) == []
    with Sandbox(db) as box:
        assert len(check_gold_sql_set(gs, GoldRunner(box))) == 1


def test_import_csv_jsonl_spider_bird_defog(tmp_path: Path) -> None:
    csv_src = tmp_path / "log.csv"
    csv_src.write_text('q,sql,kind\n"Revenue, by region",' + json.dumps(BY_REGION) + ",breakdown\n")
    lines = import_gold_sql(csv_src, ImportOptions(question_col="q", category_col="kind"))
    assert lines == [{"id": "log-0001", "question": "Revenue, by region", "gold_sql": BY_REGION,
                      "category": "breakdown"}]
    jsonl_src = _write(tmp_path / "log.jsonl", [{"key": "k1", "text": "Units?", "query": UNITS_BY_REGION}])
    lines = import_gold_sql(jsonl_src, ImportOptions(question_col="text", sql_col="query", id_col="key"))
    assert lines == [{"id": "k1", "question": "Units?", "gold_sql": UNITS_BY_REGION}]
    spider = tmp_path / "dev.json"
    spider.write_text(json.dumps([
        {"db_id": "shop", "question": "How many customers?", "query": "SELECT count(*) FROM customers"},
        {"db_id": "zoo", "question": "Animals?", "query": "SELECT name FROM animals"},
        {"db_id": "shop", "question": "First region", "query": "SELECT region FROM customers LIMIT 1"}]))
    lines = import_gold_sql(spider, ImportOptions(db_id="shop"))
    assert [ln["id"] for ln in lines] == ["shop-0001", "shop-0003"]
    assert lines[0]["source_dialect"] == "sqlite" and lines[0]["source_sql"] == "SELECT count(*) FROM customers"
    assert lines[0]["gold_sql"].upper().startswith("SELECT COUNT(*)")
    bird = tmp_path / "bird.json"
    bird.write_text(json.dumps([{"question_id": 7, "db_id": "shop", "question": "Big orders?",
                                 "evidence": "big means quantity > 5", "difficulty": "simple",
                                 "SQL": "SELECT order_id FROM order_lines WHERE quantity > 5"}]))
    (line,) = import_gold_sql(bird, ImportOptions())
    assert line["id"] == "shop-7" and line["question"].endswith("Hint: big means quantity > 5")
    assert line["tags"] == ["difficulty:simple"]
    defog = tmp_path / "questions_gen_postgres.csv"
    defog.write_text("question,query,db_name,query_category,instructions\n"
                     "Who?,\"SELECT {customer_id, region} FROM customers;SELECT customer_id FROM customers\",shop,"
                     "table_join,\n"
                     "Other?,SELECT 1,zoo,basic,\n")
    (line,) = import_gold_sql(defog, ImportOptions(db_id="shop"))
    assert line["category"] == "table_join" and line["source_dialect"] == "postgres"
    assert [g.replace('"', "") for g in line["gold_sql"]] == [
        "SELECT customer_id FROM customers", "SELECT region FROM customers",
        "SELECT customer_id, region FROM customers"]


def test_defog_alternatives_follow_sql_eval() -> None:
    assert defog_alternatives("SELECT {a, b} FROM t GROUP BY {}") == [
        "SELECT a FROM t GROUP BY a", "SELECT b FROM t GROUP BY b", "SELECT a, b FROM t GROUP BY a, b"]
    assert defog_alternatives("SELECT 'x;y' FROM t; SELECT 2") == ["SELECT 'x;y' FROM t", "SELECT 2"]


def test_import_reports_every_bad_row_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "log.csv"
    src.write_text("question,sql\n,SELECT 1\nok?,\nbad?,SELEC FROM WHERE (\nfine?,SELECT 2\n")
    out = tmp_path / "set.jsonl"
    res = runner.invoke(app, ["evalset", "import", str(src), "--out", str(out), "--dialect", "postgres"])
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "3 problems" in text
    assert "log.csv:2: field 'question'" in text and "log.csv:3: field 'sql'" in text
    assert "log.csv:4: field 'sql'" in text
    assert not out.exists()
    good = tmp_path / "good.csv"
    good.write_text("question,sql\nRevenue by region?," + json.dumps(BY_REGION) + "\n")
    assert runner.invoke(app, ["evalset", "import", str(good), "--out", str(out)]).exit_code == 0
    again = runner.invoke(app, ["evalset", "import", str(good), "--out", str(out)])
    assert again.exit_code == 2 and "--force" in again.output
    assert runner.invoke(app, ["evalset", "check", str(out)]).exit_code == 0


def test_import_of_a_csv_the_csv_module_cannot_read_is_one_message(tmp_path: Path) -> None:
    """A field past the csv module's limit is bad input (file and line, exit 2), never a traceback."""
    from typer.testing import CliRunner

    from nlq2sql.cli.main import app

    src = tmp_path / "big.csv"
    src.write_text("question,sql\nq1,\"" + "x" * 200_000 + "\"\n")
    res = CliRunner().invoke(app, ["evalset", "import", str(src), "--out", str(tmp_path / "out.jsonl")])
    assert res.exit_code == 2 and "not CSV: field larger than field limit" in res.output, res.output
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("answer", ["intent", "query"])
def test_worker_processes_answer_a_gold_sql_set(tmp_path: Path, gold_file: Path, answer: str) -> None:
    """Worker processes warm each distinct gold before their first request; a gold-SQL item has none
    to warm (its gold SQL is run by its scorer), and every item is answered and scored by its rows."""
    from fakeserver import FakeServer

    with FakeServer(tmp_path / "fake", model="fake-model") as fake:
        res = runner.invoke(app, ["eval", "--answer", answer, "--evalset", str(gold_file), "--endpoint", fake.url,
                                  "--model", "fake-model", "--limit", "3", "--out", str(tmp_path / "run"),
                                  "--max-failure-rate", "1", "--workers", "2"])
    assert res.exit_code == 0, res.output
    recs = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 3 and all("correct_final" in r for r in recs)
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["gold"] == "sql"
