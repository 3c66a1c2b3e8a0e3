"""Build a dbt project the way a team does (``docs/dbt.md``): dbt-duckdb, in dbt's own venv.

A copy of the project goes to a scratch folder, its ``profiles.yml`` is written with the DuckDB
path there, and dbt's own commands build it: ``dbt seed``, ``dbt run``, ``dbt parse`` (which
writes ``target/semantic_manifest.json``).  dbt runs from its own virtual environment
(``scripts/setup.sh dbt`` makes ``.cache/dbt-venv``; ``NLQ2SQL_DBT_VENV`` names another), never
nlq2sql's: its pins must not move vLLM's.  The repository's ``.cache`` is resolved from the
project root, not from ``NLQ2SQL_CACHE_DIR``, which the tests point at a private folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = ROOT / "tests" / "fixtures" / "dbt_projects"
#: dbt's three commands, in the order docs/dbt.md gives them.
COMMANDS: tuple[tuple[str, ...], ...] = (("seed",), ("run",), ("parse",))
#: What a build leaves in a project folder: never copied from the source tree.
_BUILD_OUTPUTS = ("target", "logs", "dbt_packages", ".user.yml", "*.duckdb", "*.duckdb.wal")


class DbtMissing(RuntimeError):
    """dbt's venv is not there: the message says how to make it."""


@dataclass(frozen=True)
class DbtBuild:
    """A built project: its folder, the DuckDB file dbt wrote, dbt's semantic manifest."""

    project: Path
    db: Path
    manifest: Path
    seconds: float


def dbt_venv() -> Path:
    return Path(os.environ.get("NLQ2SQL_DBT_VENV") or ROOT / ".cache" / "dbt-venv")


def dbt_executable() -> Path:
    venv = dbt_venv()
    exe = venv / "bin" / "dbt"
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise DbtMissing(f"dbt is not installed at {exe}: run `scripts/setup.sh dbt` (it makes {venv} with "
                         "dbt-core, dbt-duckdb and dbt-metricflow pinned; NLQ2SQL_DBT_VENV names another venv)")
    return exe


def write_profile(project: Path, db: Path) -> Path:
    """The project's ``profiles.yml`` template with every DuckDB output's ``path`` set to ``db``."""
    path = project / "profiles.yml"
    profiles = yaml.safe_load(path.read_text())
    for profile in profiles.values():
        for output in profile["outputs"].values():
            if output.get("type") == "duckdb":
                output["path"] = str(db)
    path.write_text(yaml.safe_dump(profiles, sort_keys=False))
    return path


def build(name: str, where: Path) -> DbtBuild:
    """Copy ``tests/fixtures/dbt_projects/<name>`` to ``where/<name>`` and build it with dbt."""
    exe = dbt_executable()
    project = where / name
    shutil.copytree(PROJECTS / name, project, ignore=shutil.ignore_patterns(*_BUILD_OUTPUTS))
    db = where / f"{name}.duckdb"
    write_profile(project, db)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(DBT_PROFILES_DIR=str(project), DBT_SEND_ANONYMOUS_USAGE_STATS="false", DBT_USE_COLORS="false",
               PATH=f"{exe.parent}{os.pathsep}{env.get('PATH', '')}")
    started = time.perf_counter()
    for command in COMMANDS:
        done = subprocess.run([str(exe), *command], cwd=project, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
            raise RuntimeError(f"`dbt {' '.join(command)}` in {project} exited {done.returncode}:\n{tail}")
    seconds = time.perf_counter() - started
    manifest = project / "target" / "semantic_manifest.json"
    if not manifest.is_file():
        raise RuntimeError(f"`dbt parse` wrote no {manifest}")
    return DbtBuild(project=project, db=db, manifest=manifest, seconds=seconds)
