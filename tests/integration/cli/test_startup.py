"""Start-up: a command imports only what it uses.

The root group builds a command (imports its module) when it is looked up, and lists commands
from their modules' source (``nlq2sql.cli._common.COMMANDS``); these tests hold the table to
what the modules register, the listing to the loaded commands' help, and ``--help`` and ``sql``
to the modules they need.  ``benchmarks/bench_startup.py`` measures the time."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import typer
from typer.testing import CliRunner

from nlq2sql.cli import app
from nlq2sql.cli._common import COMMANDS, LazyCommands, _summaries
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.semantic.catalog import shipped_names
from nlq2sql.semantic.warehouse import builder, declared

#: Libraries a short command must not pay for.
HEAVY = ("numpy", "pandas", "aiohttp", "openai", "scipy", "sklearn", "pyarrow", "ray")

#: Run the CLI in a fresh interpreter; print what it printed, then which modules were loaded.
PROBE = """
import contextlib, io, json, sys
sys.argv = ["nlq2sql", *json.loads(sys.argv[1])]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        from nlq2sql.cli import app
        app()
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def probe(*args: str) -> dict[str, object]:
    res = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], cwd=PROJECT_ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "COLUMNS": "100"})
    assert res.returncode == 0, res.stderr[-3000:]
    got: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    return got


def loaded(modules: object, names: tuple[str, ...]) -> list[str]:
    assert isinstance(modules, list)
    return sorted({m.split(".")[0] for m in modules} & set(names))


def test_the_table_names_each_command_and_the_module_that_registers_it() -> None:
    for module in sorted(set(COMMANDS.values())):
        importlib.import_module(f"nlq2sql.cli.{module}")
    found: dict[str, str] = {}
    for info in app.registered_commands:
        callback = info.callback
        assert callback is not None
        found[info.name or typer.main.get_command_name(callback.__name__)] = callback.__module__
    for group in app.registered_groups:
        sub = group.typer_instance
        assert group.name and sub is not None and sub.registered_commands
        callback = sub.registered_commands[0].callback
        assert callback is not None
        found[group.name] = callback.__module__
    assert found == {name: f"nlq2sql.cli.{module}" for name, module in COMMANDS.items()}


def test_the_listing_read_from_source_is_each_commands_own_help() -> None:
    root = typer.main.get_command(app)
    commands = root.commands  # type: ignore[attr-defined]
    assert isinstance(commands, LazyCommands)
    for name, module in COMMANDS.items():
        assert _summaries(module).get(name) == commands[name].help, name


def test_help_lists_every_command_and_imports_none_of_them() -> None:
    got = probe("--help")
    assert got["code"] == 0
    text = str(got["out"])
    assert all(f" {name} " in text for name in COMMANDS), text
    assert "Re-score raw model outputs offline" in text and "Semantic models (dbt Semantic Layer YAML)" in text
    modules = got["modules"]
    assert isinstance(modules, list)
    assert not [m for m in modules if m.startswith("nlq2sql.cli.") and m != "nlq2sql.cli._common"], modules
    assert loaded(modules, (*HEAVY, "pydantic", "duckdb", "metricflow", "yaml")) == []


def test_sql_imports_its_own_module_only_and_no_heavy_library() -> None:
    got = probe("sql", "--intent", '{"metrics": ["revenue"], "group_by": ["metric_time__year"]}')
    assert got["code"] == 0 and "SELECT" in str(got["out"]) and "metric_time__year" in str(got["out"])
    modules = got["modules"]
    assert isinstance(modules, list)
    assert sorted(m for m in modules if m.startswith("nlq2sql.cli.")) == ["nlq2sql.cli._common",
                                                                          "nlq2sql.cli.semantic"]
    assert loaded(modules, HEAVY) == []


#: What a command's own module never loads at import (its imports of these wait, marked ``# deferred:``).
OPTIONAL_HEAVY = ("scipy", "matplotlib", "ray", "vllm", "torch", "sklearn", "playwright")


def test_a_commands_help_imports_its_module_and_no_optional_heavy_library() -> None:
    for args in (("load-check", "--help"), ("eval", "--help")):
        got = probe(*args)
        assert got["code"] == 0 and "Usage" in str(got["out"]), got["out"]
        modules = got["modules"]
        assert isinstance(modules, list)
        assert f"nlq2sql.cli.{COMMANDS[args[0]]}" in modules
        assert loaded(modules, OPTIONAL_HEAVY) == [], args


def test_a_command_is_loaded_when_looked_up_and_an_unknown_one_is_refused() -> None:
    res = CliRunner().invoke(app, ["sqll"])
    assert res.exit_code == 2 and "No such command 'sqll'" in res.output and "'sql'" in res.output, res.output
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert list(commands) == list(COMMANDS) and len(commands) == len(COMMANDS)
    assert commands["sql"].name == "sql" and "nope" not in commands


def test_the_warehouse_constants_read_from_source_are_the_modules_own() -> None:
    for name in shipped_names():
        mod = builder(name)
        assert declared(name) == (mod.VERSION, mod.DEFAULT_SCALE), name
