"""A semantic model bound to a database: checked against it, with the values it holds.

Binding is where a semantic model meets data: every table it names must exist and every
``expr`` must bind in DuckDB, keys must be unique, columns not all NULL (:mod:`.datacheck`).
A data problem excludes exactly the objects it touches and what depends on them
(:mod:`.prune`): the warehouse's catalog is the rest of the layer, the exclusions are recorded
in every run's manifest, and each command says once on stderr how many objects were left out
(``semantic check`` lists the problems and exits 2).  The known values of low-cardinality
dimensions and the years present are read here for prompts and eval-set checks.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb
from pydantic import ConfigDict

from nlq2sql.errors import InputError, SemanticModelError
from nlq2sql.records.typed import Typed
from nlq2sql.semantic import datacheck
from nlq2sql.semantic.catalog import Catalog, catalog_of, display_path, load_catalog, shipped_names
from nlq2sql.semantic.datacheck import DataProblem
from nlq2sql.semantic.dbt_project import DbtOptions
from nlq2sql.semantic.project import Problem, SemanticProblems, TimeSpine
from nlq2sql.semantic.prune import Exclusion, prune
from nlq2sql.semantic.warehouse import connect_read_only, fingerprint, open_error, resolve_db

__all__ = ["PROMPT_VALUES_MAX", "SCHEMA_VALUES_MAX", "VALUES_FETCH_MAX", "Warehouse", "WarehouseFacts",
           "has_legacy_spine", "has_spine", "open_warehouse"]

#: A dimension with at most this many distinct values has them listed in the prompt.
PROMPT_VALUES_MAX = 12
#: A categorical dimension with at most this many distinct values, not all numbers, has them as
#: the v2 answer schema's enum for ``where[].values`` (a number-valued one, as a price, is compared
#: with values the data need not hold: ``price > 5``).  32 takes in tpch's 25 nations and brands and
#: flights' 16 airlines, not its 101 destinations.
SCHEMA_VALUES_MAX = 32
#: Values fetched per dimension for eval-set checks (beyond it: checked by a query each).
VALUES_FETCH_MAX = 1000


class WarehouseFacts(Typed):
    """What a run records about its warehouse (:meth:`Warehouse.manifest`), as the manifest's keys,
    in their order: names, relative path, hashes, which time spine MetricFlow compiled against."""

    model_config = ConfigDict(frozen=True)

    semantic_model: str
    semantic_model_path: str
    semantic_model_sha256: str
    time_spine: str
    db: str
    db_sha256: str
    excluded: list[Exclusion]  # what data problems left out of the layer, and why (empty: the whole layer)
    db_schema: str | None = None  # --db-schema, when given: every relation's schema
    layer_sha256: str | None = None  # the layer by content (Catalog.layer_sha256): what gate and compare match


@dataclass(eq=False)
class Warehouse:
    """A catalog plus the DuckDB file it is evaluated on."""

    catalog: Catalog
    db_path: Path
    _con: Any = field(default=None, repr=False)
    #: The data problems found binding the layer (each excluded what it touches: ``catalog.excluded``).
    data_problems: tuple[DataProblem, ...] = ()

    @property
    def name(self) -> str:
        return self.catalog.name

    def connect(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            try:
                self._con = connect_read_only(self.db_path)
            except duckdb.Error as exc:
                raise SemanticModelError(open_error(exc), path=str(self.db_path)) from None
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    @cached_property
    def fingerprint(self) -> str:
        return fingerprint(self.db_path)

    def manifest(self) -> WarehouseFacts:
        """What a run records about its warehouse; no machine path."""
        return WarehouseFacts(semantic_model=self.catalog.name, semantic_model_path=self.catalog.path,
                              semantic_model_sha256=self.catalog.sha256, time_spine=self.catalog.spine,
                              db=display_path(self.db_path) if not str(display_path(self.db_path)).startswith("/")
                              else self.db_path.name, db_sha256=self.fingerprint,
                              excluded=list(self.catalog.excluded),
                              db_schema=self.catalog.project.target.schema if self.catalog.project.target.override
                              else None, layer_sha256=self.catalog.layer_sha256)

    def bind(self) -> None:
        """The data checks MetricFlow cannot make (:mod:`.datacheck`), once per process for a layer
        and a database file; a problem excludes what it touches (``catalog`` becomes the rest).
        Raises :class:`SemanticProblems` (every data problem, and why nothing usable is left) when
        the rest is no layer."""
        self.catalog, self.data_problems = _bound(self)

    def _dim_query(self, dimension: str) -> tuple[str, str]:
        """The dimension's expression and its relation as SQL (``schema.alias``)."""
        d = self.catalog.dimensions[dimension]
        return d.expr, d.relation

    @cached_property
    def _values(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        con = self.connect()
        for name in self.catalog.dimensions:
            expr, table = self._dim_query(name)
            rows = con.execute(f'SELECT DISTINCT CAST({expr} AS VARCHAR) AS v FROM {table} '
                               f"WHERE v IS NOT NULL ORDER BY v LIMIT {VALUES_FETCH_MAX + 1}").fetchall()
            out[name] = tuple(r[0] for r in rows)
        return out

    @cached_property
    def schema_values(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """``(group-by name, known values)`` for every name the metrics reach whose dimension is
        small and categorical (:data:`SCHEMA_VALUES_MAX`), sorted: the v2 schema constrains a
        ``where`` on that field to values the data holds (a hashable tuple: the schema is cached)."""
        cat = self.catalog
        out: list[tuple[str, tuple[str, ...]]] = []
        for name in sorted({g for m in cat.metrics for g in cat.engine.group_bys((m,))}):
            d = cat.dimension_of(name)
            vals = self._values[d.name] if d is not None else ()
            if 0 < len(vals) <= SCHEMA_VALUES_MAX and not all(_is_number(v) for v in vals):
                out.append((name, vals))
        return tuple(out)

    def values(self, dimension: str) -> tuple[str, ...] | None:
        """All values of a dimension as strings, or None when there are too many to list."""
        vals = self._values[dimension]
        return None if len(vals) > VALUES_FETCH_MAX else vals

    @cached_property
    def years(self) -> tuple[str, ...]:
        con = self.connect()
        found: set[str] = set()
        for src in self.catalog.time_sources:
            rows = con.execute(f'SELECT DISTINCT CAST(YEAR({src.expr}) AS VARCHAR) FROM '
                               f'{src.relation} WHERE {src.expr} IS NOT NULL').fetchall()
            found.update(r[0] for r in rows)
        return tuple(sorted(found))

    def has_value(self, field_name: str, value: str) -> bool:
        """Whether a filter value occurs in the data (``year``: a year present)."""
        if field_name == "year":
            return value in self.years
        vals = self._values.get(field_name)
        if vals is None:
            return False
        if len(vals) <= VALUES_FETCH_MAX:
            return value in vals
        expr, table = self._dim_query(field_name)
        row = self.connect().execute(f'SELECT 1 FROM {table} WHERE CAST({expr} AS VARCHAR) = ? LIMIT 1',
                                     [value]).fetchone()
        return row is not None

    def query_vocabulary_text(self, metrics: Collection[str] | None = None, dimensions: Collection[str] | None = None,
                              entities: Collection[str] = ()) -> str:
        """The v2 prompt's vocabulary: metrics, the group-by names MetricFlow accepts (with labels and
        known values), the time grains, which group-bys each metric reaches when they differ, and the
        names a listing (``metrics: []``) may use.  ``metrics``/``dimensions`` (dimension names) narrow it
        to a linked subset, and ``entities`` adds entity group-bys (schema linking, ``conditions.linking``);
        None: all of them."""
        cat = self.catalog
        eng = cat.engine
        lines = ["Metrics (metrics):"]
        lines += [f'- "{m.name}": {m.label}' + (f" ({m.description.rstrip('.')})" if m.description else "")
                  for m in cat.metrics.values() if metrics is None or m.name in metrics]
        lines.append("Group-by names (group_by, where[].field, order_by[].field):")
        lines += [f'- "{e}": the {e.replace("_", " ")} entity (its id)' for e in entities]
        for d in cat.dimensions.values():
            if dimensions is not None and d.name not in dimensions:
                continue
            vals = self._values[d.name]
            known = "; values: " + ", ".join(vals) if 0 < len(vals) <= PROMPT_VALUES_MAX else ""
            lines.append(f'- "{d.group_by}": {d.label}' + (f" ({d.description.rstrip('.')})" if d.description else "")
                         + known)
        lines.append('- "metric_time__day", "metric_time__week", "metric_time__month", "metric_time__quarter", '
                     '"metric_time__year": the date of each metric\'s time dimension at that grain '
                     '(filter dates as "YYYY-MM-DD")')
        if self.years:
            lines.append(f"Years in the data: {', '.join(self.years)}")
        by_set: dict[tuple[str, ...], list[str]] = {}
        shown = {d.group_by for d in cat.dimensions.values() if dimensions is None or d.name in dimensions}
        if dimensions is not None:  # a linked dimension by every path a listed metric reaches it
            shown |= {g for m in cat.metrics if metrics is None or m in metrics for g in eng.group_bys((m,))
                      if (owner := cat.dimension_of(g)) is not None and owner.name in dimensions}
        for m in cat.metrics:  # one line per distinct set of group-bys, not per metric: the prompt stays short
            if metrics is None or m in metrics:
                by_set.setdefault(eng.group_bys((m,)), []).append(m)
        if len(by_set) > 1:
            lines.append("Which group-bys each metric reaches (a query's metrics must share its group-bys):")
            for gbs, ms in by_set.items():
                names = ", ".join(g for g in gbs if not g.startswith("metric_time") and "__" in g
                                  and (dimensions is None or g in shown))
                lines.append(f"- {', '.join(ms)}: {names}")
        if listables := [g for g in eng.listables() if "__" in g  # entity ids alone are left out, as above
                         and (dimensions is None or g in shown)]:
            lines.append("Names a listing (metrics: [], the values themselves) may use in group_by, where and "
                         f"order_by (no metric_time): {', '.join(listables)}")
        return "\n".join(lines)

    def vocabulary_text(self) -> str:
        """The prompt's vocabulary lines: metrics with labels, dimensions, known values, years."""
        cat = self.catalog
        lines = ["Metrics (metric):"]
        lines += [f'- "{m.name}": {m.label}' + (f" ({m.description.rstrip('.')})" if m.description else "")
                  for m in cat.metrics.values()]
        lines.append("Dimensions (dimension, and filters[].field):")
        for d in cat.dimensions.values():
            vals = self._values[d.name]
            known = ""
            if 0 < len(vals) <= PROMPT_VALUES_MAX:
                known = "; values: " + ", ".join(vals)
            lines.append(f'- "{d.name}": {d.label}' + (f" ({d.description.rstrip('.')})" if d.description else "")
                         + known)
        if self.years:
            lines.append(f'- "year" (filters only): one of {", ".join(self.years)}')
        return "\n".join(lines)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def open_warehouse(semantic_model: str | Path, db: Path | None = None, *, dbt: DbtOptions | None = None,
                   validate: bool = True, announce: bool = True) -> Warehouse:
    """Load a semantic model (a shipped name or a path: no default), find its database, and check
    one against the other (``validate``: the data checks, else the caller runs :meth:`Warehouse.bind`);
    a data problem excludes what it touches (``announce``: say on stderr, once, how many objects were
    excluded — ``semantic check`` lists them itself).  ``dbt``: how relations resolve
    (``--db-schema``, ``--profiles-dir``, ``--target``).  The time spine: the declared one when the
    database holds it (else the generated one, noted in :attr:`Catalog.spine_note`), dbt's legacy
    table when the database holds it, else the generated one."""
    catalog = load_catalog(semantic_model, dbt=dbt)
    shipped = catalog.name in shipped_names() and (not Path(str(semantic_model)).exists()
                                                   or catalog.path.startswith("warehouses/"))
    path = resolve_db(db, catalog.name, shipped)
    wh = Warehouse(catalog, path)
    target = catalog.project.target
    if target.override:  # --db-schema names a schema the file must hold: one line, not a problem per relation
        schemas = sorted(r[0] for r in wh.connect().execute(
            "SELECT DISTINCT schema_name FROM information_schema.schemata WHERE catalog_name = current_database()"
        ).fetchall())
        if target.schema not in schemas:
            raise InputError(f"schema {target.schema!r} is not in the database {path.name} (it holds: "
                             f"{', '.join(schemas)})", field="--db-schema")
    declared = catalog.project.declared_spine
    if catalog.spine == "declared" and declared is not None and not has_spine(wh.connect(), declared):
        wh.catalog = load_catalog(semantic_model, spine="generated", dbt=dbt)
        where = f"{declared.relation.sql}.{declared.column}"
        wh.catalog = _with_note(wh.catalog, f"the declared time spine {where} is not in the database: "
                                             "the generated day spine is used")
    elif catalog.spine == "generated" and has_spine(wh.connect(), catalog.project.legacy_spine):
        wh.catalog = load_catalog(semantic_model, spine="legacy", dbt=dbt)  # dbt's convention before 1.9
    if validate:
        wh.bind()
        if announce and wh.catalog.excluded:
            _announce(wh)
    return wh


_BOUND: dict[tuple[Any, ...], tuple[Catalog, tuple[DataProblem, ...]]] = {}
_ANNOUNCED: set[tuple[Any, ...]] = set()
_LOCK = threading.Lock()
_BINDING = threading.Lock()


def _bound(wh: Warehouse) -> tuple[Catalog, tuple[DataProblem, ...]]:
    """The catalog the data leaves usable, and the data problems; computed once per layer (its
    path, content and spine) and database file (its path, size and modification time)."""
    cat = wh.catalog
    try:
        st = wh.db_path.stat()
        stamp: tuple[Any, ...] = (st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = ()
    relations = tuple(r.sql for r in cat.relations.values())  # --db-schema moves them: another binding
    key = (cat.path, cat.sha256, cat.spine, relations, str(wh.db_path.resolve()), *stamp)
    with _BINDING:  # one thread checks; the others wait for its answer
        hit = _BOUND.get(key)
        if hit is None:
            hit = _bind_once(wh)
            _BOUND[key] = hit
    return hit


def _bind_once(wh: Warehouse) -> tuple[Catalog, tuple[DataProblem, ...]]:
    cat = wh.catalog
    problems = tuple(datacheck.check_data(cat, wh.connect(), wh.db_path.name))
    out = (cat, problems)
    if problems:
        try:
            pruned, excluded = prune(cat.manifest, [(p.target, p.problem.message) for p in problems])
            rest = catalog_of(cat.project, pruned, cat.spine, excluded, whole=cat.manifest)
            out = (_with_note(rest, cat.spine_note) if cat.spine_note else rest, problems)
        except SemanticModelError as exc:  # nothing usable is left: refused, with every data problem
            raise SemanticProblems([*(p.problem for p in problems),
                                    Problem(cat.path, None, None, f"the rest of the layer is not usable: {exc}")]
                                   ) from None
    return out


def _announce(wh: Warehouse) -> None:
    """One line on stderr, once per process for a layer and database: how much was left out."""
    key = (wh.catalog.path, wh.catalog.sha256, str(wh.db_path))
    with _LOCK:
        if key in _ANNOUNCED:
            return
        _ANNOUNCED.add(key)
    n = len(wh.catalog.excluded)
    sys.stderr.write(f"note: semantic layer {wh.catalog.name!r} on {wh.db_path.name}: {n} object"
                     f"{'s' if n != 1 else ''} excluded for data problems, the rest is used; "
                     "see `nlq2sql semantic check`\n")


def _with_note(catalog: Catalog, note: str) -> Catalog:
    out = dataclasses.replace(catalog, spine_note=note)
    if "engine" in catalog.__dict__:
        out.__dict__["engine"] = catalog.__dict__["engine"]
    return out


def has_spine(con: duckdb.DuckDBPyConnection, spine: TimeSpine) -> bool:
    """Whether the database holds ``spine``: its table (or view) with its column, in its schema.

    The names are compared here rather than bound as query parameters: binding any parameter
    makes DuckDB's Python client import pandas (~0.4 s), which ``nlq2sql sql`` otherwise never needs."""
    rows = con.execute("SELECT table_schema, table_name, column_name FROM information_schema.columns").fetchall()
    return (spine.schema, spine.table, spine.column) in set(rows)


def has_legacy_spine(con: duckdb.DuckDBPyConnection, schema: str = "main") -> bool:
    """Whether the database holds dbt's legacy time spine: a ``metricflow_time_spine`` table (or
    view) with a ``date_day`` column, in ``schema``."""
    return has_spine(con, TimeSpine(table="metricflow_time_spine", column="date_day", schema=schema))
