"""defog's sql-eval shipped as a benchmark: the databases from ``defog-data`` loaded into DuckDB,
the questions converted to gold-SQL lines (alternatives expanded, dates pinned), every shipped gold
running in the SQL arm's sandbox, and the report rendered from run records."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st
from repo_paths import ROOT

from nlq2sql.answers.sql.sandbox import Sandbox
from nlq2sql.errors import InputError
from nlq2sql.semantic.pgdump import build_from_dump, parse_dump, unescape_copy_field
from nlq2sql.semantic.warehouse import build
from nlq2sql.stages.sqleval_import import (
    PINNED_DATE,
    SourceRow,
    convert_row,
    expand_braces,
    order_sensitive,
    read_csv,
    split_alternatives,
    to_duckdb,
)

DATABASES = ("academic", "advising", "atis", "geography", "restaurants", "scholar", "yelp")
IMPORT = json.loads((ROOT / "reports" / "defog" / "import.json").read_text())


@pytest.fixture(scope="module")
def defog_dbs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("defog")
    return {db: build(out / f"{db}.duckdb", name=f"defog_{db}") for db in DATABASES}


def _copy_line_counts(text: str) -> dict[str, int]:
    """Rows per table counted straight from the dump: the lines between ``COPY`` and ``\\.``."""
    counts: dict[str, int] = {}
    table = None
    for line in text.splitlines():
        if table is None:
            m = re.match(r"COPY public\.(\w+) ", line)
            if m:
                table = m.group(1)
                counts[table] = 0
        elif line == "\\.":
            table = None
        else:
            counts[table] += 1
    return counts


# --- the databases --------------------------------------------------------------------------


@pytest.mark.parametrize("db", DATABASES)
def test_every_database_loads_every_copy_row(db: str, defog_dbs: dict[str, Path]) -> None:
    text = files("defog_data").joinpath(db, f"{db}.sql").read_text(encoding="utf-8")
    expected = _copy_line_counts(text)
    con = duckdb.connect(str(defog_dbs[db]), read_only=True)
    tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    created = set(re.findall(r"^CREATE TABLE public\.(\w+) \(", text, re.M))
    assert tables == created and expected.keys() <= tables
    got = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in expected}
    con.close()
    assert got == expected
    assert sum(got.values()) > 0


def test_declared_types_are_kept(defog_dbs: dict[str, Path]) -> None:
    con = duckdb.connect(str(defog_dbs["restaurants"]), read_only=True)
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                             "WHERE table_name = 'restaurant'").fetchall())
    assert types == {"id": "BIGINT", "name": "VARCHAR", "food_type": "VARCHAR", "city_name": "VARCHAR",
                     "rating": "FLOAT"}
    # COPY names its columns in another order than the table declares them: values land by name
    assert con.execute("SELECT id, rating, name FROM restaurant ORDER BY id LIMIT 1").fetchone() == (
        1, 4.5, "The Pasta House")


def test_the_build_is_deterministic(tmp_path: Path, defog_dbs: dict[str, Path]) -> None:
    again = build(tmp_path / "again.duckdb", name="defog_yelp")
    rows = []
    for path in (defog_dbs["yelp"], again):
        con = duckdb.connect(str(path), read_only=True)
        rows.append(con.execute("SELECT * FROM review ORDER BY ALL").fetchall())
        con.close()
    assert rows[0] == rows[1] and rows[0]


DUMP = """CREATE TABLE public.t (
    a bigint DEFAULT '0'::bigint NOT NULL,
    b text,
    c boolean,
    d date
);
COPY public.t (b, a, c, d) FROM stdin;
x\\ty\t1\tt\t2024-01-31
\\N\t2\tf\t\\N
back\\\\slash\t3\t\\N\t2020-02-29
\\.
"""


def test_a_small_dump_loads_with_nulls_and_escapes(tmp_path: Path) -> None:
    counts = build_from_dump(tmp_path / "t.duckdb", DUMP, "t.sql")
    assert counts == {"t": 3}
    con = duckdb.connect(str(tmp_path / "t.duckdb"), read_only=True)
    rows = con.execute("SELECT a, b, c, CAST(d AS VARCHAR) FROM t ORDER BY a").fetchall()
    assert rows == [(1, "x\ty", True, "2024-01-31"), (2, None, False, None), (3, "back\\slash", None, "2020-02-29")]


def test_copy_field_escapes() -> None:
    assert unescape_copy_field("\\N") is None
    assert unescape_copy_field("a\\nb\\\\c\\101\\x41") == "a\nb\\cAA"
    assert unescape_copy_field("plain") == "plain"


def test_a_broken_dump_names_every_problem() -> None:
    bad = DUMP.replace("\\N\t2\tf\t\\N", "only\ttwo") + "COPY public.u (x) FROM stdin;\n1\n"
    with pytest.raises(InputError) as err:
        parse_dump(bad, "bad.sql")
    text = str(err.value)
    assert "bad.sql:9: 2 fields" in text and "no closing" in text and "'u', which no CREATE TABLE" in text


@pytest.mark.parametrize("db", DATABASES)
def test_every_layer_passes_semantic_check(db: str, defog_dbs: dict[str, Path]) -> None:
    from typer.testing import CliRunner

    from nlq2sql.cli.main import app

    res = CliRunner().invoke(app, ["semantic", "check", f"defog_{db}", "--db", str(defog_dbs[db]), "--json"])
    report = json.loads(res.stdout[:res.stdout.rindex("}") + 1])
    assert not report["failed"] and report["metrics"] >= 3 and report["queries"] >= report["metrics"]
    # The layers read every column; defog's data leaves a few all NULL, which the check reports
    # (exit 2) and excludes from the query vocabulary -- never a metric, never anything else.
    problems = [str(p) for p in report["data_problems"]]
    assert all("is NULL in every row" in m for m in problems), problems
    assert res.exit_code == (2 if problems else 0), res.output
    assert not [e for e in report["excluded"] if not e["object"].startswith("semantic_models.")], report["excluded"]


@pytest.mark.parametrize("db", DATABASES)
def test_the_sql_arms_see_every_column(db: str, defog_dbs: dict[str, Path]) -> None:
    """The SQL arms' schema lists the columns a layer reads: each defog layer reads every column
    (defog's prompt shows the whole schema, and its questions may need any column)."""
    from nlq2sql.semantic.binding import open_warehouse
    from nlq2sql.semantic.schema_text import describe_tables

    wh = open_warehouse(f"defog_{db}", defog_dbs[db])
    shown = {(t.name, c.name) for t in describe_tables(wh.catalog, wh) for c in t.columns}
    every = set(wh.connect().execute("SELECT table_name, column_name FROM information_schema.columns").fetchall())
    assert every and every == shown


# --- the conversion -------------------------------------------------------------------------


def test_braces_expand_to_every_subset_with_the_same_group_by() -> None:
    got = expand_braces("SELECT {a.x, a.y}, COUNT(*) AS n FROM a GROUP BY {} ORDER BY n")
    assert got == ["SELECT a.x, COUNT(*) AS n FROM a GROUP BY a.x ORDER BY n",
                   "SELECT a.y, COUNT(*) AS n FROM a GROUP BY a.y ORDER BY n",
                   "SELECT a.x, a.y, COUNT(*) AS n FROM a GROUP BY a.x, a.y ORDER BY n"]
    assert expand_braces("SELECT 1") == ["SELECT 1"]
    assert expand_braces("SELECT a FROM t GROUP BY {}") == ["SELECT a FROM t GROUP BY {}"]  # nothing to choose
    assert split_alternatives("SELECT 1; SELECT 2;  ;") == ["SELECT 1", "SELECT 2"]


@given(st.lists(st.from_regex(r"[a-z]{1,3}\.[a-z]{1,4}", fullmatch=True), min_size=1, max_size=5, unique=True))
def test_brace_expansion_property(cols: list[str]) -> None:
    stmt = "SELECT {" + ", ".join(cols) + "}, SUM(v) FROM t GROUP BY {}"
    out = expand_braces(stmt)
    assert len(out) == 2 ** len(cols) - 1 == len(set(out))
    for sql in out:
        select = sql[len("SELECT "):sql.index(", SUM(v)")]
        assert sql.endswith(f"GROUP BY {select}")
        chosen = select.split(", ")
        assert chosen == [c for c in cols if c in chosen]  # listed order kept


def test_relative_dates_are_pinned_and_run() -> None:
    sql, pinned = to_duckdb("SELECT CURRENT_DATE - 1 AS d, extract(YEAR FROM NOW()) AS y")
    assert pinned and "CURRENT" not in sql.upper() and PINNED_DATE in sql
    d, y = duckdb.connect().execute(sql).fetchone()
    assert str(d) == "2025-02-01" and y == 2025
    assert to_duckdb("SELECT 1")[1] is False


def test_integer_division_stays_integer() -> None:
    schema = {"t": {"a": "BIGINT", "b": "BIGINT", "f": "DOUBLE"}}
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 7 AS a, 2 AS b, 7.0 AS f")
    assert con.execute(to_duckdb("SELECT a / b FROM t", schema)[0]).fetchone() == (3,)
    assert con.execute(to_duckdb("SELECT f / b FROM t", schema)[0]).fetchone() == (3.5,)
    assert con.execute(to_duckdb("SELECT CAST(a AS FLOAT) / b FROM t", schema)[0]).fetchone() == (3.5,)


def test_a_row_converts_with_its_tags() -> None:
    row = SourceRow(2, "Which authors? Sort by count.", "SELECT {a.n, a.i} FROM a GROUP BY {};SELECT a.n FROM a "
                    "WHERE a.d < CURRENT_DATE", "academic", "group_by", "Filter names using ILIKE")
    c = convert_row(row, "academic-001")
    assert c.gold_sql[:3] == ["SELECT a.n FROM a GROUP BY a.n", "SELECT a.i FROM a GROUP BY a.i",
                              "SELECT a.n, a.i FROM a GROUP BY a.n, a.i"]
    assert len(c.gold_sql) == 4 and PINNED_DATE in c.gold_sql[3]
    assert c.tags == ["relative-date", "instructions", "defog-order", "either-column"]
    assert c.question == (f"Which authors? Sort by count. (Today is {PINNED_DATE}.)\n"
                          "Instructions: Filter names using ILIKE")
    line = c.line()
    assert line["ordered"] is False and line["category"] == "group_by" and line["id"] == "academic-001"
    assert order_sensitive("List them", "order_by") and order_sensitive("Sort them", "join")
    assert not order_sensitive("Which orders are sorted?", "join")  # defog's whole words only


def test_a_csv_without_defog_columns_is_refused() -> None:
    with pytest.raises(InputError, match="no column query"):
        read_csv("question,sql,db_name,query_category\nq,SELECT 1,x,y\n", "mine.csv")


# --- what is shipped --------------------------------------------------------------------------


def _shipped() -> dict[str, list[dict[str, object]]]:
    return {f"{db}/{s}": [json.loads(line) for line in
                          (ROOT / "warehouses" / f"defog_{db}" / "evalsets" / f"{s}.jsonl").read_text().splitlines()]
            for db in DATABASES for s in ("sql-eval", "idk")}


@pytest.mark.parametrize("db", DATABASES)
def test_every_shipped_gold_runs_and_returns_rows(db: str, defog_dbs: dict[str, Path]) -> None:
    shipped = _shipped()
    items = shipped[f"{db}/sql-eval"] + shipped[f"{db}/idk"]
    assert items
    with Sandbox(defog_dbs[db]) as sb:
        for item in items:
            golds = item["gold_sql"]
            assert isinstance(golds, list) and golds, item["id"]
            for sql in golds:
                res = sb.execute(sql)
                assert res.ok and res.rows, (item["id"], sql, res.reason)


def test_every_source_row_is_shipped_or_excluded_with_a_reason() -> None:
    rows = IMPORT["rows"]
    shipped_ids = {item["id"] for items in _shipped().values() for item in items}
    assert {r["id"] for r in rows if r["status"] == "shipped"} == shipped_ids
    excluded = [r for r in rows if r["status"] == "excluded"]
    assert all(r["reason"] for r in excluded)
    assert len(rows) == 210 + 105  # every row of both files, as the source has them
    md = (ROOT / "reports" / "defog" / "import.md").read_text()
    assert all(r["source"] in md for r in excluded)
    for r in rows:  # a dropped alternative is named in the report with its reason
        for d in r.get("dropped", []):
            assert d["reason"]


# --- the report ---------------------------------------------------------------------------------


def _report_module() -> Any:
    """``scripts/defog_report.py`` as a module (registered, as its dataclass needs)."""
    spec = importlib.util.spec_from_file_location("defog_report", ROOT / "scripts" / "defog_report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["defog_report"] = mod
    spec.loader.exec_module(mod)
    return mod


def _fake_run(root: Path, model: str, db: str, evalset: str, arm: str, outcomes: dict[str, tuple[str, bool]]) -> None:
    """A run directory as ``matrix --answers`` lays it out: manifest and one record line per item."""
    d = root / model / f"defog_{db}-{evalset}" / f"{evalset}-{arm}"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"model": model, "semantic_model": f"defog_{db}", "evalset": evalset,
                                                 "answer": arm, "git_commit": "abc123def4567890", "git_dirty": False}))
    (d / "records.jsonl").write_text("".join(
        json.dumps({"record_version": 1, "id": i, "question": "q", "category": cat, "answer": arm,
                    "correct_final": ok, "error_final": None if ok else "wrong_rows"}) + "\n"
        for i, (cat, ok) in outcomes.items()))


