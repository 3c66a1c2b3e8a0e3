"""A dbt project as dbt builds it: its ``target/semantic_manifest.json`` (written by dbt-core 1.11
``dbt parse`` for ``tests/fixtures/dbt-tinyshop``) and its YAML folder load alike; relations are
where dbt put them (``node_relation``; for the folder the profile's target schema, the folder's
``+schema`` and the model's alias), never a silent ``main``; every key dbt accepts loads.

The fixture's models: ``orders`` (in ``marts/``, ``+schema: marts``, alias ``fct_orders``) →
``analytics_marts.fct_orders``; ``stg_customers`` → ``analytics.stg_customers``; the time spine
model ``metricflow_time_spine`` → ``analytics.metricflow_time_spine`` (dbt's legacy config)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from repo_paths import FIXTURES
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.semantic import open_warehouse
from nlq2sql.semantic.catalog import resolve_spec_path
from nlq2sql.semantic.dbt_project import DbtOptions, dbt_target
from nlq2sql.semantic.warehouse import open_error

runner = CliRunner()
FIXTURE = FIXTURES / "dbt-tinyshop"
MANIFEST = FIXTURE / "target" / "semantic_manifest.json"
ORDERS = [(1, 1, "2024-01-05", 10.0), (2, 1, "2024-02-10", 5.5), (3, 2, "2024-02-11", 7.25), (4, 3, "2024-03-01", 1.0)]
CUSTOMERS = [(1, "North"), (2, "South"), (3, "North")]
BY_REGION = {"North": 16.5, "South": 7.25}


def build(path: Path, *, marts: str = "analytics_marts", base: str = "analytics", spine: bool = False) -> Path:
    """The fixture's warehouse as dbt-duckdb would build it (the file named unlike dbt's database)."""
    con = duckdb.connect(str(path))
    for schema in {marts, base}:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    con.execute(f"CREATE TABLE {marts}.fct_orders (order_id INT, customer_id INT, ordered_at DATE, amount DOUBLE)")
    con.executemany(f"INSERT INTO {marts}.fct_orders VALUES (?, ?, ?, ?)", ORDERS)
    con.execute(f"CREATE TABLE {base}.stg_customers (customer_id INT, region VARCHAR)")
    con.executemany(f"INSERT INTO {base}.stg_customers VALUES (?, ?)", CUSTOMERS)
    if spine:  # the first quarter only: a spine of its own, told apart from the generated one
        con.execute(f"CREATE TABLE {base}.metricflow_time_spine AS SELECT CAST(range AS DATE) AS date_day "
                    "FROM range(DATE '2024-01-01', DATE '2024-04-01', INTERVAL 1 DAY)")
    con.close()
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("dbt") / "warehouse.duckdb")


def _sql(layer: Path, db: Path, *extra: str) -> list[list[object]]:
    intent = json.dumps({"metrics": ["revenue"], "group_by": ["customer__region"]})
    res = runner.invoke(app, ["sql", "--semantic-model", str(layer), "--db", str(db), "--intent", intent,
                              "--execute", *extra])
    assert res.exit_code == 0, res.output
    return [list(json.loads(line).values()) for line in res.stdout.splitlines()]  # a JSON object per row


def test_dbts_manifest_and_its_folder_load_alike(db: Path) -> None:
    res = runner.invoke(app, ["semantic", "check", str(MANIFEST), "--db", str(db)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["semantic", "check", str(FIXTURE / "models"), "--db", str(db),
                              "--profiles-dir", str(FIXTURE)])
    assert res.exit_code == 0, res.output
    a = open_warehouse(MANIFEST, db)
    b = open_warehouse(FIXTURE / "models", db, dbt=DbtOptions(profiles_dir=str(FIXTURE)))
    assert sorted(a.catalog.metrics) == sorted(b.catalog.metrics) == ["order_count", "orders_per_customer", "revenue"]
    assert all(a.catalog.engine.group_bys((m,)) == b.catalog.engine.group_bys((m,)) for m in a.catalog.metrics)
    assert a.catalog.relations["orders"].sql == b.catalog.relations["orders"].sql == "analytics_marts.fct_orders"
    assert a.name == b.name == "tinyshop"  # the dbt project's name, not "target" or "models"
    for layer in (MANIFEST, FIXTURE / "models"):
        rows = _sql(layer, db, "--profiles-dir", str(FIXTURE))
        assert {r[0]: r[1] for r in rows} == BY_REGION
    # the manifest's descriptions and labels reached MetricFlow's objects
    assert a.catalog.metrics["revenue"].description == "Total order amount."


def test_semantic_show_and_value_lookups_read_the_relations_schema(db: Path) -> None:
    res = runner.invoke(app, ["semantic", "show", "--semantic-model", str(MANIFEST), "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert shown["dimensions"]["region"]["values"] == ["North", "South"]
    assert shown["years"] == ["2024"]
    wh = open_warehouse(MANIFEST, db)
    assert wh.has_value("region", "South") and not wh.has_value("region", "East")


def test_the_declared_spine_is_used_when_the_database_holds_it(tmp_path: Path) -> None:
    without = build(tmp_path / "plain.duckdb")
    res = runner.invoke(app, ["semantic", "check", str(MANIFEST), "--db", str(without)])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "analytics.metricflow_time_spine.date_day is not in the database: the generated day spine" in out
    assert "time spine: generated" in out
    held = build(tmp_path / "spine.duckdb", spine=True)
    for layer, opts in ((MANIFEST, None), (FIXTURE / "models", DbtOptions(profiles_dir=str(FIXTURE)))):
        wh = open_warehouse(layer, held, dbt=opts)
        assert wh.catalog.spine == "declared" and not wh.catalog.spine_note
        spines = wh.catalog.manifest.project_configuration.time_spines
        assert [sp.node_relation.relation_name for sp in spines] == ["analytics.metricflow_time_spine"]
    res = runner.invoke(app, ["semantic", "check", str(MANIFEST), "--db", str(held)])
    out = " ".join(res.output.split())
    assert res.exit_code == 0 and "time spine: declared" in out and "note:" not in out, out


def test_db_schema_overrides_every_relation_and_is_recorded(tmp_path: Path) -> None:
    db = build(tmp_path / "flat.duckdb", marts="reporting", base="reporting")
    res = runner.invoke(app, ["semantic", "check", str(MANIFEST), "--db", str(db)])
    assert res.exit_code == 2 and "not in schema 'analytics_marts'" in res.output
    assert "schema 'reporting' holds one: pass --db-schema reporting" in res.output
    for layer in (MANIFEST, FIXTURE / "models"):
        rows = _sql(layer, db, "--db-schema", "reporting")
        assert {r[0]: r[1] for r in rows} == BY_REGION
    wh = open_warehouse(MANIFEST, db, dbt=DbtOptions(db_schema="reporting"))
    assert wh.manifest().db_schema == "reporting"
    assert open_warehouse(MANIFEST, build(tmp_path / "usual.duckdb")).manifest().db_schema is None


def test_yaml_without_a_dbt_project_is_in_main_and_the_problem_says_where_else(tmp_path: Path, db: Path) -> None:
    alone = tmp_path / "layer"
    alone.mkdir()
    shutil.copy(FIXTURE / "models" / "semantic.yml", alone / "semantic.yml")
    res = runner.invoke(app, ["semantic", "check", str(alone), "--db", str(db)])
    assert res.exit_code == 2
    out = " ".join(res.output.split())
    assert "'orders' is not in schema 'main'" in out and "fct_orders" not in out  # no dbt project: no alias
    assert "table or view 'stg_customers' is not in schema 'main'" in out
    assert "schema 'analytics' holds one: pass --db-schema analytics" in out


def test_a_dbt_project_without_its_profile_is_refused(tmp_path: Path, db: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "proj"
    shutil.copytree(FIXTURE, project)
    (project / "profiles.yml").unlink()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    res = runner.invoke(app, ["semantic", "check", str(project / "models"), "--db", str(db)])
    assert res.exit_code == 2
    assert "profile 'tinyshop': no profiles.yml" in res.output and "--profiles-dir" in res.output
    monkeypatch.setenv("DBT_PROFILES_DIR", str(FIXTURE))
    assert dbt_target(project / "models").schema == "analytics"
    res = runner.invoke(app, ["semantic", "check", str(project / "models"), "--db", str(db), "--target", "prod"])
    assert res.exit_code == 2 and "no target 'prod' (targets: dev)" in res.output


def test_custom_schemas_and_aliases_follow_dbts_precedence(tmp_path: Path) -> None:
    """dbt_project.yml by folder < properties ``config:`` < the SQL's ``{{ config() }}``; dbt's default
    ``generate_schema_name`` joins ``<target>_<custom>``; seeds take ``seeds:`` configs."""
    (tmp_path / "models" / "a" / "b").mkdir(parents=True)
    (tmp_path / "seeds").mkdir()
    (tmp_path / "dbt_project.yml").write_text(
        "name: p\nprofile: p\nmodels:\n  +schema: base\n  p:\n    a:\n      +schema: folder_a\n      b:\n"
        "        +alias: ignored_by_sql\nseeds:\n  schema: _seed\n")
    (tmp_path / "profiles.yml").write_text("p:\n  target: t\n  outputs:\n    t: {type: duckdb, schema: tgt}\n")
    (tmp_path / "models" / "top.sql").write_text("select 1")
    (tmp_path / "models" / "a" / "in_a.sql").write_text("select 1")
    (tmp_path / "models" / "a" / "b" / "props.sql").write_text("select 1")
    (tmp_path / "models" / "a" / "b" / "jinja.sql").write_text("{{ config(schema='from_sql', alias = \"j\") }}\n1")
    (tmp_path / "models" / "a" / "b" / "props.yml").write_text(
        "models:\n  - name: props\n    config: {schema: from_props, alias: p_alias}\n"
        "  - name: jinja\n    config: {schema: overridden}\n")
    (tmp_path / "seeds" / "raw.csv").write_text("x\n1\n")
    t = dbt_target(tmp_path / "models")
    got = {m: (t.relation(m).schema, t.relation(m).alias) for m in ("top", "in_a", "props", "jinja", "raw", "unknown")}
    assert got == {"top": ("tgt_base", "top"), "in_a": ("tgt_folder_a", "in_a"), "props": ("tgt_from_props", "p_alias"),
                   "jinja": ("tgt_from_sql", "j"), "raw": ("tgt__seed", "raw"), "unknown": ("tgt", "unknown")}
    over = dbt_target(tmp_path / "models", DbtOptions(db_schema="x"))
    assert (over.relation("props").schema, over.relation("props").alias) == ("x", "p_alias")


BAD_KEYS = [
    ("entity", "      - name: order\n        type: primary\n",
     "      - name: order\n        typo_key: 1\n        type: primary\n", "semantic_models.orders.entities.0"),
    ("metric", "  - name: revenue\n    label: Revenue\n", "  - name: revenue\n    lable: Revenue\n", "metrics.revenue"),
    ("dimension", "      - name: region\n", "      - name: region\n        descripton: x\n",
     "semantic_models.customers.dimensions.0"),
]


@pytest.mark.parametrize(("what", "old", "new", "key"), BAD_KEYS, ids=[b[0] for b in BAD_KEYS])
def test_a_misspelt_key_is_still_refused_with_file_line_and_field(tmp_path: Path, db: Path, what: str, old: str,
                                                                  new: str, key: str) -> None:
    project = tmp_path / "proj"
    shutil.copytree(FIXTURE, project)
    yml = project / "models" / "semantic.yml"
    text = yml.read_text()
    assert old in text, what
    yml.write_text(text.replace(old, new, 1))
    res = runner.invoke(app, ["semantic", "check", str(project / "models"), "--db", str(db)])
    assert res.exit_code == 2
    out = " ".join(res.output.split())
    assert f"semantic.yml:{text[:text.index(old)].count(chr(10)) + 1}: field '{key}'" in out, out
    assert "was unexpected" in out


def test_every_key_dbt_accepts_loads_and_a_disabled_object_is_left_out(tmp_path: Path, db: Path) -> None:
    project = tmp_path / "proj"
    shutil.copytree(FIXTURE, project)
    yml = project / "models" / "semantic.yml"
    yml.write_text(yml.read_text().replace("saved_queries:\n", """\
  - name: big_orders
    label: Big orders
    description: Orders of 10 or more.
    type: simple
    type_params:
      measure: {name: revenue, filter: "{{ Dimension('order__ordered_at') }} IS NOT NULL", join_to_timespine: false}
    filter: "{{ Dimension('customer__region') }} = 'North'"
    tags: [finance]
    config: {enabled: true, group: sales, meta: {x: 1}}
  - name: hidden
    label: Hidden
    type: simple
    type_params: {measure: order_count}
    config: {enabled: false}
