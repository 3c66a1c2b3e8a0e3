"""A dbt project nobody here wrote, built by dbt, asked through the CLI (issue 34's "done when").

``tests/fixtures/dbt_projects/pawsure`` is a pet insurer's dbt project in the shape teams bring
(seeds, staging views, mart tables, a semantic layer beside ordinary ``models:`` keys, with
``description``/``label``/``config`` where dbt accepts them).  The ``pawsure`` fixture
(``tests/conftest.py``) builds it with dbt-duckdb into schema ``analytics`` (seeds in
``analytics__seed``), by the recipe of ``docs/dbt.md``.  The project has three data problems of
its own (its README lists them); dbt builds it fine, nlq2sql must find them, report them with
file and key, and answer every question that touches none of them — from the project folder and
from dbt's ``target/semantic_manifest.json`` alike.
"""

from __future__ import annotations

import json
import re
import subprocess
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
import yaml
from dbt_build import PROJECTS, ROOT, DbtBuild, DbtMissing, dbt_executable, dbt_venv
from typer.testing import CliRunner

from nlq2sql.cli.main import app

runner = CliRunner()

SOURCE = PROJECTS / "pawsure"
V2 = SOURCE / "questions" / "v2.jsonl"
GOLD_SQL = SOURCE / "questions" / "gold_sql.jsonl"
SCHEMA = "analytics"

#: The project's own data problems: (properties file, key, a fragment of what is wrong).
PROBLEMS: tuple[tuple[str, str, str], ...] = (
    ("models/marts/policies.yml", "semantic_models.policies.dimensions.cancelled_on", "NULL"),
    ("models/marts/payments.yml", "semantic_models.premium_payments.entities.holder", "payer_holdr_id"),
    ("models/marts/pets.yml", "semantic_models.vaccinations.entities.vaccination", "not unique"),
)
#: Names a question touches only through a problem: the all-NULL dimension, the model whose
#: primary entity repeats, and the misspelt entity (reached as ``holder__…`` from payments).
PROBLEM_NAMES = ("cancelled_on", "vaccination", "vaccinations_given", "vaccine", "given_on")
PAYMENT_METRICS = ("premiums_collected", "premiums_collected_ytd", "loss_ratio")


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _source(build: DbtBuild, how: str) -> str:
    return str(build.project if how == "folder" else build.manifest)


def _rows(output: str) -> tuple[list[str], list[list[object]]]:
    """The header and rows ``sql --execute`` prints: one JSON object per row, keyed by column."""
    objs = [json.loads(x) for x in output.strip().splitlines()]
    return (list(objs[0]) if objs else []), [list(o.values()) for o in objs]


def _num(value: object) -> object:
    """A cell as a comparable value: DECIMALs print as text, integers and floats as numbers."""
    if isinstance(value, str) and re.fullmatch(r"-?\d+(\.\d+)?", value):
        return round(float(Decimal(value)), 6)
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return round(float(value), 6)
    return value


def _db(build: DbtBuild) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(build.db), read_only=True)


# ------------------------------------------------------------------ what works with dbt alone


def test_dbt_builds_the_project_into_the_profiles_schema_never_main(pawsure: DbtBuild) -> None:
    con = _db(pawsure)
    try:
        where = dict(con.execute("SELECT table_name, table_schema FROM information_schema.tables").fetchall())
    finally:
        con.close()
    marts = {p.stem for p in (SOURCE / "models" / "marts").glob("*.sql")}
    staging = {p.stem for p in (SOURCE / "models" / "staging").glob("*.sql")}
    seeds = {p.stem for p in (SOURCE / "seeds").glob("*.csv")}
    assert marts and staging and seeds
    assert {t: s for t, s in where.items() if t in marts | staging} == dict.fromkeys(marts | staging, SCHEMA)
    assert {t: s for t, s in where.items() if t in seeds} == dict.fromkeys(seeds, f"{SCHEMA}__seed")
    assert "main" not in where.values(), where


