"""MetricFlow compiles a :class:`~nlq2sql.semantic.query.MetricQuery` to DuckDB SQL; cached.

The harness executes the SQL itself (read-only, external access off), so the ``SqlClient`` here
refuses to run anything. Filter values never pass through MetricFlow's Jinja: each is an opaque
placeholder literal that becomes a numbered parameter (``$1``…). Compiles are cached per
(manifest, query shape), the limit appended last, so ``region = North`` and ``South``, or top 3 and
top 5, share one. A listing is MetricFlow's dimension-value query over :meth:`Engine.listables`."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, Protocol

from nlq2sql.errors import ExcludedObjectError, SqlBuildError
from nlq2sql.semantic.mf import mf_reason, quiet
from nlq2sql.semantic.query import GRAINS, METRIC_TIME, MetricQuery, Value, Where

if TYPE_CHECKING:
    from metricflow.engine.metricflow_engine import MetricFlowQueryRequest
    from metricflow_semantic_interfaces.implementations.semantic_manifest import PydanticSemanticManifest

__all__ = ["COMPILE_CACHE_SIZE", "Engine", "Excluded", "Query"]

#: Distinct query shapes whose SQL is remembered per engine.
COMPILE_CACHE_SIZE = 8192
_PLACEHOLDER = "__nlq2sql_p{}__"
_PLACEHOLDER_RE = re.compile(r"'__nlq2sql_p(\d+)__'")
_SQL_OPS = {"eq": "=", "neq": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


@dataclass(frozen=True)
class Query:
    """SQL text with DuckDB numbered parameters (``$1``…); the pair is the result-memo key."""

    sql: str
    params: tuple[Value, ...]


class Excluded(Protocol):
    """An object a partial layer left out (:class:`~nlq2sql.semantic.prune.Exclusion`, which is
    above this module): its manifest path and why."""

    @property
    def object(self) -> str: ...

    @property
    def reason(self) -> str: ...


class _CompileOnlyClient:
    """MetricFlow's ``SqlClient`` protocol for rendering DuckDB SQL; running is refused."""

    def __init__(self) -> None:
        from metricflow.protocols.sql_client import SqlEngine
        from metricflow.sql.render.duckdb_renderer import DuckDbSqlPlanRenderer

        self.sql_engine_type = SqlEngine.DUCKDB
        self.sql_plan_renderer = DuckDbSqlPlanRenderer()

    def query(self, *args: object, **kwargs: object) -> NoReturn:
        raise SqlBuildError("the MetricFlow client here only compiles; nlq2sql executes read-only")

    execute = dry_run = query

    def close(self) -> None:
        pass

    def render_bind_parameter_key(self, bind_parameter_key: str) -> str:
        return "$" + bind_parameter_key


