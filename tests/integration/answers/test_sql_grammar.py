"""The ``sql-grammar`` arm's grammar, the SQL arms' solved examples and the arms' comparison:
every shipped warehouse's grammar compiles with xgrammar as vLLM will read it, it accepts the
clean gold SQL the examples show and refuses names outside the warehouse; each clean solved
SQL returns its gold's rows; the gold's own SQL scores 1.0 on every shipped v2 set."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import xgrammar as xgr
from typer.testing import CliRunner
from xgrammar.testing import _is_grammar_accept_string

from nlq2sql.answers.kinds import bind_sampling
from nlq2sql.answers.sql.grammar import check_compiles, grammar_text, sql_grammar
from nlq2sql.answers.sql.sandbox import Sandbox
from nlq2sql.answers.sql.score import sql_record
from nlq2sql.answers.sql.solved import inline_params, solve
from nlq2sql.cli.main import app
from nlq2sql.errors import InputError
from nlq2sql.experiments.arms import arms_table, common_error, load_arm, parse_answers, render_markdown
from nlq2sql.semantic import open_warehouse
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.pipeline import make_executor
from nlq2sql.stages.queryset import load_query_set
from nlq2sql.transport.client import Sampling, request_kwargs

SHIPPED = ("retail", "tpch", "flights", "jaffle")
V2_SETS = {"retail": "heldout-v2", "tpch": "heldout-v2", "flights": "heldout-v2"}
runner = CliRunner()


def _sql_flat(*args: Any, **kw: Any) -> dict[str, Any]:
    """:func:`sql_record` as its flat line (what these tests read key by key)."""
    return sql_record(*args, **kw).to_json(version=False)


@pytest.fixture(scope="module")
def warehouses() -> dict[str, Warehouse]:
    return {name: open_warehouse(name) for name in SHIPPED}


def _accepts(text: str, sql: str) -> bool:
    return bool(_is_grammar_accept_string(xgr.Grammar.from_ebnf(text), sql))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_grammar_compiles_as_vllm_reads_it(warehouses: dict[str, Warehouse], name: str) -> None:
    from vllm.v1.structured_output.utils import grammar_is_likely_lark

    wh = warehouses[name]
    g = sql_grammar(wh.catalog, wh)
    check_compiles(g.text)  # raises with xgrammar's message
    assert not grammar_is_likely_lark(g.text), "vLLM must read it as EBNF (compile_grammar), not Lark"
    assert g.sha256 == sql_grammar(wh.catalog, wh).sha256, "deterministic: the manifest's sha256 names it"
    assert g.tables and set(g.tables) <= {sm.node_relation.alias for sm in wh.catalog.manifest.semantic_models}


def test_a_broken_grammar_is_refused_offline() -> None:
    with pytest.raises(ValueError, match="xgrammar refuses"):
        check_compiles('root ::= "SELECT " missing_rule\n')
    with pytest.raises(ValueError):
        grammar_text({})


def test_grammar_admits_only_the_warehouse_names(warehouses: dict[str, Warehouse]) -> None:
    wh = warehouses["retail"]
    text = sql_grammar(wh.catalog, wh).text
    good = ["SELECT customers.region AS region, SUM(order_lines.quantity) AS units FROM order_lines "
            "LEFT JOIN customers ON order_lines.customer_id = customers.customer_id "
            "WHERE order_lines.order_date BETWEEN DATE '2025-01-01' AND DATE '2025-12-31' "
            "AND customers.segment IN ('Consumer', 'Corporate') GROUP BY customers.region ORDER BY 2 DESC LIMIT 3",
            "SELECT DATE_TRUNC('month', order_lines.order_date), COUNT(DISTINCT order_lines.order_id) "
            "FROM order_lines GROUP BY DATE_TRUNC('month', order_lines.order_date)",
            "SELECT CAST(SUM(order_lines.quantity) AS DOUBLE) / CAST(NULLIF(COUNT(*), 0) AS DOUBLE) FROM order_lines "
            "WHERE (order_lines.discount > 0.1 OR NOT order_lines.discount IS NULL)",
            '{"unanswerable": "the warehouse holds no weather"}']
    for sql in good:
        assert _accepts(text, sql), sql
    bad = ["SELECT weather.temp FROM weather",  # a table the warehouse lacks
           "SELECT order_lines.price FROM order_lines",  # a column it lacks
           "SELECT customers.quantity FROM customers",  # a column of another table
           "SELECT o.quantity FROM order_lines o",  # aliases would let any name in
           "SELECT * FROM order_lines",
           "SELECT order_lines.quantity FROM order_lines; DROP TABLE order_lines",
           "SELECT order_lines.quantity FROM read_csv('x.csv')",
           "SELECT order_lines.quantity FROM order_lines -- hidden",
           "select order_lines.quantity from order_lines"]
    for sql in bad:
        assert not _accepts(text, sql), sql


@pytest.mark.parametrize("name", SHIPPED)
def test_solved_examples_return_the_gold_rows_and_fit_the_grammar(warehouses: dict[str, Warehouse],
                                                                 name: str) -> None:
    """Each clean solved SQL is checked by execution when made; here it is scored again through the
    SQL arm's own path (guard, sandbox, equivalence) and must fit the warehouse's grammar."""
    wh = warehouses[name]
    text = sql_grammar(wh.catalog, wh).text
    bank = load_query_set("dev", wh.catalog)
    # (a generous per-query timeout: this checks equivalence, and a contended machine once took
    # over the default 10 s on one query, which then counted as not clean)
    with Executor(wh.db_path, timeout_s=120) as ex, Sandbox(wh.db_path) as box:
        solved = solve([c.gold for c in bank.cases], wh.catalog, wh, ex)
        clean = [(c, s) for c, s in zip(bank.cases, solved, strict=True) if s is not None and s.style == "clean"]
        for case, s in clean:
            rec = _sql_flat(case, s.sql, ex, wh.catalog, sandbox=box)
            assert rec["correct_final"], (case.id, s.sql, rec["error_final"], rec["status_reason"])
            assert _accepts(text, s.sql), (case.id, s.sql)
    answerable = [s for s in solved if s is not None]
    share = len(clean) / len(answerable)
    assert share >= (1.0 if name != "jaffle" else 0.5), f"{name}: only {len(clean)}/{len(answerable)} clean"


@pytest.mark.parametrize("name", sorted(V2_SETS))
def test_gold_sql_scores_one_on_every_shipped_v2_set(warehouses: dict[str, Warehouse], name: str) -> None:
    wh = warehouses[name]
    qs = load_query_set(V2_SETS[name], wh.catalog)
    scored = 0
    with make_executor(wh) as ex, Sandbox(wh.db_path) as box:
        for case in qs.cases:
            if case.gold is None:
                continue
            q = wh.catalog.engine.compile(case.gold)
            rec = _sql_flat(case, "```sql\n" + inline_params(q.sql, q.params) + "\n```", ex, wh.catalog, sandbox=box)
            assert rec["correct_final"] and rec["correct_lenient"], (case.id, rec["error_final"], rec["status_reason"])
            scored += 1
    assert scored == len(qs.cases) >= 20


def test_grammar_sampling_sends_the_grammar() -> None:
    with pytest.raises(InputError, match="needs a grammar"):
        Sampling(structured="grammar")
    s = bind_sampling(Sampling(), object(), "sql-grammar", grammar='root ::= "SELECT 1"')
    kw = request_kwargs("m", [{"role": "user", "content": "q"}], s)
    assert kw["extra_body"]["structured_outputs"] == {"grammar": 'root ::= "SELECT 1"'}
    assert "response_format" not in kw and len(s.recorded().grammar_sha256 or "") == 64
    with pytest.raises(ValueError):
        bind_sampling(Sampling(), object(), "sql-grammar")


class _Refuse(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 — http.server's name
        body = json.dumps({"error": {"message": "Invalid grammar specification."}}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[str]:
    srv = HTTPServer(("127.0.0.1", 0), _Refuse)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_a_refused_grammar_is_one_clear_error(refusing_server: str, warehouses: dict[str, Warehouse]) -> None:
    """(A real vLLM's refusal is checked live; a fake stands in for the HTTP 400 it answers.)"""
    from nlq2sql.run.sql_grammar import probe_grammar

    wh = warehouses["retail"]
    with pytest.raises(InputError, match="refuses the warehouse's SQL grammar.*400.*Invalid grammar"):
        probe_grammar(refusing_server, "m", "EMPTY", sql_grammar(wh.catalog, wh))


def test_arms_side_by_side_from_records(tmp_path: Path) -> None:
    """Two arms scored offline on the same items: accuracy with CIs, McNemar paired on id, taxonomy."""
    cat = open_warehouse("retail").catalog
    qs = load_query_set("heldout-v2", cat)
    cases = [c for c in qs.cases if c.gold is not None][:4]
    q0 = cat.engine.compile(cases[0].gold)  # type: ignore[arg-type]
    sql_answers = {cases[0].id: inline_params(q0.sql, q0.params), cases[1].id: "SELECT 1 FROM nowhere",
                   cases[2].id: "no idea", cases[3].id: "SELECT 1"}
    query_answers = {c.id: json.dumps(c.gold.model_dump(mode="json")) for c in cases[1:3]}  # type: ignore[union-attr]
    query_answers[cases[0].id] = query_answers[cases[3].id] = '{"unanswerable": "no"}'
    dirs = {}
    for arm, answers in (("sql", sql_answers), ("query", query_answers)):
        responses = tmp_path / f"{arm}.jsonl"
        responses.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in answers.items()))
        dirs[arm] = tmp_path / arm
        res = runner.invoke(app, ["score", "--answer", arm, "--evalset", "heldout-v2", "--responses", str(responses),
                                  "--out", str(dirs[arm]), "--allow-missing"])
        assert res.exit_code == 0, res.output
    table = arms_table([load_arm(dirs["query"]), load_arm(dirs["sql"])], gpu_cost_per_hour=1.0)
    by_arm = {r.arm: r for r in table.arms}
    assert by_arm["sql"].accuracy.k == 1 and by_arm["query"].accuracy.k == 2
    n = len(qs.cases)
    assert by_arm["sql"].n == by_arm["query"].n == n
    (pair,) = table.pairs
    assert (pair.a, pair.b, pair.n) == ("query", "sql", n)
    assert (pair.a_right_b_wrong, pair.b_right_a_wrong) == (2, 1)
    errors = by_arm["sql"].errors
    assert (errors["correct"], errors["unparsable"], errors["refused"]) == (1, 1, 1)
    md = render_markdown(table, "t")
    assert "| query | sql |" in md and "McNemar" in md
    assert common_error("wrong_where") == "wrong rows" and common_error(None) is None
    assert parse_answers("intent,sql,sql-grammar") == ("query", "sql", "sql-grammar")
    with pytest.raises(InputError, match="unknown answer arm"):
        parse_answers("query,prose")