def test_the_report_renders_from_run_records(tmp_path: Path) -> None:
    report = _report_module()
    root = tmp_path / "defog"
    root.mkdir()
    for name in ("import.json", "published.json"):
        (root / name).write_text((ROOT / "reports" / "defog" / name).read_text())
    # sql right on 4 of 5, query right on 1 of 5 (the items sql got wrong: only query right on 0)
    sql = {f"restaurants-00{i}": ("ratio" if i < 3 else "group_by", i != 5) for i in range(1, 6)}
    query = {f"restaurants-00{i}": ("ratio" if i < 3 else "group_by", i == 1) for i in range(1, 6)}
    _fake_run(root, "qwen2.5-coder-0.5b", "restaurants", "sql-eval", "sql", sql)
    _fake_run(root, "qwen2.5-coder-0.5b", "restaurants", "sql-eval", "query", query)
    _fake_run(root, "qwen2.5-coder-0.5b", "yelp", "sql-eval", "sql", {"yelp-001": ("table_join", True)})
    text = report.render(root, {"restaurants"})
    assert "| qwen2.5-coder-0.5b | sql-eval | sql | 2 | 83.3 % [" in text and "(5/6) |" in text
    assert "| qwen2.5-coder-0.5b | sql-eval | query | 1 | 20.0 % [" in text
    # paired on the 5 restaurants items both arms answered: sql alone right on 3, query alone on 0
    assert "| qwen2.5-coder-0.5b | sql-eval | sql | query | 5 | 3 | 0 | 0.25 |" in text
    assert "| qwen2.5-coder-0.5b | query | 0 % (0/3) | 50 % (1/2) | – |" in text  # group_by, ratio, table_join
    assert "sqlcoder-7b-2" in text and "https://huggingface.co/defog/sqlcoder-7b-2" in text
    assert "| its database is not in defog-data 0.1.1 | 20 | broker, car_dealership, derm_treatment, ewallet |" in text
    assert "smollm2-135m · academic · sql-eval · sql" in text  # not recorded, listed
    assert "qwen2.5-coder-0.5b · restaurants · sql-eval · query" not in text.split("## Not recorded")[1]
    assert "abc123def456" in text and str(tmp_path) not in text


def test_the_report_refuses_an_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no recorded runs"):
        _report_module().render(tmp_path)
