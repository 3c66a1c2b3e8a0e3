"""The direct-SQL arm: the guard and the sandbox hold against hostile statements, and the
evaluator scores the gold's own SQL, and every way of being wrong, as docs/sql-arm.md says."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from nlq2sql.answers.sql import Sandbox, check_sql, compare, extract_sql, sql_record
from nlq2sql.answers.sql.guard import Verdict
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import Catalog, default_catalog
from nlq2sql.semantic.query import MetricQuery
from nlq2sql.semantic.schema_text import relationships, schema_text
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.queryset import QueryCase, QuerySet, load_query_set

CANARY = "c4n4ry-s3cr3t-7f1d"
STOPPED = {"sql_refused", "sql_error", "sql_timeout", "sql_too_many_rows"}


def _sql_flat(*args: Any, **kw: Any) -> dict[str, Any]:
    """:func:`sql_record` as its flat line (what these tests read key by key)."""
    return sql_record(*args, **kw).to_json(version=False)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return default_catalog()


@pytest.fixture(scope="module")
def heldout(catalog: Catalog) -> QuerySet:
    return load_query_set("heldout", catalog)


@pytest.fixture(scope="module")
def sandbox(small_warehouse: Path) -> Iterator[Sandbox]:
    with Sandbox(small_warehouse, timeout_s=1.0, row_cap=2000) as sb:
        yield sb


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Files outside the warehouse holding the canary: none of it may ever be read."""
    d = tmp_path_factory.mktemp("outside")
    (d / "secret.csv").write_text(f"secret\n{CANARY}\n")
    (d / "secret.json").write_text(json.dumps([{"secret": CANARY}]))
    (d / "secret.txt").write_text(CANARY)
    other = d / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE secrets AS SELECT ? AS s", [CANARY])
    con.close()
    con = duckdb.connect()
    con.execute(f"COPY (SELECT '{CANARY}' AS s) TO '{d / 'secret.parquet'}' (FORMAT parquet)")
    con.close()
    return {"dir": d, "csv": d / "secret.csv", "json": d / "secret.json", "txt": d / "secret.txt",
            "parquet": d / "secret.parquet", "db": other, "out": d / "copied.csv"}


def _inline(sql: str, params: tuple[Any, ...]) -> str:
    """MetricFlow's SQL with its $N parameters written as literals: one standalone statement."""
    def lit(m: re.Match[str]) -> str:
        v = params[int(m.group(1)) - 1]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return str(v)
        return "'" + str(v).replace("'", "''") + "'"
    return re.sub(r"\$(\d+)", lit, sql)


def _gold_sql(case: QueryCase, catalog: Catalog) -> str:
    assert case.gold is not None
    q = catalog.engine.compile(case.gold)
    return _inline(q.sql, q.params)


def _order(gold: MetricQuery) -> str:
    """The gold's row order (MetricFlow: its order_by, then every group-by ascending)."""
    keys = [o.field + (" DESC" if o.descending else "") for o in gold.order_by or ()]
    keys += [g for g in gold.group_by if g not in {o.field for o in gold.order_by or ()}]
    return " ORDER BY " + ", ".join(keys) if keys else ""


def _case(heldout: QuerySet, *, ordered: bool, min_rows: int = 3, executor: Executor, catalog: Catalog,
          limit: bool | None = None) -> QueryCase:
    for c in heldout.cases:
        if c.gold is None or c.gold.ordered != ordered or len(c.gold.group_by) != 1 or len(c.gold.metrics) != 1:
            continue
        if limit is not None and (c.gold.limit is not None) != limit:
            continue
        rows = executor.run(catalog.engine.compile(c.gold))
        if len(rows) >= min_rows and len({r[-1] for r in rows}) == len(rows):
            return c
    raise AssertionError("no such case in the held-out set")


def _score(case: QueryCase, text: str, executor: Executor, catalog: Catalog, sandbox: Sandbox) -> dict[str, Any]:
    rec = _sql_flat(case, text, executor, catalog, sandbox=sandbox)
    json.dumps(rec)  # a record is JSON as it stands
    return rec


