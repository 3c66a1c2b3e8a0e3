"""Shared fixtures: a SMALL deterministic warehouse in a private cache directory.

Every non-live test runs with ``NLQ2SQL_CACHE_DIR`` pointing at a session temp dir that
already holds ``warehouse.duckdb`` (scale 0.05, 5 000 order lines), so code that calls
``warehouse.ensure()`` / ``default_path()`` finds it there and nothing reads or writes the
repository's ``.cache``.  Live tests (``tests/live``) keep the real cache: they need the
models kept there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbt_build import DbtBuild, DbtMissing
from dbt_build import build as dbt_build
from snapshot import SNAPSHOTS, Snapshots, update_requested

from nlq2sql.semantic import warehouse
from nlq2sql.stages.execute import Executor

SMALL_SCALE = 0.05
EVALSETS = ("dev", "heldout", "adversarial")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--snapshot-update", action="store_true", default=False,
                     help="write the per-case snapshots under tests/snapshots that are missing or differ "
                          "(tests/snapshot.py) instead of failing")


@pytest.fixture
def snapshot(request: pytest.FixtureRequest) -> Snapshots:
    """The test module's snapshots, ``tests/snapshots/<module>/`` (``tests/snapshot.py``)."""
    update = bool(request.config.getoption("--snapshot-update")) or update_requested()
    return Snapshots(SNAPSHOTS / request.path.stem, update)


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nlq2sql-cache")


@pytest.fixture(scope="session")
def small_warehouse(cache_root: Path) -> Path:
    """The small warehouse, at the place ``warehouse.default_path()`` resolves to in tests."""
    return warehouse.build(cache_root / warehouse.DEFAULT_NAME, scale=SMALL_SCALE)


@pytest.fixture(scope="session")
def pawsure(tmp_path_factory: pytest.TempPathFactory) -> DbtBuild:
    """The pawsure dbt project (``tests/fixtures/dbt_projects/pawsure``) built by dbt-duckdb into a
    scratch folder, as ``docs/dbt.md`` says a team builds its own: (project folder, DuckDB file,
    ``target/semantic_manifest.json``).  No dbt venv fails the test (no skip): it names
    ``scripts/setup.sh``."""
    try:
        return dbt_build("pawsure", tmp_path_factory.mktemp("dbt"))
    except DbtMissing as exc:
        pytest.fail(str(exc), pytrace=False)


def _is_live(item: pytest.Item) -> bool:
    return item.get_closest_marker("live") is not None or "live" in Path(str(item.fspath)).parts


@pytest.fixture(autouse=True)
def _private_cache(request: pytest.FixtureRequest) -> Iterator[None]:
    if _is_live(request.node):
        yield
        return
    root = request.getfixturevalue("cache_root")
    request.getfixturevalue("small_warehouse")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NLQ2SQL_CACHE_DIR", str(root))
        yield


@pytest.fixture(scope="module")
def executor(small_warehouse: Path) -> Iterator[Executor]:
    """A read-only executor shared by one test module (its memo too: never assert on ``executed``).

    Module scope, not session: DuckDB refuses a second connection to the same file with a
    different configuration, so an executor must not outlive the module that uses it.
    """
    with Executor(small_warehouse) as ex:
        yield ex


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def memo_at_start(monkeypatch: pytest.MonkeyPatch) -> set[object]:
    """The (SQL, params) results in an ``ItemRunner``'s memo when it starts sending requests,
    filled in (in place) as the runner starts: gold answers belong before the clock."""
    import nlq2sql.run.item as item

    seen: set[object] = set()
    real_start = item.ItemRunner.start

    def start(self: item.ItemRunner) -> None:
        seen.update(self.ex._memo)
        real_start(self)

    monkeypatch.setattr(item.ItemRunner, "start", start)
    return seen
