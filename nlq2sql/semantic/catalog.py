"""A read semantic model → a resolved catalog: metrics, dimensions, one-hop joins, time.

Everything a warehouse contributes to the intent contract and the SQL is resolved here,
once, at load time, so a join with no path, two paths, a ratio over a missing metric or
a dimension name used twice is an error naming file, line and key before any model is
queried.  The catalog is plain immutable data: the SQL builder, the schema generator and
the prompt read it; none of them knows any warehouse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import SemanticModelError
from ..paths import PROJECT_ROOT
from .spec import SemanticModelSpec, Spec, read_spec

WAREHOUSE_DIR = PROJECT_ROOT / "warehouses"
DEFAULT_WAREHOUSE = "retail"
SPEC_FILE = "semantic_model.yml"

AGG_SQL = {"sum": "SUM({})", "count": "COUNT({})", "count_distinct": "COUNT(DISTINCT {})",
           "average": "AVG({})", "min": "MIN({})", "max": "MAX({})"}
TIME_GRAINS = ("month", "quarter", "year")
YEAR_FIELD = "year"
FACT_ALIAS = "f"


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
    model: str  # the semantic model whose table is the FROM
    sql: str  # aggregate expression over alias ``f``'s projected measure columns
    measures: tuple[tuple[str, str], ...]  # (projected name, SQL over the table)
    time: tuple[str, str]  # (projected name, SQL over the table) of the agg time dimension


@dataclass(frozen=True)
class DimensionDef:
    name: str
    model: str
    expr: str  # SQL over the model's table
    description: str
    label: str


@dataclass(frozen=True)
class Join:
    """How a dimension's model hangs off a metric's model: one LEFT OUTER JOIN on an entity."""

    entity: str
    fact_expr: str
    dim_expr: str


@dataclass(frozen=True)
class Catalog:
    name: str
    path: str
    sha256: str
    tables: dict[str, str]  # semantic model → table
    metrics: dict[str, MetricDef]
    dimensions: dict[str, DimensionDef]
    joins: dict[tuple[str, str], Join]  # (fact model, dim model) → join; same model needs none
    spec: Spec = field(repr=False, compare=False, hash=False)

    @property
    def vocabulary(self) -> Vocabulary:
        return Vocabulary(tuple(self.metrics), tuple(self.dimensions))

    def __hash__(self) -> int:
        return hash((self.name, self.sha256))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Catalog) and (self.name, self.sha256) == (other.name, other.sha256)


def _err(spec: Spec, kind: str, name: str, keys: tuple[str, ...], message: str) -> SemanticModelError:
    path, line = spec.locate(kind, name, *keys)
    where = ".".join((("semantic_models" if kind == "model" else "metrics"), name, *keys))
    return SemanticModelError(message, path=path, line=line, field=where)


def _check_unique_elements(spec: Spec, sm: SemanticModelSpec) -> None:
    seen: dict[str, str] = {}
    for group, items in (("entities", sm.entities), ("dimensions", sm.dimensions), ("measures", sm.measures)):
        for item in items:
            if item.name in seen:
                raise _err(spec, "model", sm.name, (group, item.name),
                           f"name {item.name!r} is used twice in semantic model {sm.name!r} "
                           f"(also in {seen[item.name]})")
            seen[item.name] = group


def _time_of(spec: Spec, sm: SemanticModelSpec, override: str | None, measure: str) -> tuple[str, str]:
    name = override or (sm.defaults.agg_time_dimension if sm.defaults else None)
    if name is None:
        raise _err(spec, "model", sm.name, ("measures", measure),
                   f"measure {measure!r} has no time dimension: set defaults.agg_time_dimension")
    dim = next((d for d in sm.dimensions if d.name == name), None)
    if dim is None or dim.type != "time":
        keys = ("defaults", "agg_time_dimension") if override is None else ("measures", measure)
        raise _err(spec, "model", sm.name, keys,
                   f"agg_time_dimension {name!r} is not a time dimension of {sm.name!r}")
    return name, dim.expr or name


def resolve(spec: Spec) -> Catalog:
    """Resolve a read spec; every rule of the contract is checked here."""
    models = {sm.name: sm for sm in spec.semantic_models}
    measures: dict[str, tuple[SemanticModelSpec, str, str]] = {}
    for sm in spec.semantic_models:
        if sm.name == FACT_ALIAS:
            raise _err(spec, "model", sm.name, ("name",), f"{FACT_ALIAS!r} is reserved; rename the model")
        _check_unique_elements(spec, sm)
        for ms in sm.measures:
            if ms.name in measures:
                raise _err(spec, "model", sm.name, ("measures", ms.name),
                           f"measure {ms.name!r} is also defined in {measures[ms.name][0].name!r}")
            expr = str(ms.expr) if ms.expr is not None else ms.name
            measures[ms.name] = (sm, AGG_SQL[ms.agg].format(f"{FACT_ALIAS}.{ms.name}"), expr)

    dimensions: dict[str, DimensionDef] = {}
    for sm in spec.semantic_models:
        for d in sm.dimensions:
            if d.type != "categorical":
                continue
            if d.name == YEAR_FIELD:
                raise _err(spec, "model", sm.name, ("dimensions", d.name),
                           f"{YEAR_FIELD!r} is reserved for the year of the time dimension")
            if d.name in dimensions:
                raise _err(spec, "model", sm.name, ("dimensions", d.name),
                           f"dimension name {d.name!r} is used twice (also in {dimensions[d.name].model!r})")
            dimensions[d.name] = DimensionDef(d.name, sm.name, d.expr or d.name, d.description,
                                              d.label or d.name.replace("_", " "))
    if not dimensions:
        raise SemanticModelError("no categorical dimension defined", path=spec.path)

    metrics: dict[str, MetricDef] = {}
    pending = list(spec.metrics)
    for m in pending:
        p = m.type_params
        if m.type == "simple":
            if p.measure is None or p.numerator or p.denominator:
                raise _err(spec, "metric", m.name, ("type_params",),
                           "a simple metric takes type_params.measure (only)")
            if p.measure not in measures:
                raise _err(spec, "metric", m.name, ("type_params", "measure"),
                           f"unknown measure {p.measure!r} (known: {', '.join(sorted(measures))})")
            sm, sql, expr = measures[p.measure]
            ms = next(x for x in sm.measures if x.name == p.measure)
            metrics[m.name] = MetricDef(m.name, m.label or m.name, m.description, sm.name, sql,
                                        ((p.measure, expr),), _time_of(spec, sm, ms.agg_time_dimension, ms.name))
    for m in pending:
        if m.type != "ratio":
            continue
        p = m.type_params
        if p.numerator is None or p.denominator is None or p.measure:
            raise _err(spec, "metric", m.name, ("type_params",),
                       "a ratio metric takes type_params.numerator and type_params.denominator")
        parts = []
        for key, ref in (("numerator", p.numerator), ("denominator", p.denominator)):
            if ref not in metrics:
                what = "a ratio metric (ratios of ratios are not supported)" if ref in {
                    x.name for x in spec.metrics} else "not a defined metric"
                raise _err(spec, "metric", m.name, ("type_params", key), f"{key} {ref!r} is {what}")
            parts.append(metrics[ref])
        num, den = parts
        if num.model != den.model:
            raise _err(spec, "metric", m.name, ("type_params",),
                       f"numerator and denominator come from different semantic models "
                       f"({num.model!r}, {den.model!r})")
        if num.time != den.time:
            raise _err(spec, "metric", m.name, ("type_params",),
                       "numerator and denominator have different time dimensions")
        metrics[m.name] = MetricDef(m.name, m.label or m.name, m.description, num.model,
                                    f"{num.sql} / {den.sql}", tuple(dict(num.measures + den.measures).items()),
                                    num.time)
    metrics = {m.name: metrics[m.name] for m in spec.metrics}  # file order

    joins: dict[tuple[str, str], Join] = {}
    for fact in sorted({m.model for m in metrics.values()}):
        for dmodel in sorted({d.model for d in dimensions.values()} - {fact}):
            paths = [(e, t) for e in models[fact].entities if e.type == "foreign"
                     for t in models[dmodel].entities if t.name == e.name and t.type in ("primary", "unique")]
            users = [mm for mm in metrics.values() if mm.model == fact]
            dim = next(d for d in dimensions.values() if d.model == dmodel)
            if not paths:
                raise _err(spec, "model", dmodel, ("entities",),
                           f"no join path from {fact!r} (metric {users[0].name!r}) to {dmodel!r} "
                           f"(dimension {dim.name!r}): no entity is foreign in {fact!r} and primary/unique "
                           f"in {dmodel!r} (only one hop is supported)")
            if len(paths) > 1:
                names = ", ".join(sorted(e.name for e, _ in paths))
                raise _err(spec, "model", dmodel, ("entities",),
                           f"ambiguous join from {fact!r} to {dmodel!r}: {len(paths)} entities match ({names})")
            e, t = paths[0]
            joins[(fact, dmodel)] = Join(e.name, e.expr or e.name, t.expr or t.name)
    return Catalog(name=spec.name, path=spec.path, sha256=spec.sha256,
                   tables={sm.name: sm.table for sm in spec.semantic_models}, metrics=metrics,
                   dimensions=dimensions, joins=joins, spec=spec)


def resolve_spec_path(name_or_path: str | Path) -> tuple[Path, str]:
    """A shipped warehouse by name (``warehouses/NAME/semantic_model.yml``) or a file/folder path."""
    path = Path(name_or_path)
    if path.exists():
        return path, (path.parent.name if path.name == SPEC_FILE else path.stem if path.is_file() else path.name)
    shipped = WAREHOUSE_DIR / str(name_or_path) / SPEC_FILE
    if "/" not in str(name_or_path) and shipped.is_file():
        return shipped, str(name_or_path)
    known = ", ".join(shipped_names())
    raise SemanticModelError(f"no semantic model named or found at '{name_or_path}' (shipped: {known})")


def shipped_names() -> list[str]:
    return sorted(p.parent.name for p in WAREHOUSE_DIR.glob(f"*/{SPEC_FILE}"))


def display_path(path: Path) -> str:
    """A path as recorded: relative to the project when inside it, else as given."""
    try:
        return str(path.resolve().relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


@lru_cache(maxsize=16)
def _load(path: str, mtime: float, name: str) -> Catalog:
    p = Path(path)
    return resolve(read_spec(p, name=name, display=display_path(p)))


def load_catalog(name_or_path: str | Path | None = None) -> Catalog:
    """Load and resolve a semantic model (default: the shipped ``retail``); cached per file."""
    path, name = resolve_spec_path(name_or_path or DEFAULT_WAREHOUSE)
    try:
        mtime = max(f.stat().st_mtime for f in ([path] if path.is_file() else path.rglob("*")))
    except (OSError, ValueError):
        mtime = 0.0
    return _load(str(path), mtime, name)


def default_catalog() -> Catalog:
    return load_catalog(DEFAULT_WAREHOUSE)
