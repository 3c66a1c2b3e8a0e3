"""Warehouse databases: build a shipped warehouse's data, find it in the cache, fingerprint it, open it.

A shipped warehouse is ``warehouses/NAME/`` (semantic model, eval sets, ``build.py`` with
``VERSION``, ``DEFAULT_SCALE``, ``build(out, scale)``). A user's data is a DuckDB file, or
Parquet/CSV imported once into a cached file named by the files' hash, so the executor always opens
one file read-only with external access disabled (``connect_read_only``)."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import duckdb

from nlq2sql.errors import InputError
from nlq2sql.paths import cache_dir
from nlq2sql.semantic.catalog import DEFAULT_WAREHOUSE, WAREHOUSE_DIR, shipped_names

__all__ = ["DATA_SUFFIXES", "DEFAULT_NAME", "MAX_SCALE", "READ_ONLY_CONFIG", "build", "builder", "connect_read_only",
           "declared", "default_path", "ensure", "fingerprint", "import_folder", "open_error", "resolve_db"]

#: The one configuration every read-only connection opens with: DuckDB refuses a second
#: connection to an open file under a different configuration, so there is only this one.
#: ``merge_join_threshold`` 0: a join on two inequalities (a cumulative window or grain-to-date
#: metric joined to the time spine) is always an IEJoin; by default a side under 1,000 rows (a
#: day spine of two years) makes it a piecewise merge join on one inequality that filters the
#: other afterwards — the same rows, about 10× slower on jaffle's trailing-7-day revenue.
READ_ONLY_CONFIG: dict[str, str | bool | int | float | list[str]] = {"enable_external_access": False,
                                                                     "merge_join_threshold": 0}


DATA_SUFFIXES = {".parquet": "read_parquet", ".csv": "read_csv_auto", ".tsv": "read_csv_auto"}
#: The cached file name of the default warehouse at its default scale (kept from v1 layouts).
DEFAULT_NAME = "warehouse-v2.duckdb"


@lru_cache(maxsize=16)
def builder(name: str = DEFAULT_WAREHOUSE) -> ModuleType:
    """The ``build.py`` module of a shipped warehouse."""
    path = WAREHOUSE_DIR / name / "build.py"
    if "/" in name or not path.is_file():
        raise InputError(f"no shipped warehouse named {name!r} with a build.py "
                         f"(shipped: {', '.join(shipped_names())})", field="warehouse")
    spec = importlib.util.spec_from_file_location(f"nlq2sql_warehouse_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@lru_cache(maxsize=16)
def declared(name: str = DEFAULT_WAREHOUSE) -> tuple[object, float]:
    """A shipped warehouse's ``VERSION`` and ``DEFAULT_SCALE``, read from its ``build.py`` source
    when both are plain literals there: finding the cached build then runs none of the generator
    (its numpy and pandas imports cost most of a short command's start-up).  Otherwise the module
    itself is loaded."""
    path = WAREHOUSE_DIR / name / "build.py"
    if "/" not in name and path.is_file():
        found: dict[str, object] = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in ("VERSION", "DEFAULT_SCALE") and isinstance(node.value, ast.Constant)):
                found[node.targets[0].id] = node.value.value
        scale = found.get("DEFAULT_SCALE")
        if isinstance(scale, int | float) and "VERSION" in found:
            return found["VERSION"], float(scale)
    mod = builder(name)
    return mod.VERSION, mod.DEFAULT_SCALE


def default_path(name: str = DEFAULT_WAREHOUSE, scale: float | None = None) -> Path:
    """Where a shipped warehouse's data is cached (versioned, so a stale build is never reused)."""
    version, default_scale = declared(name)
    scale = default_scale if scale is None else scale
    if name == DEFAULT_WAREHOUSE and scale == default_scale:
        return cache_dir() / DEFAULT_NAME
    return cache_dir() / f"{name}-v{version}-s{scale:g}.duckdb"


#: Largest scale a build accepts (retail: ~100M order lines; TPC-H: scale factor 1,000, ~1 TB):
#: beyond it a typo such as ``1e12`` would only fail allocating memory, after a long wait.
MAX_SCALE = 1000.0


def build(out: Path | None = None, scale: float | None = None, name: str = DEFAULT_WAREHOUSE) -> Path:
    """Write a shipped warehouse's data to ``out`` atomically (temp file, then rename)."""
    mod = builder(name)
    scale = mod.DEFAULT_SCALE if scale is None else scale
    if not (scale > 0) or scale != scale or scale == float("inf"):
        raise InputError(f"scale must be a positive finite number, got {scale}", field="scale")
    if scale > MAX_SCALE:
        raise InputError(f"scale must be at most {MAX_SCALE:g}, got {scale:g}", field="scale")
    out = Path(out) if out is not None else default_path(name, scale)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        mod.build(tmp, scale)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def ensure(path: Path | None = None, name: str = DEFAULT_WAREHOUSE) -> Path:
    """Build a shipped warehouse once; later calls reuse it."""
    path = Path(path) if path is not None else default_path(name)
    if not path.exists():
        build(path, name=name)
    return path


def fingerprint(path: Path) -> str:
    """sha256 of a database file (what the manifest records instead of a machine path)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def import_folder(folder: Path) -> Path:
    """A folder of Parquet/CSV files → a cached DuckDB file, one table per file (by stem)."""
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in DATA_SUFFIXES and p.is_file())
    if not files:
        raise InputError(f"no {'/'.join(sorted(DATA_SUFFIXES))} files in the folder", path=str(folder))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    out = cache_dir() / f"imported-{digest.hexdigest()[:16]}.duckdb"
    if out.exists():
        return out
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    con = duckdb.connect(str(tmp))
    try:
        for f in files:
            if not f.stem.replace("_", "a").isalnum():
                raise InputError("file name must be a plain identifier to become a table", path=str(f))
            reader = DATA_SUFFIXES[f.suffix.lower()]
            try:
                con.execute(f'CREATE TABLE "{f.stem}" AS SELECT * FROM {reader}(?)', [str(f)])
            except duckdb.Error as exc:
                raise InputError(f"cannot import: {str(exc).splitlines()[0]}", path=str(f)) from None
        con.execute("CHECKPOINT")
        con.close()
        tmp.replace(out)
    finally:
        con.close()
        tmp.unlink(missing_ok=True)
    return out


def resolve_db(db: Path | None, semantic_name: str, shipped: bool) -> Path:
    """The DuckDB file to query: ``--db`` (a file or a folder of data files), else the
    shipped warehouse's cached build."""
    if db is not None:
        if db.is_dir():
            return import_folder(db)
        if not db.is_file():
            raise InputError("no such database file or folder", path=str(db), field="db")
        return db
    if not shipped:
        raise InputError(f"semantic model {semantic_name!r} is not a shipped warehouse: pass --db "
                         "(its DuckDB file, or a folder of Parquet/CSV files)", field="db")
    return ensure(name=semantic_name)


def open_error(exc: Exception) -> str:
    """Why a database file does not open, with the fix where there is one: a file written by
    another DuckDB (dbt-duckdb installs the newest) names this harness's DuckDB and how to build
    with it."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "version number" in str(exc) or "newer version of DuckDB" in str(exc):
        return (f"cannot open database: {first} — this harness reads DuckDB {duckdb.__version__}'s file format; "
                f"rebuild the file with duckdb=={duckdb.__version__} in the dbt environment "
                f"(pip install 'duckdb=={duckdb.__version__}' beside dbt-duckdb, then dbt seed && dbt run)")
    return f"cannot open database: {first}"


def connect_read_only(path: str | Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection without external access (raises ``duckdb.Error``)."""
    return duckdb.connect(str(path), read_only=True, config=READ_ONLY_CONFIG)