saved_queries:
""", 1))
    wh = open_warehouse(project / "models", db)
    assert "big_orders" in wh.catalog.metrics and "hidden" not in wh.catalog.metrics
    metric = next(m for m in wh.catalog.manifest.metrics if m.name == "revenue")
    assert metric.config.meta == {"tier": "gold", "owner": "finance"}  # dbt's meta merged into config.meta


def test_a_manifest_of_an_older_dbt_upgrades(tmp_path: Path, db: Path) -> None:
    """Metrics as dbt-core before 1.10 wrote them: measure inputs, no metric_aggregation_params."""
    data = json.loads(MANIFEST.read_text())
    for m in data["metrics"]:
        m["type_params"].pop("metric_aggregation_params", None)
        m["type_params"].pop("expr", None)
    old = tmp_path / "target" / "semantic_manifest.json"
    old.parent.mkdir()
    old.write_text(json.dumps(data))
    rows = _sql(old, db)
    assert {r[0]: r[1] for r in rows} == BY_REGION


def test_a_file_from_another_duckdb_names_the_harness_version_and_the_fix() -> None:
    exc = duckdb.IOException("IO Error: Trying to read a database file with version number 70, but we can only "
                             "read version 64.\nThe database file was created with a newer version of DuckDB.")
    msg = open_error(exc)
    assert f"DuckDB {duckdb.__version__}" in msg and f"duckdb=={duckdb.__version__}" in msg and "dbt" in msg
    plain = open_error(duckdb.IOException("IO Error: Cannot open file"))
    assert plain == "cannot open database: IO Error: Cannot open file"


def test_the_warehouse_is_named_after_the_dbt_project(tmp_path: Path) -> None:
    assert resolve_spec_path(MANIFEST)[1] == "tinyshop"
    loose = tmp_path / "acme" / "target" / "semantic_manifest.json"
    loose.parent.mkdir(parents=True)
    shutil.copy(MANIFEST, loose)
    assert resolve_spec_path(loose)[1] == "acme"  # no dbt_project.yml: the folder above target/