def test_dbts_semantic_manifest_holds_the_whole_layer(pawsure: DbtBuild) -> None:
    manifest = json.loads(pawsure.manifest.read_text())
    models = {m["name"]: m for m in manifest["semantic_models"]}
    assert set(models) == {"policies", "claims", "premium_payments", "pets", "holders", "vaccinations"}
    assert {m["node_relation"]["schema_name"] for m in models.values()} == {SCHEMA}
    assert {m["node_relation"]["database"] for m in models.values()} == {pawsure.db.stem}
    kinds = {m["type"] for m in manifest["metrics"]}
    assert kinds == {"simple", "ratio", "derived", "cumulative"}, kinds
    assert {q["name"] for q in manifest["saved_queries"]} == {"premium_by_plan", "monthly_claims"}
    config = manifest["project_configuration"]
    assert not config["time_spine_table_configurations"], "the time spine is declared the dbt 1.9 way"
    [spine] = config["time_spines"]
    assert spine["node_relation"]["schema_name"] == SCHEMA and spine["primary_column"] == {
        "name": "date_day", "time_granularity": "day"}
    # dbt kept what the project says about its objects (what nlq2sql must accept too).
    entity = next(e for e in models["policies"]["entities"] if e["name"] == "policy")
    assert entity["description"] and entity["label"] == "Policy"
    holder = next(e for e in models["policies"]["entities"] if e["name"] == "holder")
    assert holder["config"]["meta"] == {"pii": False}


def test_the_data_problems_are_in_the_data_and_only_there(pawsure: DbtBuild) -> None:
    """dbt built the project without complaint; the warehouse shows each problem."""
    manifest = json.loads(pawsure.manifest.read_text())
    models = {m["name"]: m for m in manifest["semantic_models"]}
    con = _db(pawsure)
    try:
        con.execute(f"SET search_path = '{SCHEMA}'")
        nulls, rows = con.execute("SELECT count(cancelled_on), count(*) FROM fct_policies").fetchone() or (-1, 0)
        assert nulls == 0 and rows > 0, "cancelled_on is NULL in every row"
        cols = dict((r[0], r[1]) for r in con.execute("DESCRIBE fct_policies").fetchall())
        assert cols["cancelled_on"] == "DATE", "a DATE column, so the only thing wrong is that it is empty"
        cols = {r[0]: r[1] for r in con.execute("DESCRIBE fct_premium_payments").fetchall()}
        assert "payer_holder_id" in cols and "payer_holdr_id" not in cols
        repeats = con.execute("SELECT count(*) - count(DISTINCT pet_id) FROM fct_vaccinations").fetchone()
        assert repeats is not None and repeats[0] > 0, "a pet has several vaccinations"
    finally:
        con.close()
    holder = next(e for e in models["premium_payments"]["entities"] if e["name"] == "holder")
    assert holder["expr"] == "payer_holdr_id"
    vacc = next(e for e in models["vaccinations"]["entities"] if e["name"] == "vaccination")
    assert vacc["type"] == "primary" and vacc["expr"] == "pet_id"
    dim = next(d for d in models["policies"]["dimensions"] if d["name"] == "cancelled_on")
    assert dim["type"] == "time"


def test_the_build_takes_dbts_three_commands(pawsure: DbtBuild) -> None:
    """Built by ``dbt seed``, ``dbt run`` and ``dbt parse``; the profile written for the build
    names the scratch DuckDB file and the template's schema."""
    profile = yaml.safe_load((pawsure.project / "profiles.yml").read_text())
    out = profile["pawsure"]["outputs"]["dev"]
    assert out["path"] == str(pawsure.db) and out["schema"] == SCHEMA and out["type"] == "duckdb"
    template = yaml.safe_load((SOURCE / "profiles.yml").read_text())["pawsure"]["outputs"]["dev"]
    assert template["schema"] == SCHEMA and not Path(template["path"]).is_absolute()
    assert (pawsure.project / "target" / "manifest.json").is_file()
    assert pawsure.seconds > 0