# ---------------------------------------------------------------- hostile statements


def _hostile(o: dict[str, Path]) -> list[tuple[str, str]]:
    csv, js, txt, pq, db, out, d = o["csv"], o["json"], o["txt"], o["parquet"], o["db"], o["out"], o["dir"]
    return [
        ("read_csv", f"SELECT * FROM read_csv('{csv}')"),
        ("read_csv_auto", f"SELECT * FROM read_csv_auto('{csv}')"),
        ("read_parquet", f"SELECT * FROM read_parquet('{pq}')"),
        ("parquet_scan", f"SELECT * FROM parquet_scan('{pq}')"),
        ("read_json", f"SELECT * FROM read_json('{js}')"),
        ("read_json_auto", f"SELECT * FROM read_json_auto('{js}')"),
        ("read_json_objects", f"SELECT * FROM read_json_objects('{js}')"),
        ("read_ndjson", f"SELECT * FROM read_ndjson('{js}')"),
        ("read_text", f"SELECT content FROM read_text('{txt}')"),
        ("read_blob", f"SELECT content FROM read_blob('{txt}')"),
        ("sniff_csv", f"SELECT * FROM sniff_csv('{csv}')"),
        ("glob", f"SELECT * FROM glob('{d}/*')"),
        ("iceberg_scan", f"SELECT * FROM iceberg_scan('{d}')"),
        ("delta_scan", f"SELECT * FROM delta_scan('{d}')"),
        ("read_csv in a subquery", f"SELECT * FROM customers WHERE segment IN (SELECT secret FROM read_csv('{csv}'))"),
        ("read_csv in a CTE", f"WITH s AS (SELECT * FROM read_csv('{csv}')) SELECT * FROM s"),
        ("read_text as a scalar subquery", f"SELECT (SELECT content FROM read_text('{txt}')) AS x"),
        ("replacement scan of a file", f"SELECT * FROM '{csv}'"),
        ("replacement scan, quoted identifier", f'SELECT * FROM "{csv}"'),
        ("https url", "SELECT * FROM read_csv('https://example.com/x.csv')"),
        ("attach another file", f"ATTACH '{db}' AS other"),
        ("attach after a select", f"SELECT 1; ATTACH '{db}' AS other"),
        ("detach the warehouse", "DETACH warehouse"),
        ("use another catalog", "USE system"),
        ("install extension", "INSTALL httpfs"),
        ("load extension", "LOAD httpfs"),
        ("copy to a file", f"COPY (SELECT * FROM customers) TO '{out}'"),
        ("copy from a file", f"COPY customers FROM '{csv}'"),
        ("export database", f"EXPORT DATABASE '{d / 'export'}'"),
        ("import database", f"IMPORT DATABASE '{d}'"),
        ("import after a select", f"SELECT 1; IMPORT DATABASE '{d}'"),
        ("pragma", "PRAGMA database_list"),
        ("pragma function", "SELECT * FROM pragma_database_list()"),
        ("set", "SET enable_external_access = true"),
        ("unlock", "SET lock_configuration = false"),
        ("reset", "RESET memory_limit"),
        ("call", "CALL pragma_version()"),
        ("create", "CREATE TABLE t AS SELECT 1 AS x"),
        ("create temp view", f"CREATE TEMP VIEW v AS SELECT * FROM read_csv('{csv}')"),
        ("drop", "DROP TABLE customers"),
        ("alter", "ALTER TABLE customers ADD COLUMN x INTEGER"),
        ("insert", "INSERT INTO customers VALUES (1, 'a', 'b')"),
        ("update", "UPDATE customers SET region = 'x'"),
        ("delete", "DELETE FROM customers"),
        ("truncate", "TRUNCATE customers"),
        ("merge", "MERGE INTO customers USING customers AS c ON customers.customer_id = c.customer_id "
                  "WHEN MATCHED THEN DELETE"),
        ("checkpoint", "CHECKPOINT"),
        ("vacuum", "VACUUM"),
        ("begin", "BEGIN TRANSACTION"),
        ("explain analyze", "EXPLAIN ANALYZE SELECT 1"),
        ("describe", "DESCRIBE customers"),
        ("summarize", "SUMMARIZE customers"),
        ("show tables", "SHOW TABLES"),
        ("cross join", "SELECT count(*) FROM order_lines a, order_lines b, order_lines c"),
        ("cross join over range", "SELECT sum(a.range * b.range) FROM range(100000000) a, range(100000000) b"),
        ("recursive CTE, endless", "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) "
                                   "SELECT count(*) FROM t"),
        ("recursive CTE, doubling", "WITH RECURSIVE t(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM t) "
                                    "SELECT max(length(s)) FROM t"),
        ("recursive CTE, fan-out", "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t, range(10)) "
                                   "SELECT count(*) FROM t"),
        ("huge result", "SELECT * FROM range(100000000)"),
        ("comment then a second statement", f"SELECT 1 /* harmless */; ATTACH '{db}' AS other"),
        ("line comment then a second statement", f"SELECT 1 -- fine\n; ATTACH '{db}' AS other"),
        ("nested comment", f"SELECT 1 /* /* */ ; ATTACH '{db}' AS other; /* */"),
        ("backslash in a string", f"SELECT 'a\\'; ATTACH '{db}' AS other; --'"),
        ("E-string escape", f"SELECT E'a\\''; ATTACH '{db}' AS other; --'"),
        ("quote games", f"SELECT * FROM customers WHERE region = ''; ATTACH '{db}' AS z; SELECT ''"),
        ("dollar quoting", f"SELECT $$x$$; ATTACH '{db}' AS other"),
        ("parameter", "SELECT $1"),
        ("fullwidth SELECT", "ＳＥＬＥＣＴ * FROM customers"),
        ("fullwidth read_csv", f"SELECT * FROM ｒｅａｄ_csv('{csv}')"),
        ("Cyrillic a in SELECT", "SELECT * FRОM customers"),
        ("Cyrillic e in SELECT", "SЕLECT 1"),
        ("zero-width space", "SELECT\u200b* FROM customers"),
        ("right-to-left override", "SELECT * FROM customers \u202e;1 TCELES"),
        ("NUL byte", "SELECT 1\x00; DROP TABLE customers"),
        ("table not in the warehouse", "SELECT * FROM secrets"),
        ("other catalog", "SELECT * FROM other.main.secrets"),
        ("system catalog", "SELECT * FROM system.main.duckdb_settings"),
        ("information_schema", "SELECT * FROM information_schema.tables"),
        ("pg_catalog", "SELECT * FROM pg_catalog.pg_class"),
        ("duckdb_settings", "SELECT * FROM duckdb_settings()"),
        ("duckdb_secrets", "SELECT * FROM duckdb_secrets()"),
        ("query()", f"SELECT * FROM query('SELECT * FROM read_csv(''{csv}'')')"),
        ("query_table()", "SELECT * FROM query_table('customers')"),
        ("getenv", "SELECT getenv('HOME')"),
        ("current_setting", "SELECT current_setting('home_directory')"),
        ("serialized SQL", "SELECT json_execute_serialized_sql(json_serialize_sql('SELECT 1'))"),
        ("values only", "VALUES (1)"),
        ("empty", "   "),
    ]