class Engine:
    """One manifest's compiler: group-by names per metric set, SQL per query shape."""

    def __init__(self, manifest: PydanticSemanticManifest, *, spine_sql: str | None = None, spine_relation: str = "",
                 excluded: Callable[[str], tuple[str, Excluded] | None] | None = None) -> None:
        """``excluded``: a name a query may use → (the excluded name it uses, its
        :class:`~nlq2sql.semantic.prune.Exclusion`), for a partial layer's refusals."""
        from metricflow.engine.metricflow_engine import MetricFlowEngine
        from metricflow_semantics.model.semantic_manifest_lookup import SemanticManifestLookup

        quiet()
        self.manifest = manifest
        self.spine_sql, self.spine_relation = spine_sql, spine_relation
        self.excluded = excluded
        self._mf = MetricFlowEngine(SemanticManifestLookup(manifest), _CompileOnlyClient())
        self._cache: dict[str, str] = {}
        self._group_bys: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._listables: tuple[str, ...] | None = None
        self._lock = threading.Lock()
        self.compiles = 0
        self.entities = frozenset(e.name for sm in manifest.semantic_models for e in sm.entities)
        self.time_dimensions = frozenset(d.name for sm in manifest.semantic_models for d in sm.dimensions
                                         if str(getattr(d.type, "value", d.type)).lower() == "time")

    def group_bys(self, metrics: tuple[str, ...]) -> tuple[str, ...]:
        """Every group-by name MetricFlow accepts for all of ``metrics`` (dimensions at each grain, entities)."""
        with self._lock:
            hit = self._group_bys.get(metrics)
        if hit is not None:
            return hit
        names: set[str] = set()
        for d in self._mf.simple_dimensions_for_metrics(list(metrics)):
            if str(getattr(d.type, "value", d.type)).lower() == "time":
                base = d.dunder_name
                if base.startswith(METRIC_TIME + "__"):
                    base = METRIC_TIME  # MetricFlow names metric_time with its grain already
                names.update(f"{base}__{g}" for g in GRAINS)
            else:
                names.add(d.dunder_name)
        names.update(self._entity_names(metrics))
        out = tuple(sorted(names))
        with self._lock:
            self._group_bys[metrics] = out
        return out

    def listables(self) -> tuple[str, ...]:
        """Every name a listing (a query with no metric) may group, filter or order by: MetricFlow's
        items for a dimension-value query — dimensions, time dimensions at each grain, entities —
        less ``metric_time`` (no metric, no metric time) and metrics used as group-bys."""
        if self._listables is not None:
            return self._listables
        from metricflow_semantics.specs.dimension_spec import DimensionSpec
        from metricflow_semantics.specs.entity_spec import EntitySpec
        from metricflow_semantics.specs.time_dimension_spec import TimeDimensionSpec

        names: set[str] = set()
        lookup = self._mf._semantic_manifest_lookup.metric_lookup
        for a in lookup.get_group_by_items_for_distinct_values_query().annotated_specs:
            spec = a.spec
            path = [link.element_name for link in spec.entity_links]
            if isinstance(spec, TimeDimensionSpec):
                if spec.element_name != METRIC_TIME:
                    names.update("__".join([*path, spec.element_name, g]) for g in GRAINS)
            elif isinstance(spec, DimensionSpec | EntitySpec):
                names.add("__".join([*path, spec.element_name]))
        self._listables = tuple(sorted(names))
        return self._listables

    def _entity_names(self, metrics: tuple[str, ...]) -> set[str]:
        """Entities the metrics can be grouped by, named with their path (``order__customer``): a
        bare name is only right one hop away (MetricFlow's own listing drops the path)."""
        from metricflow.engine.metricflow_engine import ENTITY_WITH_ANY_PROPERTIES
        from metricflow_semantic_interfaces.references import MetricReference
        from metricflow_semantics.model.semantics.element_filter import GroupByItemSetFilter

        items = self._mf._semantic_manifest_lookup.metric_lookup.get_common_group_by_items(
            metric_references=tuple(MetricReference(element_name=m) for m in metrics),
            set_filter=GroupByItemSetFilter.create(any_properties_allowlist=ENTITY_WITH_ANY_PROPERTIES))
        return {"__".join([*(link.element_name for link in a.spec.entity_links), a.spec.element_name])
                for a in items.annotated_specs}

    def _field(self, name: str) -> str:
        """A group-by name as MetricFlow's Jinja object (Dimension, TimeDimension, Entity, Metric).

        A multi-hop name (``order__location__location_name``) is written as MetricFlow's filter
        parser wants it: the last entity and element, with the hops before as ``entity_path``."""
        head, _, grain = name.rpartition("__")
        is_time = grain in GRAINS and head and (head == METRIC_TIME or head.rpartition("__")[2] in self.time_dimensions)
        base = head if is_time else name
        parts = base.split("__")
        path = ""
        if len(parts) > 2:
            path = ", entity_path=[" + ", ".join(f"'{p}'" for p in parts[:-2]) + "]"
            base = "__".join(parts[-2:])
        if is_time:
            return f"{{{{ TimeDimension('{base}', '{grain}'{path}) }}}}"
        if name in self.entities:
            return f"{{{{ Entity('{name}') }}}}"
        if name in {m.name for m in self.manifest.metrics}:
            return f"{{{{ Metric('{name}', group_by=[]) }}}}"
        if len(parts) > 2 and parts[-1] in self.entities:
            return f"{{{{ Entity('{parts[-1]}', entity_path=[" + ", ".join(f"'{p}'" for p in parts[:-1]) + "]) }}"
        return f"{{{{ Dimension('{base}'{path}) }}}}"

    def _where(self, w: Where, start: int) -> tuple[str, int]:
        def ph(i: int) -> str:
            return "'" + _PLACEHOLDER.format(i) + "'"

        col = self._field(w.field)
        n = len(w.values)
        if w.op in _SQL_OPS:
            return f"{col} {_SQL_OPS[w.op]} {ph(start)}", start + 1
        if w.op == "between":
            return f"{col} BETWEEN {ph(start)} AND {ph(start + 1)}", start + 2
        items = ", ".join(ph(start + i) for i in range(n))
        return f"{col} {'NOT IN' if w.op == 'not_in' else 'IN'} ({items})", start + n

    def compile(self, q: MetricQuery) -> Query:
        """DuckDB SQL and parameters for ``q``; raises SqlBuildError with MetricFlow's reason."""
        where: list[str] = []
        params: list[Value] = []
        i = 1
        for w in q.where or ():
            text, i = self._where(w, i)
            where.append(text)
            params.extend(w.values)
        # The shape: values are parameters and the limit is MetricFlow's last clause, added here, so
        # "top 3" and "top 5" share one compile.
        unlimited = q.model_copy(update={"limit": None, "where": tuple(
            Where(field=w.field, op=w.op, values=("?",) * len(w.values)) for w in q.where or ())})
        shape = unlimited.key()
        with self._lock:
            sql = self._cache.get(shape)
        if sql is None:
            try:
                sql = self._compile(unlimited, where)
            except SqlBuildError:
                self._refuse_excluded((*q.metrics, *q.group_by, *(w.field for w in q.where or ()),
                                       *(o.field for o in q.order_by or ())))
                raise
            with self._lock:
                if len(self._cache) >= COMPILE_CACHE_SIZE:
                    self._cache.clear()
                self._cache[shape] = sql
                self.compiles += 1
        if q.limit is not None:
            sql += f"\nLIMIT {int(q.limit)}"
        return Query(sql=sql, params=tuple(params))

    def shapes(self) -> frozenset[str]:
        """The shapes compiled so far (the cache's keys): what several processes compiled, joined,
        counts the distinct compiles a run needed as one process's ``compiles`` does."""
        with self._lock:
            return frozenset(self._cache)

    def compile_saved(self, name: str) -> Query:
        """A saved query of the project (usable as a question's gold), as MetricFlow compiles it."""
        from metricflow.engine.metricflow_engine import MetricFlowQueryRequest

        with self._lock:
            sql = self._cache.get("saved:" + name)
        if sql is None:
            try:
                sql = self._explain(MetricFlowQueryRequest.create(saved_query_name=name))
            except SqlBuildError:
                self._refuse_excluded((name,))
                raise
            with self._lock:
                self._cache["saved:" + name] = sql
                self.compiles += 1
        return Query(sql=sql, params=())

    def _refuse_excluded(self, names: tuple[str, ...]) -> None:
        """A failed query that names an object a partial layer excluded: raise saying so and why
        (MetricFlow's own message would only say the name is unknown)."""
        if self.excluded is None:
            return
        for name in names:
            hit = self.excluded(name)
            if hit is not None:
                part, ex = hit
                uses = f"{name!r} is" if part == name else f"{name!r} uses {part!r}, which is"
                raise ExcludedObjectError(f"{uses} excluded from this semantic layer ({ex.object}: {ex.reason}); "
                                    "see `nlq2sql semantic check`") from None

    def _compile(self, q: MetricQuery, where: list[str]) -> str:
        from metricflow.engine.metricflow_engine import MetricFlowQueryRequest

        order = [("-" if o.descending else "") + o.field for o in q.order_by or ()]
        if order:  # ties broken by every group-by ascending: a limit cuts, and rows compare, deterministically
            named = {o.field for o in q.order_by or ()}
            order += [g for g in q.group_by if g not in named]
        request = MetricFlowQueryRequest.create(metric_names=list(q.metrics), group_by_names=list(q.group_by),
                                                where_constraints=where or None, order_by_names=order or None,
                                                limit=q.limit)
        return _PLACEHOLDER_RE.sub(lambda m: "$" + m.group(1), self._explain(request))

    def _explain(self, request: MetricFlowQueryRequest) -> str:

        """MetricFlow's SQL for a request, as the harness runs it: without MetricFlow's plan
        comments (whole lines; records keep the SQL compactly) and with a generated spine inlined."""
        try:
            with self._lock:
                sql = self._mf.explain(request).sql_statement.sql
        except Exception as exc:  # noqa: BLE001 — MetricFlow's query errors are many classes
            raise SqlBuildError(mf_reason(exc)) from None
        sql = "\n".join(ln for ln in sql.splitlines() if not ln.lstrip().startswith("--"))
        if self.spine_sql is not None:
            sql = sql.replace(self.spine_relation, f"({self.spine_sql})")
        return sql