def test_no_dbt_venv_fails_naming_the_setup_step(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NLQ2SQL_DBT_VENV", str(tmp_path / "nowhere"))
    with pytest.raises(DbtMissing, match=r"scripts/setup\.sh dbt"):
        dbt_executable()
    monkeypatch.delenv("NLQ2SQL_DBT_VENV")
    assert dbt_venv() == ROOT / ".cache" / "dbt-venv"


def _pins(text: str) -> dict[str, str]:
    return dict(re.findall(r'"(dbt-core|dbt-duckdb|dbt-metricflow|duckdb)==([0-9][0-9.]*)"', text))


def test_the_recipe_setup_and_venv_agree_on_the_pins() -> None:
    """docs/dbt.md's install line, scripts/setup.sh's dbt step and the venv the tests use pin the
    same versions, and dbt's duckdb is the one nlq2sql pins (a newer one writes files ours
    cannot open)."""
    doc = _pins((ROOT / "docs" / "dbt.md").read_text())
    setup = _pins((ROOT / "scripts" / "setup.sh").read_text())
    ours = _pins((ROOT / "pyproject.toml").read_text())["duckdb"]
    assert set(doc) == {"dbt-core", "dbt-duckdb", "dbt-metricflow", "duckdb"}, doc
    assert {k: v for k, v in setup.items() if k != "duckdb"} == {k: v for k, v in doc.items() if k != "duckdb"}
    assert doc["duckdb"] == ours and duckdb.__version__ == ours
    assert "duckdb==$duckdb_pin" in (ROOT / "scripts" / "setup.sh").read_text(), "setup reads pyproject's pin"
    exe = dbt_executable()
    code = ("import importlib.metadata as m; import json; print(json.dumps({n: m.version(n) for n in "
            "('dbt-core', 'dbt-duckdb', 'dbt-metricflow', 'duckdb')}))")
    installed = json.loads(subprocess.run([str(exe.parent / "python"), "-c", code], capture_output=True, text=True,
                                          check=True, timeout=120).stdout)
    assert installed == doc, "the dbt venv is not what setup.sh installs: rerun scripts/setup.sh dbt"


def test_the_question_files_are_sound_and_touch_no_problem(pawsure: DbtBuild) -> None:
    """Every gold SQL runs (unqualified names, search_path on the profile's schema) and returns
    rows; no gold, SQL or v2, names a problem object."""
    gold_sql = _lines(GOLD_SQL)
    assert len(gold_sql) >= 10 and len({g["id"] for g in gold_sql}) == len(gold_sql)
    assert any(g.get("category") == "listing" for g in gold_sql)
    con = _db(pawsure)
    try:
        con.execute(f"SET search_path = '{SCHEMA}'")
        for g in gold_sql:
            sql = str(g["gold_sql"])
            assert not any(n in sql for n in (*PROBLEM_NAMES, "payer_holdr")), g["id"]
            assert con.execute(sql).fetchall(), f"{g['id']}: no rows"
    finally:
        con.close()
    v2 = _lines(V2)
    assert len(v2) >= 10 and len({q["id"] for q in v2}) == len(v2)
    listings = [q for q in v2 if q["gold"] and not q["gold"]["metrics"]]  # type: ignore[index]
    assert listings and all(q["category"] == "listing" for q in listings)
    for q in v2:
        gold = q["gold"]
        assert set(q) == {"id", "question", "gold", "answerable", "category", "pair_id", "tags"}, q["id"]
        assert q["answerable"] is (gold is not None), q["id"]
        if not isinstance(gold, dict):
            continue
        names = [*gold["metrics"], *gold["group_by"], *(w["field"] for w in gold.get("where") or ())]
        assert not any(p in n for n in names for p in PROBLEM_NAMES), q["id"]
        if set(gold["metrics"]) & set(PAYMENT_METRICS):
            assert not any(n.startswith("holder__") for n in names), q["id"]


# ------------------------------------------------------------------ the harness on the project
# These need issue 34's harness work (dbt manifests through MetricFlow's dbt reader, ref() in the
# profile's schema, dbt's keys accepted, partial layers, listings, gold-SQL question files).


@pytest.mark.parametrize("how", ["folder", "manifest"])
def test_semantic_check_lists_exactly_the_projects_problems(pawsure: DbtBuild, how: str) -> None:
    res = runner.invoke(app, ["semantic", "check", _source(pawsure, how), "--db", str(pawsure.db)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    found = [ln for ln in res.output.splitlines() if "field '" in ln]
    keys = {re.search(r"field '([^']+)'", ln).group(1) for ln in found}  # type: ignore[union-attr]
    assert keys == {key for _, key, _ in PROBLEMS}, res.output
    for file, key, fragment in PROBLEMS:
        line = next(ln for ln in found if f"field '{key}'" in ln)
        where = str(pawsure.project / file) if how == "folder" else str(pawsure.manifest)
        assert line.startswith(f"{where}:"), (line, where)
        assert fragment in line, line


@pytest.mark.parametrize("how", ["folder", "manifest"])
def test_semantic_show_offers_the_layer_less_its_problems(pawsure: DbtBuild, how: str) -> None:
    """The vocabulary offered to a model keeps every sound metric and group-by and drops exactly
    what a problem touches: the all-NULL dimension, and the misspelt entity's join from payments
    (the same holders stay reachable through the policy)."""
    res = runner.invoke(app, ["semantic", "show", "--semantic-model", _source(pawsure, how), "--db",
                              str(pawsure.db), "--json"])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    metrics = shown["metrics"]
    assert {"policies_sold", "premium_written", "average_premium", "claims_filed", "amount_paid", "payout_ratio",
            "unpaid_amount", "premiums_collected", "premiums_collected_ytd", "loss_ratio"} <= set(metrics)
    assert "policy__plan" in metrics["premium_written"]["group_by"]
    assert "policy__holder__region" in metrics["premiums_collected"]["group_by"]
    assert "holder__region" not in metrics["premiums_collected"]["group_by"], "joined through the misspelt entity"
    offered = [g for m in metrics.values() for g in m["group_by"]]
    assert not [g for g in offered if "cancelled_on" in g], "an all-NULL time dimension is not offered"
    assert "cancelled_on" not in json.dumps(shown["query_schema"])


QUERY = {"metrics": ["premium_written", "claims_filed"], "group_by": ["policy__plan"],
         "order_by": [{"field": "policy__plan"}]}
EXPECTED_SQL = f"""
WITH premium AS (SELECT plan, sum(annual_premium) AS premium FROM {SCHEMA}.fct_policies GROUP BY plan),
claims AS (SELECT p.plan, count(*) AS claims FROM {SCHEMA}.fct_claims AS c
           LEFT JOIN {SCHEMA}.fct_policies AS p ON p.policy_id = c.policy_id GROUP BY p.plan)
SELECT coalesce(premium.plan, claims.plan), premium.premium, claims.claims
FROM premium FULL JOIN claims ON premium.plan = claims.plan ORDER BY 1"""


def _sql(build: DbtBuild, how: str, query: dict[str, object], *extra: str) -> tuple[list[str], list[list[object]]]:
    res = runner.invoke(app, ["sql", "--semantic-model", _source(build, how), "--db", str(build.db),
                              "--intent", json.dumps(query), "--execute", *extra])
    assert res.exit_code == 0, res.output
    return _rows(res.stdout)


def test_sql_execute_answers_a_sound_query_the_same_from_folder_and_manifest(pawsure: DbtBuild) -> None:
    header, folder = _sql(pawsure, "folder", QUERY)
    assert header == ["policy__plan", "premium_written", "claims_filed"]
    _, manifest = _sql(pawsure, "manifest", QUERY)
    _, named = _sql(pawsure, "folder", QUERY, "--db-schema", SCHEMA)
    con = _db(pawsure)
    try:
        expected = [[_num(x) for x in row] for row in con.execute(EXPECTED_SQL).fetchall()]
    finally:
        con.close()
    assert [[_num(x) for x in r] for r in folder] == expected
    assert manifest == folder and named == folder


@pytest.mark.parametrize("how", ["folder", "manifest"])
def test_a_listing_executes_and_returns_distinct_values(pawsure: DbtBuild, how: str) -> None:
    header, rows = _sql(pawsure, how, {"metrics": [], "group_by": ["pet__species"]})
    assert header == ["pet__species"]
    con = _db(pawsure)
    try:
        species = sorted(r[0] for r in con.execute(f"SELECT DISTINCT species FROM {SCHEMA}.dim_pets").fetchall())
        policies = con.execute(f"SELECT count(DISTINCT policy_number) FROM {SCHEMA}.fct_policies").fetchone()
    finally:
        con.close()
    assert sorted(str(r[0]) for r in rows) == species and len(rows) == len(species) > 1
    header, rows = _sql(pawsure, how, {"metrics": [], "group_by": ["policy__policy_number",
                                                                  "policy__start_date__day"]})
    assert len(header) == 2 and len({tuple(map(str, r)) for r in rows}) == len(rows)
    assert policies is not None and len(rows) == policies[0]


def _excluded_named(output: str) -> None:
    text = " ".join(output.split())
    assert "exclud" in text.lower(), output
    for name in ("cancelled_on", "vaccination", "holder"):
        assert name in text, (name, output)


@pytest.mark.parametrize("how", ["folder", "manifest"])
def test_evalset_check_passes_the_v2_set_naming_what_was_excluded(pawsure: DbtBuild, how: str) -> None:
    items = _lines(V2)
    res = runner.invoke(app, ["evalset", "check", str(V2), "--semantic-model", _source(pawsure, how), "--db",
                              str(pawsure.db)])
    assert res.exit_code == 0, res.output
    unanswerable = sum(1 for q in items if not q["answerable"])
    text = " ".join(res.output.split())
    assert f"{len(items)} v2 items OK ({unanswerable} unanswerable)" in text, res.output
    assert "pawsure" in text and "'target'" not in text, "the warehouse is named after the dbt project"
    _excluded_named(res.output)


@pytest.mark.parametrize("how", ["folder", "manifest"])
def test_evalset_check_passes_the_gold_sql_file_naming_what_was_excluded(pawsure: DbtBuild, how: str) -> None:
    items = _lines(GOLD_SQL)
    res = runner.invoke(app, ["evalset", "check", str(GOLD_SQL), "--semantic-model", _source(pawsure, how), "--db",
                              str(pawsure.db)])
    assert res.exit_code == 0, res.output
    assert str(len(items)) in res.output, res.output
    _excluded_named(res.output)


def _wrong(gold: dict[str, object]) -> dict[str, object]:
    """A valid query whose rows differ from the gold's (another group-by, or no limit)."""
    if gold.get("limit"):
        return {k: v for k, v in gold.items() if k != "limit"}
    swap = {"claim__status": "claim__condition", "policy__plan": "claim__condition", "pet__species": "policy__plan",
            "metric_time__month": "metric_time__quarter", "metric_time__quarter": "metric_time__year",
            "policy__holder__region": "policy__plan", "policy__start_date__day": "policy__end_date__day"}
    group_by = [swap.get(str(g), str(g)) for g in gold["group_by"]]  # type: ignore[attr-defined]
    assert group_by != gold["group_by"], gold
    return {**gold, "group_by": group_by}


def _answers(items: list[dict[str, object]]) -> tuple[dict[str, str], int, set[str]]:
    """Every other answerable item answered with its gold, the rest with a query whose rows
    differ, the unanswerable item declined: (answer text by id, correct count, wrong ids)."""
    texts: dict[str, str] = {}
    expected, wrong = 0, set()
    for i, q in enumerate(items):
        if not q["answerable"]:
            texts[str(q["id"])], expected = json.dumps({"unanswerable": "we keep no clinic ratings"}), expected + 1
        elif i % 2 == 0:
            texts[str(q["id"])], expected = json.dumps(q["gold"]), expected + 1
        else:
            texts[str(q["id"])] = json.dumps(_wrong(q["gold"]))  # type: ignore[arg-type]
            wrong.add(str(q["id"]))
    assert 0 < expected < len(items)
    return texts, expected, wrong


def _records(run: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("how", ["folder", "manifest"])
def test_score_on_the_v2_set_counts_exactly_the_right_answers(pawsure: DbtBuild, how: str, tmp_path: Path) -> None:
    items = _lines(V2)
    texts, expected, wrong = _answers(items)
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in texts.items()))
    res = runner.invoke(app, ["score", "--answer", "query", "--evalset", str(V2), "--responses", str(path),
                              "--out", str(tmp_path / "run"), "--semantic-model", _source(pawsure, how), "--db",
                              str(pawsure.db), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["n"] == len(items) and summary["final_accuracy"]["k"] == expected, summary["final_accuracy"]
    assert {r["id"] for r in _records(tmp_path / "run") if not r["correct_final"]} == wrong


def test_eval_against_a_fake_server_scores_and_records_what_was_excluded(pawsure: DbtBuild, tmp_path: Path) -> None:
    """The live path on dbt's manifest: the schema sent offers no excluded object, the answers
    score as by ``score``, and the run's manifest records what the layer excluded."""
    from fakeserver import FakeServer, script

    items = _lines(V2)
    texts, expected, wrong = _answers(items)
    by_q = {str(q["question"]): [{"kind": "text", "text": texts[str(q["id"])]}] for q in items}
    with FakeServer(tmp_path / "fake", script(by_question=by_q), model="fake-model") as fake:
        res = runner.invoke(app, ["eval", "--answer", "query", "--evalset", str(V2), "--endpoint", fake.url,
                                  "--model", "fake-model", "--out", str(tmp_path / "run"), "--semantic-model",
                                  str(pawsure.manifest), "--db", str(pawsure.db)])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["n"] == len(items) and summary["final_accuracy"]["k"] == expected, summary["final_accuracy"]
    assert {r["id"] for r in _records(tmp_path / "run") if not r["correct_final"]} == wrong
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    schema = manifest["sampling"]["schema_json"]
    assert "policy__plan" in schema and "cancelled_on" not in schema
    recorded = json.dumps(manifest)
    assert "exclu" in recorded.lower(), "the run records what the layer excluded"
    for _, key, _ in PROBLEMS:
        assert key.rsplit(".", 1)[-1] in recorded, key


def test_score_sql_answers_against_the_gold_sql_file_by_result(pawsure: DbtBuild, tmp_path: Path) -> None:
    """Gold SQL as the answer is correct; other SQL is correct exactly when it returns the gold's
    rows (here: the seed table read instead of the mart), wrong when its rows differ."""
    items = _lines(GOLD_SQL)
    texts = {str(g["id"]): str(g["gold_sql"]) for g in items}
    texts["pg-004"] = f"SELECT claim_status, count(*) FROM {SCHEMA}__seed.raw_claims GROUP BY claim_status"
    texts["pg-006"] = "SELECT full_name FROM dim_holders WHERE region = 'South'"
    texts["pg-010"] = "SELECT max(paid_amount) FROM fct_claims"
    con = _db(pawsure)
    try:
        con.execute(f"SET search_path = '{SCHEMA}'")
        for ident in ("pg-004", "pg-006", "pg-010"):
            gold = next(str(g["gold_sql"]) for g in items if g["id"] == ident)
            answer, expected = (sorted(map(str, con.execute(q).fetchall())) for q in (texts[ident], gold))
            assert (answer == expected) is (ident == "pg-004"), ident
    finally:
        con.close()
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in texts.items()))
    res = runner.invoke(app, ["score", "--answer", "sql", "--evalset", str(GOLD_SQL), "--responses", str(path),
                              "--out", str(tmp_path / "run"), "--semantic-model", str(pawsure.manifest), "--db",
                              str(pawsure.db), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["n"] == len(items) and summary["final_accuracy"]["k"] == len(items) - 2, summary["final_accuracy"]
    assert {r["id"] for r in _records(tmp_path / "run") if not r["correct_final"]} == {"pg-006", "pg-010"}


TIMING = {"latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks", "attempts", "retry_waits_s",
          "sql_exec_s"}


def test_batch_answers_a_dbt_projects_questions_as_eval_does(pawsure: DbtBuild, tmp_path: Path) -> None:
    """The run spec's layer parts (the dbt project, ``--db-schema``) reach ``batch`` as they reach
    ``eval``: the same question file, the same answers, the same records (timings aside)."""
    from fakeserver import FakeServer, script

    from nlq2sql.records.store import iter_records
    from nlq2sql.run.batch_shards import iter_shard_records

    layer = ["--semantic-model", _source(pawsure, "folder"), "--db", str(pawsure.db), "--db-schema", SCHEMA,
             "--answer", "query", "--evalset", str(V2), "--limit", "3", "--model", "fake-model"]
    answer = script(default={"kind": "text", "text": json.dumps(QUERY)})
    with FakeServer(tmp_path / "fake", answer, model="fake-model") as fake:
        res = runner.invoke(app, ["eval", *layer, "--endpoint", fake.url, "--out", str(tmp_path / "eval"),
                                  "--max-failure-rate", "1"])
        assert res.exit_code == 0, res.output
        res = runner.invoke(app, ["batch", "--engine", "local", *layer, "--endpoint", fake.url, "--format", "jsonl",
                                  "--out", str(tmp_path / "batch")])
        assert res.exit_code == 0, res.output
    evaluated = {r["id"]: {k: v for k, v in r.items() if k not in TIMING}
                 for r in iter_records(tmp_path / "eval" / "records.jsonl")}
    batched = {r["id"]: {k: v for k, v in r.items() if k not in TIMING} for r in iter_shard_records(tmp_path / "batch")}
    assert batched == evaluated and len(batched) == 3
    assert any(r.get("correct_final") for r in batched.values()) or all(r["sql"] for r in batched.values())