def test_hostile_statements_are_refused_or_stopped(sandbox: Sandbox, outside: dict[str, Path], executor: Executor,
                                                   catalog: Catalog, heldout: QuerySet) -> None:
    cases = _hostile(outside)
    assert len(cases) >= 30
    case = heldout.cases[0]
    start = time.monotonic()
    seen: dict[str, str] = {}
    for name, sql in cases:
        t0 = time.monotonic()
        res = sandbox.execute(sql)
        took = time.monotonic() - t0
        assert res.status in STOPPED, (name, res)
        assert took < 10, (name, took)
        assert CANARY not in repr(res), name
        rec = _sql_flat(case, sql, executor, catalog, sandbox=sandbox)
        assert rec["status"] in STOPPED | {"unparsable"}, (name, rec["status"])
        assert rec["correct_final"] is False and rec["correct_lenient"] is False
        assert CANARY not in json.dumps(rec), name
        seen[name] = res.status
    assert time.monotonic() - start < 240
    for name in ("cross join", "recursive CTE, endless", "cross join over range"):
        assert seen[name] == "sql_timeout", (name, seen[name])
    assert seen["huge result"] == "sql_too_many_rows"
    assert not outside["out"].exists() and not (outside["dir"] / "export").exists()
    # The sandbox is intact: same warehouse, still locked, still read-only, no other catalog.
    assert sandbox.execute("SELECT count(*) FROM customers").ok
    con = sandbox._con
    assert con.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)
    assert con.execute("SELECT current_setting('lock_configuration')").fetchone() == (True,)
    names = {r[0] for r in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    assert "other" not in names and "z" not in names


@pytest.mark.parametrize("name", ["read_csv", "read_parquet", "read_text", "attach", "copy", "install", "set"])
def test_sandbox_holds_without_the_guard(sandbox: Sandbox, outside: dict[str, Path], name: str) -> None:
    """Defence in depth: a statement the guard would refuse, forced past it, still reads nothing."""
    sql = {"read_csv": f"SELECT * FROM read_csv('{outside['csv']}')",
           "read_parquet": f"SELECT * FROM read_parquet('{outside['parquet']}')",
           "read_text": f"SELECT content FROM read_text('{outside['txt']}')",
           "attach": f"ATTACH '{outside['db']}' AS other2",
           "copy": f"COPY (SELECT 1) TO '{outside['out']}'",
           "install": "INSTALL httpfs",
           "set": "SET enable_external_access = true"}[name]
    res = sandbox.run(Verdict("ok", None, sql))
    assert res.status == "sql_error", res
    assert CANARY not in repr(res)
    assert not outside["out"].exists()
    assert sandbox.execute("SELECT count(*) FROM customers").ok


def test_timeout_is_about_the_limit(sandbox: Sandbox) -> None:
    t0 = time.monotonic()
    res = sandbox.execute("SELECT count(*) FROM order_lines a, order_lines b, order_lines c")
    assert res.status == "sql_timeout"
    assert 0.9 <= time.monotonic() - t0 < 5
    assert sandbox.execute("SELECT 1").ok  # the interrupt does not leak into the next statement


def test_memory_limit(small_warehouse: Path) -> None:
    with Sandbox(small_warehouse, timeout_s=20, memory_limit="64MB") as sb:
        res = sb.execute("SELECT list(repeat('x', 100)) FROM range(5000000)")
        assert res.status == "sql_error" and "memory" in (res.reason or "").lower(), res
        assert sb.execute("SELECT 1").ok


def test_guard_accepts_ordinary_selects(sandbox: Sandbox) -> None:
    for sql in ["SELECT region, count(*) AS n FROM customers GROUP BY region ORDER BY n DESC",
                "FROM customers LIMIT 2",
                "WITH r AS (SELECT * FROM customers) SELECT * FROM r WHERE region = 'São Paulo'",
                'SELECT c."region" FROM main.customers c',
                "SELECT * FROM warehouse.main.customers LIMIT 1",
                "SELECT n FROM range(3) t(n) -- a comment\n",
                "SELECT date_trunc('month', order_date) AS m, sum(quantity) FROM order_lines GROUP BY 1",
                "(SELECT 1 AS x) UNION ALL (SELECT 2)",
                "SELECT ';' AS semi; -- the end",
                "/* totals */ SELECT count(*) FROM order_lines;"]:
        v = sandbox.check(sql)
        assert v.accepted, (sql, v.reason)
        assert sandbox.run(v).ok
    assert check_sql("SELECT * FROM customers", ["customers"]).tables == ("customers",)


def test_extract_sql() -> None:
    assert extract_sql("SELECT 1;") == "SELECT 1"
    assert extract_sql("  SELECT 1 ;  ; ") == "SELECT 1"
    assert extract_sql("Here:\n```sql\nSELECT 2;\n```\nDone.") == "SELECT 2"
    assert extract_sql("```duckdb\nSELECT 3\n```") == "SELECT 3"
    assert extract_sql("```\nSELECT 4\n```") == "SELECT 4"
    assert extract_sql("```python\nx=1\n```\n```sql\nSELECT 5\n```") == "SELECT 5"
    assert extract_sql("```sql\nSELECT 6") == "SELECT 6"  # cut off by the token limit
    assert extract_sql("") is None and extract_sql("```sql\n```") is None


def test_schema_text_is_deterministic(small_warehouse: Path, catalog: Catalog) -> None:
    wh = Warehouse(catalog, small_warehouse)
    text = schema_text(catalog, wh)
    assert text == schema_text(catalog, wh)
    for table in catalog.tables.values():
        assert f"\n{table} — " in "\n" + text
    assert "order_lines.customer_id → customers.customer_id" in text
    assert "region VARCHAR" in text and "values: Central, East, North, South, West" in text
    assert "revenue = SUM(quantity * unit_price * (1 - discount))" in text
    assert len(relationships(catalog)) == 3


# ---------------------------------------------------------------- evaluator self-tests


def test_gold_sql_scores_one_on_the_heldout_set(heldout: QuerySet, catalog: Catalog, executor: Executor,
                                                sandbox: Sandbox) -> None:
    assert len(heldout.cases) >= 50
    for case in heldout.cases:
        rec = _score(case, "```sql\n" + _gold_sql(case, catalog) + ";\n```", executor, catalog, sandbox)
        assert rec["status"] == "ok", (case.id, rec["status_reason"])
        assert rec["correct_final"] and rec["correct_lenient"], (case.id, rec["error_final"])
        assert rec["answer"] == "sql" and rec["error_final"] is None


def test_row_order(heldout: QuerySet, catalog: Catalog, executor: Executor, sandbox: Sandbox) -> None:
    free = _case(heldout, ordered=False, executor=executor, catalog=catalog)
    assert free.gold is not None
    gold = _gold_sql(free, catalog)
    key = free.gold.group_by[0]
    rec = _score(free, f"WITH g AS ({gold}) SELECT * FROM g ORDER BY {key} DESC", executor, catalog, sandbox)
    assert rec["correct_final"], rec["error_final"]
    ranked = _case(heldout, ordered=True, executor=executor, catalog=catalog)
    assert ranked.gold is not None
    gold = _gold_sql(ranked, catalog)
    metric = ranked.gold.metrics[0]
    rec = _score(ranked, f"WITH g AS ({gold}) SELECT * FROM g ORDER BY {metric} ASC", executor, catalog, sandbox)
    assert not rec["correct_final"] and not rec["correct_lenient"]
    assert rec["error_final"] == "wrong_order"
    rec = _score(ranked, f"WITH g AS ({gold}) SELECT * FROM g{_order(ranked.gold)}", executor, catalog, sandbox)
    assert rec["correct_final"]


def test_wrong_answers(heldout: QuerySet, catalog: Catalog, executor: Executor, sandbox: Sandbox) -> None:
    free = _case(heldout, ordered=False, executor=executor, catalog=catalog)
    assert free.gold is not None
    gold = _gold_sql(free, catalog)
    key = free.gold.group_by[0]
    # a wrong filter: every row of one group left out before aggregating
    first = executor.run(catalog.engine.compile(free.gold))[0][0]
    wrong = f"WITH g AS ({gold}) SELECT * FROM g WHERE {key} <> '{first}'"
    rec = _score(free, wrong, executor, catalog, sandbox)
    assert (rec["correct_final"], rec["error_final"]) == (False, "wrong_rows")
    dropped = f"WITH g AS ({gold}) SELECT * FROM g ORDER BY {key} OFFSET 1"
    rec = _score(free, dropped, executor, catalog, sandbox)
    assert (rec["correct_final"], rec["correct_lenient"], rec["error_final"]) == (False, False, "wrong_rows")
    duplicated = f"WITH g AS ({gold}) SELECT * FROM g UNION ALL (SELECT * FROM g ORDER BY {key} LIMIT 1)"
    rec = _score(free, duplicated, executor, catalog, sandbox)
    assert (rec["correct_final"], rec["error_final"]) == (False, "wrong_rows")
    year = next((c for c in heldout.cases if c.gold is not None and not c.gold.ordered
                 and any(w.field == "metric_time__day" for w in c.gold.where or ())), None)
    assert year is not None
    other_year = re.sub(r"'2025-", "'2024-", _gold_sql(year, catalog))
    assert other_year != _gold_sql(year, catalog)
    rec = _score(year, other_year, executor, catalog, sandbox)
    assert not rec["correct_final"] and rec["error_final"] in ("wrong_rows", "wrong_columns")


def test_columns_extra_renamed_reordered(heldout: QuerySet, catalog: Catalog, executor: Executor,
                                         sandbox: Sandbox) -> None:
    for ordered in (False, True):
        case = _case(heldout, ordered=ordered, executor=executor, catalog=catalog)
        assert case.gold is not None
        gold = _gold_sql(case, catalog)
        order = _order(case.gold)
        key, metric = case.gold.group_by[0], case.gold.metrics[0]
        extra = _score(case, f"WITH g AS ({gold}) SELECT *, 42 AS answer, {metric} * 2 AS twice FROM g{order}",
                       executor, catalog, sandbox)
        assert (extra["correct_final"], extra["correct_lenient"]) == (False, True)
        assert extra["error_final"] == "wrong_columns" and extra["error_lenient"] is None
        swapped = _score(case, f"WITH g AS ({gold}) SELECT {metric} AS total, {key} AS name FROM g{order}",
                         executor, catalog, sandbox)
        assert swapped["correct_final"] and swapped["correct_lenient"], swapped["error_final"]
        fewer = _score(case, f"WITH g AS ({gold}) SELECT {key} FROM g{order}", executor, catalog, sandbox)
        assert (fewer["correct_final"], fewer["correct_lenient"], fewer["error_final"]) == (False, False,
                                                                                              "wrong_columns")


def test_outcomes_in_the_record(heldout: QuerySet, catalog: Catalog, executor: Executor, sandbox: Sandbox) -> None:
    case = heldout.cases[0]
    rec = _score(case, "I cannot write SQL for this.", executor, catalog, sandbox)
    assert rec["status"] == "unparsable" and rec["error_final"] == "unparsable"
    rec = _score(case, "SELECT region FROM customers GROUP", executor, catalog, sandbox)
    assert rec["status"] == "sql_error" and rec["error_final"] == "exec_error"
    assert rec["exec_error"].startswith("Parser Error")
    rec = _score(case, "", executor, catalog, sandbox)
    assert rec["status"] == "unparsable" and rec["raw_intent"] is None
    rec = _sql_flat(case, "```sql\n", executor, catalog, sandbox=sandbox, finish_reason="length")
    assert rec["status"] == "truncated"
    rec = _score(case, "SELECT * FROM read_csv('/etc/passwd')", executor, catalog, sandbox)
    assert (rec["status"], rec["error_final"]) == ("sql_refused", "refused")
    rec = _score(case, "SELECT count(*) FROM order_lines a, order_lines b, order_lines c", executor, catalog,
                 sandbox)
    assert (rec["status"], rec["error_final"]) == ("sql_timeout", "timeout")
    rec = _score(case, "SELECT no_such_column FROM customers", executor, catalog, sandbox)
    assert rec["status"] == "sql_error" and "no_such_column" in rec["exec_error"]
    rec = _sql_flat(case, None, executor, catalog, sandbox=sandbox, request_error="timeout")
    assert rec["status"] == "request_error" and rec["gold_result_head"]
    rec = _score(case, '{"unanswerable": "no such data"}', executor, catalog, sandbox)
    assert rec["error_final"] == "false_abstention" and rec["unanswerable"] == "no such data"
    from nlq2sql.stages.query_score import query_record
    keys = set(query_record(case, "{}", executor, catalog).to_json(version=False))
    assert keys <= set(rec), keys - set(rec)


# ---------------------------------------------------------------- equivalence rules on rows


def test_equivalence_rules() -> None:
    gold = [("East", 10.5, 3), ("North", 7.25, 2), ("South", 7.25, 1)]
    assert compare(list(reversed(gold)), gold, ordered=False).strict
    assert not compare(list(reversed(gold)), gold, ordered=True).strict
    assert compare(list(reversed(gold)), gold, ordered=True).error == "wrong_order"
    # a tie on the ORDER BY column broken the other way: equal when the tie key is known, else not
    tie = [gold[0], gold[2], gold[1]]
    assert compare(tie, gold, ordered=True, tie_keys=(1,)).strict
    assert not compare(tie, gold, ordered=True).strict
    # numbers: Decimal, float noise, int vs float; dates vs midnight timestamps
    pred = [(decimal.Decimal("10.50"), "East", 3.0), (7.250000001, "North", 2), (7.25, "South", decimal.Decimal(1))]
    assert compare(pred, gold, ordered=False).strict
    assert not compare([(10.6, "East", 3), gold[1], gold[2]], gold, ordered=False).strict
    assert not compare([("East", 10.5, 1_000_001)], [("East", 10.5, 1_000_000)], ordered=False).strict
    assert compare([(dt.datetime(2025, 1, 1), 1)], [(dt.date(2025, 1, 1), 1)], ordered=False).strict
    assert compare([(dt.date(2025, 1, 1), 1)], [("2025-01-01T00:00:00", 1)], ordered=False).strict
    assert not compare([(dt.datetime(2025, 1, 1, 12), 1)], [(dt.date(2025, 1, 1), 1)], ordered=False).strict
    # duplicates count; a dropped row counts
    assert not compare(gold + [gold[0]], gold, ordered=False).strict
    assert not compare(gold[:2], gold, ordered=False).strict
    # columns: permuted and renamed (names are never seen) → strict; extra → lenient only
    perm = [(r[2], r[0], r[1]) for r in gold]
    assert compare(perm, gold, ordered=True).strict
    extra = [(r[1], "x", r[0], r[2], r[1]) for r in gold]
    eq = compare(extra, gold, ordered=True)
    assert (eq.strict, eq.lenient, eq.error) == (False, True, "wrong_columns")
    assert not compare([(r[0],) for r in gold], gold, ordered=False).lenient
    # NULLs and empty results
    assert compare([(None, 1)], [(None, 1)], ordered=False).strict
    assert compare([], [], ordered=False, pred_width=2, gold_width=2).strict
    assert not compare([], gold, ordered=False, pred_width=3).strict


def test_equivalence_permutation_search_is_capped() -> None:
    n = 12
    gold = [tuple(range(n)), tuple(range(n))]
    pred = [tuple([0] * n), tuple([0] * n)]
    t0 = time.monotonic()
    eq = compare(pred, gold, ordered=False)
    assert not eq.strict and time.monotonic() - t0 < 2
    # 12 identical-looking columns (same multiset each) that only one assignment fits
    gold = [tuple(range(n)), tuple(reversed(range(n)))]
    pred = [tuple(reversed(range(n))), tuple(range(n))]
    t0 = time.monotonic()
    eq = compare(pred, gold, ordered=True, max_permutations=100)
    assert time.monotonic() - t0 < 2
    wide = [tuple(range(8)) * 2]
    eq = compare(wide, [tuple(range(8))], ordered=False)
    assert eq.lenient and not eq.strict