def test_eval_sql_grammar_with_solved_sql_examples(tmp_path: Path) -> None:
    """``eval --answer sql-grammar --examples 2`` end to end on the fake server: the grammar probe goes
    first, the manifest records the grammar as it records a JSON Schema, the examples are solved SQL."""
    from fakeserver import FakeServer, script

    wh = open_warehouse("retail")
    qs = load_query_set("heldout-v2", wh.catalog)
    cases = [c for c in qs.cases if c.gold is not None][:2]
    with make_executor(wh) as ex:
        solved = solve([c.gold for c in cases], wh.catalog, wh, ex)
    by_q = {c.question: [{"kind": "text", "text": s.sql}] for c, s in zip(cases, solved, strict=True) if s}
    with FakeServer(tmp_path / "fake", script(by_question=by_q), model="fake-model") as fake:
        res = runner.invoke(app, ["eval", "--answer", "sql-grammar", "--examples", "2", "--evalset", "heldout-v2",
                                  "--endpoint", fake.url, "--model", "fake-model", "--limit", "2",
                                  "--out", str(tmp_path / "run")])
        chats = fake.chat_requests()
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    recs = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    g = sql_grammar(wh.catalog, wh)
    assert manifest["answer"] == "sql-grammar" and manifest["prompt"] == "sql"
    assert manifest["sampling"]["structured"] == "grammar"
    assert (manifest["sampling"]["grammar"], manifest["sampling"]["grammar_sha256"]) == (g.text, g.sha256)
    sols = manifest["examples"]["solutions"]  # retail's dev bank: 20 golds, each clean SQL or MetricFlow's
    assert manifest["examples"]["k"] == 2 and sols["kind"] == "sql"
    assert sols["clean"] + sols.get("metricflow", 0) == 20 and sols["clean"] >= 15
    assert {r["answer"] for r in recs} == {"sql-grammar"} and all(len(r["example_ids"]) == 2 for r in recs)
    assert all(r["correct_final"] for r in recs), [r["error_final"] for r in recs]
    grammar_probe, *items = chats  # the grammar's probe first, then one request per item
    assert grammar_probe["question"] == "Write one SQL SELECT statement." and not grammar_probe["stream"]
    assert len(items) == 2 and all(c["stream"] for c in items)


