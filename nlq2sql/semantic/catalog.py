"""A team's semantic layer, loaded through MetricFlow → the catalog the harness reads.

MetricFlow's validated manifest plus what prompt, schema and eval-set checks need: labels and
descriptions, each categorical dimension's group-by name as MetricFlow spells it
(``customer_id__region``) with the table and expression behind it, and the compiler. The intent's
short dimension names are the dimensions' own where one name means one dimension, else qualified."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql.errors import SemanticModelError
from nlq2sql.paths import PROJECT_ROOT, SPEC_FILE, WAREHOUSE_DIR, shipped_warehouses
from nlq2sql.semantic.dbt_project import DbtOptions, Relation
from nlq2sql.semantic.engine import Engine
from nlq2sql.semantic.manifest import GENERATED_SPINE, build_manifest
from nlq2sql.semantic.mf import mf_problem
from nlq2sql.semantic.project import Project, SemanticProblems, project_name, read_project
from nlq2sql.semantic.prune import Exclusion, excluded_names, exclusion_for

if TYPE_CHECKING:
    from metricflow_semantic_interfaces.implementations.semantic_manifest import PydanticSemanticManifest

    from nlq2sql.records.typed import JsonValue

__all__ = ["DEFAULT_WAREHOUSE", "SPEC_FILE", "WAREHOUSE_DIR", "YEAR_FIELD", "Catalog", "DimensionDef", "MetricDef",
           "Vocabulary", "catalog_of", "default_catalog", "display_path", "load_catalog", "resolve_spec_path",
           "shipped_names", "spine_reach_days", "spine_sql"]

DEFAULT_WAREHOUSE = "retail"
YEAR_FIELD = "year"
#: The generated spine's widest extent: every day of 1900–2100 (DuckDB's range(), end excluded).
SPINE_FROM, SPINE_UNTIL = "1900-01-01", "2101-01-01"
#: The generated spine unbounded: every day of its widest extent (a layer whose measures have no
#: time dimension, so the data's dates cannot bound it).
SPINE_SQL = ("SELECT CAST(range AS DATE) AS date_day "
             f"FROM range(DATE '{SPINE_FROM}', DATE '{SPINE_UNTIL}', INTERVAL 1 DAY)")
#: Days a window or offset of each grain may reach past the data (a month: its longest).
_GRAIN_DAYS = {"day": 1, "week": 7, "month": 31, "quarter": 92, "year": 366}


@dataclass(frozen=True)
class Vocabulary:
    """The names an intent may use; hashable, so parse results can be cached per vocabulary."""

    metrics: tuple[str, ...]
    dimensions: tuple[str, ...]

    @property
    def filter_fields(self) -> tuple[str, ...]:
        return (*self.dimensions, YEAR_FIELD)


@dataclass(frozen=True)
class MetricDef:
    name: str
    label: str
    description: str
    type: str


@dataclass(frozen=True)
class DimensionDef:
    name: str  # the intent's name
    group_by: str  # MetricFlow's name (entity path __ dimension)
    model: str
    table: str
    expr: str  # SQL over the model's table
    description: str
    label: str
    relation: str = ""  # the table as SQL: schema.alias


@dataclass(frozen=True)
class TimeSource:
    """One semantic model's aggregation time column: where the data's dates are."""

    model: str
    table: str
    dimension: str
    expr: str
    relation: str = ""  # the table as SQL: schema.alias


@dataclass(frozen=True, eq=False)
class Catalog:
    name: str
    path: str
    sha256: str
    metrics: dict[str, MetricDef]
    dimensions: dict[str, DimensionDef]
    time_sources: tuple[TimeSource, ...]
    spine: str  # "declared" | "legacy" (dbt's metricflow_time_spine table in the database) | "generated"
    project: Project = field(repr=False)
    manifest: PydanticSemanticManifest = field(repr=False)
    spine_note: str = ""  # why the generated spine replaced a declared one (said by ``semantic check``)
    #: What a partial layer left out for data problems (:mod:`.prune`); empty: the whole layer.
    excluded: tuple[Exclusion, ...] = ()
    #: Each name an exclusion took away (of the whole manifest) → that exclusion.
    excluded_by_name: dict[str, Exclusion] = field(default_factory=dict, repr=False)
    #: The manifest before data problems were excluded (None: ``manifest`` is the whole layer); what
    #: the tables hold is described from it (the SQL answer sees every column the layer names).
    whole: PydanticSemanticManifest | None = field(default=None, repr=False)

    @property
    def vocabulary(self) -> Vocabulary:
        return Vocabulary(tuple(self.metrics), tuple(self.dimensions))

    @property
    def tables(self) -> dict[str, str]:
        return {sm.name: sm.node_relation.alias for sm in self.manifest.semantic_models}

    @property
    def relations(self) -> dict[str, Relation]:
        """Each semantic model's relation (schema and alias) as MetricFlow's SQL names it."""
        return {sm.name: Relation(schema=sm.node_relation.schema_name, alias=sm.node_relation.alias,
                                  database=sm.node_relation.database) for sm in self.manifest.semantic_models}

    @cached_property
    def layer_sha256(self) -> str:
        """The layer's identity by content: sha256 of MetricFlow's manifest (the whole one, before
        data problems excluded anything) as canonical JSON, without the file names and lines it was
        read from or MetricFlow's version stamp, objects in name order.  The same layer read from
        another path, from its folder or from dbt's manifest, or by another release of this
        harness, has the same identity; a changed metric, dimension, join or time spine has not."""
        import hashlib
        import json

        def canonical(x: JsonValue) -> JsonValue:
            if isinstance(x, dict):
                return {k: canonical(v) for k, v in x.items() if k not in ("metadata", "dsi_package_version")}
            if isinstance(x, list):
                items = [canonical(v) for v in x]
                named = all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in items)
                return sorted(items, key=lambda v: v["name"]) if named and items else items
            return x

        whole = self.whole if self.whole is not None else self.manifest
        text = json.dumps(canonical(json.loads(whole.json())), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @cached_property
    def engine(self) -> Engine:
        return _engine(self.manifest, self.spine, self.exclusion_for)

    def __hash__(self) -> int:
        return hash((self.name, self.sha256, self.spine, self.excluded))

    def __eq__(self, other: object) -> bool:  # the spine too: the same layer compiles other SQL on another spine
        return isinstance(other, Catalog) and (self.name, self.sha256, self.spine, self.excluded) == (
            other.name, other.sha256, other.spine, other.excluded)

    def exclusion_for(self, name: str) -> tuple[str, Exclusion] | None:
        """The excluded name that ``name`` (a metric, a dimension, a group-by) uses, with its
        exclusion; None when it uses none (or the layer is whole)."""
        return exclusion_for(self.excluded_by_name, name)

    def dimension_of(self, group_by: str) -> DimensionDef | None:
        """The categorical dimension a group-by name reaches, by whichever entity path
        (``customer__region`` and ``order__customer__region`` are one dimension); None for an
        entity, a time dimension or a name no semantic model owns."""
        owner = _owner(self.manifest, group_by)
        dim = group_by.rsplit("__", 1)[-1]
        return next((d for d in self.dimensions.values()
                     if d.model == owner and d.group_by.rsplit("__", 1)[-1] == dim), None)


def _value(x: object) -> str:
    return str(getattr(x, "value", x)).lower()


SPINES = ("declared", "legacy", "generated")


def _resolve(project: Project, spine: str | None = None) -> Catalog:
    """``spine``: None → the project's declared spine, else the generated one; ``legacy``: the
    database holds dbt's legacy spine (``metricflow_time_spine.date_day``); ``generated``: the
    database lacks the declared one (the binding looks; :func:`nlq2sql.semantic.binding.open_warehouse`)."""
    spine_decl = project.declared_spine
    kind = spine or ("declared" if spine_decl else "generated")
    chosen = {"declared": spine_decl, "legacy": project.legacy_spine}.get(kind) or GENERATED_SPINE
    kind = kind if chosen is not GENERATED_SPINE else "generated"
    manifest = build_manifest(project, chosen)
    return catalog_of(project, manifest, kind)


def catalog_of(project: Project, manifest: PydanticSemanticManifest, kind: str, excluded: tuple[Exclusion, ...] = (),
               whole: PydanticSemanticManifest | None = None) -> Catalog:
    """The catalog of a validated MetricFlow ``manifest`` read from ``project`` (``kind``: its time
    spine).  A partial layer: ``manifest`` is the pruned one, ``excluded`` what was left out of
    ``whole``, the manifest before pruning (its names make the refusals say why)."""
    left_out = (f" once {len(excluded)} objects are excluded for data problems (see `nlq2sql semantic check`)"
                if excluded else "")
    metrics = {m.name: MetricDef(m.name, m.label or m.name, m.description or "", _value(m.type))
               for m in manifest.metrics}
    if not metrics:
        raise SemanticModelError("no metrics defined" + left_out, path=project.path)
    by_name_ex = excluded_names(whole if whole is not None else manifest, excluded)
    reachable: set[str] = set()
    try:
        engine = _engine(manifest, kind, lambda n: exclusion_for(by_name_ex, n))
        for m in metrics:
            reachable.update(engine.group_bys((m,)))
    except Exception as exc:  # noqa: BLE001 — MetricFlow's lookups reject what its validator let through
        raise SemanticProblems([mf_problem(exc, project.path)]) from None
    by_name: dict[str, list[DimensionDef]] = {}
    sources: list[TimeSource] = []
    for sm in manifest.semantic_models:
        table = sm.node_relation.alias
        relation = Relation(schema=sm.node_relation.schema_name, alias=table).sql
        for d in sm.dimensions:
            if _value(d.type) == "time":
                continue
            paths = sorted((g for g in reachable if g == d.name or g.endswith("__" + d.name)
                            and g.count("__") >= 1 and _owner(manifest, g) == sm.name), key=len)
            if not paths:
                continue
            by_name.setdefault(d.name, []).append(DimensionDef(
                d.name, paths[0], sm.name, table, d.expr or d.name, d.description or "",
                d.label or d.name.replace("_", " "), relation))
        agg_time = sm.defaults.agg_time_dimension if sm.defaults else None
        tdim = next((d for d in sm.dimensions if d.name == agg_time), None)
        if sm.measures and tdim is not None:
            sources.append(TimeSource(sm.name, table, tdim.name, tdim.expr or tdim.name, relation))
    dimensions: dict[str, DimensionDef] = {}
    for name, defs in by_name.items():
        for found in defs:
            key = name if len(defs) == 1 and name != YEAR_FIELD else found.group_by
            dimensions[key] = DimensionDef(key, found.group_by, found.model, found.table, found.expr,
                                           found.description, found.label, found.relation)

    if not dimensions:
        raise SemanticModelError("no categorical dimension is reachable from the metrics" + left_out,
                                 path=project.path)
    catalog = Catalog(name=project.name, path=project.path, sha256=project.sha256, metrics=metrics,
                      dimensions=dimensions, time_sources=tuple(sources),
                      spine=kind, project=project, manifest=manifest, excluded=excluded,
                      excluded_by_name=by_name_ex, whole=whole)
    catalog.__dict__["engine"] = engine  # the one built to list the group-bys (cached_property's slot)
    return catalog


def _engine(manifest: PydanticSemanticManifest, spine: str,
            excluded: Callable[[str], tuple[str, Exclusion] | None] | None = None) -> Engine:
    return Engine(manifest, spine_sql=spine_sql(manifest) if spine == "generated" else None,
                  spine_relation=GENERATED_SPINE.relation.sql, excluded=excluded)


def _window_days(window: object) -> int:
    """The most days a MetricFlow time window (``7 days``, ``1 month``: a ``PydanticMetricTimeWindow``)
    or a grain (its name, or a ``TimeGranularity``) spans; anything else: none."""
    if window is None:
        return 0
    if not hasattr(window, "granularity"):  # a grain: its name, or MetricFlow's TimeGranularity
        return _GRAIN_DAYS.get(_value(window), 1)
    count = getattr(window, "count", 1)
    return int(count if isinstance(count, int) else 1) * _GRAIN_DAYS.get(_value(window.granularity).rstrip("s"), 1)


def spine_reach_days(manifest: PydanticSemanticManifest) -> int:
    """How many days past the data's last date a metric of the layer can have rows: its largest
    cumulative window or grain-to-date period, offset window or offset-to-grain period."""
    reach = 0
    for m in manifest.metrics:
        tp = m.type_params
        cum = getattr(tp, "cumulative_type_params", None)
        spans = [getattr(tp, "window", None), getattr(tp, "grain_to_date", None),
                 getattr(cum, "window", None), getattr(cum, "grain_to_date", None),
                 getattr(getattr(tp, "conversion_type_params", None), "window", None)]
        for i in getattr(tp, "metrics", None) or ():
            spans += [i.offset_window, i.offset_to_grain]
        reach = max(reach, *(_window_days(w) for w in spans))
    return reach


def spine_sql(manifest: PydanticSemanticManifest) -> str:
    """The generated spine's days, bounded by the data: from January 1 of the first year any
    measure's time dimension holds to December 31 of the year of its last date plus
    :func:`spine_reach_days` (whole years, so every period up to a year is complete at both ends),
    within 1900–2100.  The bounds are read by the query itself (the time sources' MIN and MAX),
    so the SQL depends on the layer only: one compile serves any database, and a day the bounds
    leave out is a day no cumulative window, offset or grain-to-date period of the data reaches
    (an all-time running total's rows stop at that year's end instead of repeating the final
    total to 2100; a zero-filled series covers those years, not two centuries).  A layer whose
    measures have no time dimension gets the whole range (:data:`SPINE_SQL`)."""
    sources: dict[tuple[str, str], None] = {}
    for sm in manifest.semantic_models:
        default = sm.defaults.agg_time_dimension if sm.defaults else None
        dims = {d.name: d.expr or d.name for d in sm.dimensions if _value(d.type) == "time"}
        relation = Relation(schema=sm.node_relation.schema_name, alias=sm.node_relation.alias,
                            database=sm.node_relation.database).sql
        for measure in sm.measures:
            name = measure.agg_time_dimension or default
            if name in dims:
                sources[(relation, dims[name])] = None
    if not sources:
        return SPINE_SQL
    bounds = " UNION ALL ".join(f"SELECT CAST(MIN({expr}) AS TIMESTAMP) AS lo, CAST(MAX({expr}) AS TIMESTAMP) AS hi "
                                f"FROM {relation}" for relation, expr in sources)
    pad = spine_reach_days(manifest)
    first = f"GREATEST(DATE_TRUNC('year', MIN(lo)), TIMESTAMP '{SPINE_FROM}')"
    last = (f"LEAST(DATE_TRUNC('year', MAX(hi) + INTERVAL {pad} DAY) + INTERVAL 1 YEAR, "
            f"TIMESTAMP '{SPINE_UNTIL}') - INTERVAL 1 DAY")
    return (f"SELECT CAST(d AS DATE) AS date_day FROM (SELECT UNNEST(generate_series({first}, {last}, "
            f"INTERVAL 1 DAY)) AS d FROM ({bounds}) AS spine_bounds) AS spine_days")


def _owner(manifest: PydanticSemanticManifest, group_by: str) -> str | None:

    """The semantic model whose dimension a group-by name reaches (its last entity's primary model)."""
    parts = group_by.split("__")
    if len(parts) < 2:
        return None
    entity, dim = parts[-2], parts[-1]
    for sm in manifest.semantic_models:
        if any(d.name == dim for d in sm.dimensions) and (sm.primary_entity == entity or any(
                e.name == entity and _value(e.type) in ("primary", "unique", "natural") for e in sm.entities)):
            return str(sm.name)
    return None


def resolve_spec_path(name_or_path: str | Path) -> tuple[Path, str]:
    """A shipped warehouse by name (``warehouses/NAME/semantic_model.yml``) or a file/folder path."""
    path = Path(name_or_path)
    if path.exists():
        if path.name == "semantic_manifest.json":  # dbt's target/: the project's name, else the folder above
            return path, project_name(path) or (path.parent.parent.name if path.parent.name == "target"
                                                else path.parent.name)
        if path.name == SPEC_FILE:
            return path, path.parent.name
        return path, project_name(path) or (path.stem if path.is_file() else path.name)  # a dbt project's name
    shipped = WAREHOUSE_DIR / str(name_or_path) / SPEC_FILE
    if "/" not in str(name_or_path) and shipped.is_file():
        return shipped, str(name_or_path)
    known = ", ".join(shipped_names())
    raise SemanticModelError(f"no semantic model named or found at '{name_or_path}' (shipped: {known})")


def shipped_names() -> list[str]:
    return shipped_warehouses()


def display_path(path: Path) -> str:
    """A path as recorded: relative to the project when inside it, else as given."""
    try:
        return str(path.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


@lru_cache(maxsize=16)
def _load(path: str, mtime: float, name: str, spine: str | None, dbt: DbtOptions | None) -> Catalog:
    p = Path(path)
    return _resolve(read_project(p, name=name, display=display_path(p), dbt=dbt), spine)


def load_catalog(name_or_path: str | Path, *, spine: str | None = None, dbt: DbtOptions | None = None) -> Catalog:
    """Load and validate a semantic layer (a shipped name or a path: no default); cached per file.
    ``spine``: ``legacy`` compiles against dbt's legacy ``metricflow_time_spine`` table when the
    project declares no spine, ``generated`` against the generated one when the database lacks the
    declared one (the binding decides).  ``dbt``: ``--db-schema``, ``--profiles-dir``, ``--target``."""
    if spine is not None and spine not in SPINES:
        raise ValueError(f"spine must be one of {SPINES}, got {spine!r}")
    path, name = resolve_spec_path(name_or_path)
    try:
        mtime = max(f.stat().st_mtime for f in ([path] if path.is_file() else path.rglob("*")))
    except (OSError, ValueError):
        mtime = 0.0
    return _load(str(path), mtime, name, spine, dbt if dbt != DbtOptions() else None)


def default_catalog() -> Catalog:
    return load_catalog(DEFAULT_WAREHOUSE)