def test_sql_grammar_refuses_what_it_cannot_take(tmp_path: Path) -> None:
    res = runner.invoke(app, ["eval", "--answer", "sql-grammar", "--guardrails", "ranking", "--evalset", "heldout-v2",
                              "--endpoint", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "--guardrails" in res.output
    assert not (tmp_path / "run").exists()


def test_matrix_answers_from_recorded_runs(tmp_path: Path) -> None:
    """``matrix --answers … --runs …`` puts recorded arms side by side; a bad arm is refused first."""
    cat = open_warehouse("retail").catalog
    qs = load_query_set("heldout-v2", cat)
    case = next(c for c in qs.cases if c.gold is not None)
    q = cat.engine.compile(case.gold)  # type: ignore[arg-type]
    dirs = []
    gold = json.dumps(case.gold.model_dump(mode="json"))  # type: ignore[union-attr]
    for arm, text in (("sql", inline_params(q.sql, q.params)), ("query", gold)):
        responses = tmp_path / f"{arm}.jsonl"
        responses.write_text(json.dumps({"id": case.id, "text": text}) + "\n")
        res = runner.invoke(app, ["score", "--answer", arm, "--evalset", "heldout-v2", "--responses", str(responses),
                                  "--out", str(tmp_path / arm), "--allow-missing"])
        assert res.exit_code == 0, res.output
        dirs += ["--runs", str(tmp_path / arm)]
    res = runner.invoke(app, ["matrix", "--answers", "intent,sql", *dirs, "--out", str(tmp_path / "m"),
                              "--gpu-cost-per-hour", "1"])
    assert res.exit_code == 0, res.output
    table = json.loads((tmp_path / "m" / "arms.json").read_text())
    assert [r["arm"] for r in table["arms"]] == ["sql", "query"]
    assert all(r["accuracy"]["k"] == 1 for r in table["arms"]) and table["pairs"][0]["mcnemar_exact_p"] == 1.0
    assert (tmp_path / "m" / "arms.md").read_text().count("| sql |") >= 1
    res = runner.invoke(app, ["matrix", "--answers", "sql,prose", "--out", str(tmp_path / "bad")])
    assert res.exit_code == 2 and "unknown answer arm" in res.output and not (tmp_path / "bad").exists()
    res = runner.invoke(app, ["matrix", "--answers", "sql-grammar", *dirs, "--out", str(tmp_path / "bad")])
    assert res.exit_code == 2 and "not named in --answers" in res.output
