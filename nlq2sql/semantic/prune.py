"""A partial layer: MetricFlow's manifest without the objects its data cannot serve, and what needs them.

:func:`prune` removes, from a copy, each object a data problem (:mod:`.datacheck`) touches, then what
cannot stand without it: a bad aggregation time dimension stays as a typed NULL (its measures answer
by other group-bys); a non-unique entity is not joinable (joins would fan out), but as a model's
primary entity its name stays so the model's own dimensions group its own measures; metrics whose
inputs are gone, transitively, and saved queries naming them; whatever MetricFlow's validator then
rejects, until it validates; metrics and saved queries whose filter or group-by named a removed
object. It reads and returns MetricFlow's objects; each removal is an :class:`Exclusion` (manifest
path and reason)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nlq2sql.errors import SemanticModelError
from nlq2sql.semantic.engine import Engine
from nlq2sql.semantic.mf import mf_reason, quiet
from nlq2sql.semantic.query import GRAINS, MetricQuery

if TYPE_CHECKING:
    from metricflow_semantic_interfaces.implementations.metric import (
        PydanticMetric,
        PydanticMetricInput,
        PydanticMetricInputMeasure,
    )
    from metricflow_semantic_interfaces.implementations.saved_query import PydanticSavedQuery
    from metricflow_semantic_interfaces.implementations.semantic_manifest import PydanticSemanticManifest
    from metricflow_semantic_interfaces.implementations.semantic_model import PydanticSemanticModel
    from metricflow_semantic_interfaces.validations.validator_helpers import ValidationIssue

__all__ = ["Exclusion", "excluded_names", "exclusion_for", "prune"]

_QUOTED = re.compile(r"""\\?['"]([A-Za-z_][A-Za-z0-9_]*)\\?['"]""")
#: Rounds of removing what MetricFlow's validator rejects (each round removes at least one object).
MAX_ROUNDS = 100


@dataclass(frozen=True)
class Exclusion:
    """One object left out of the layer: its manifest path (``semantic_models.M``,
    ``semantic_models.M.dimensions.D``, ``metrics.N``, ``saved_queries.Q`` …) and why."""

    object: str
    reason: str


#: The expression a measure's unusable aggregation time dimension is given (a typed NULL).
_NULL_TIME = "CAST(NULL AS DATE)"


def _kind(x: object) -> str:
    return str(getattr(x, "value", x)).lower()


class _Pruner:
    def __init__(self, manifest: PydanticSemanticManifest) -> None:
        self.m = manifest
        self.out: dict[str, Exclusion] = {}
        self.root: dict[str, str] = {}  # an exclusion → the data problem it comes from
        self.measures_gone: dict[str, str] = {}  # a removed measure → the exclusion that removed it

    # -- the objects ---------------------------------------------------------------------------
    def _model(self, name: str) -> PydanticSemanticModel | None:
        return next((sm for sm in self.m.semantic_models if sm.name == name), None)

    def _record(self, obj: str, reason: str, root: str | None = None) -> None:
        self.out.setdefault(obj, Exclusion(obj, reason))
        self.root.setdefault(obj, root or obj)

    def _because(self, obj: str) -> str:
        root = self.root.get(obj, obj)
        return f"{root}: {self.out[root].reason}" if root in self.out else obj

    def remove(self, obj: str, reason: str, root: str | None = None) -> bool:
        """Remove one object by its manifest path; False when it is not there (already gone)."""
        parts = obj.split(".")
        if parts[0] == "metrics" and len(parts) == 2:
            before = len(self.m.metrics)
            self.m.metrics = [x for x in self.m.metrics if x.name != parts[1]]
            done = len(self.m.metrics) < before
        elif parts[0] == "saved_queries" and len(parts) == 2:
            before = len(self.m.saved_queries)
            self.m.saved_queries = [x for x in self.m.saved_queries if x.name != parts[1]]
            done = len(self.m.saved_queries) < before
        elif parts[0] == "semantic_models" and len(parts) == 2:
            before = len(self.m.semantic_models)
            sm = self._model(parts[1])
            for meas in sm.measures if sm is not None else ():
                self.measures_gone.setdefault(meas.name, obj)
            self.m.semantic_models = [x for x in self.m.semantic_models if x.name != parts[1]]
            done = len(self.m.semantic_models) < before
        elif parts[0] == "semantic_models" and len(parts) == 4 and parts[2] in ("dimensions", "measures", "entities"):
            sm = self._model(parts[1])
            done = sm is not None and self._remove_element(sm, parts[2], parts[3], obj, reason)
        else:
            raise ValueError(f"not a manifest object path: {obj!r}")
        if done:
            self._record(obj, reason, root)
        return done

    def _remove_element(self, sm: PydanticSemanticModel, group: str, name: str, obj: str, reason: str) -> bool:
        items = list(getattr(sm, group))
        el = next((x for x in items if x.name == name), None)
        if el is None:
            return False
        default = sm.defaults.agg_time_dimension if sm.defaults is not None else None
        if group == "dimensions" and any((meas.agg_time_dimension or default) == name for meas in sm.measures):
            # The measures' time column is unusable, the measures are not: they keep a time
            # dimension that is NULL (their metric_time is NULL), so questions by any other
            # group-by still reach them; the dimension itself is no longer offered.
            el.expr = _NULL_TIME
            self._record(obj, f"{reason}; the measures aggregated on it are kept, with a NULL metric_time")
            return True
        setattr(sm, group, [x for x in items if x.name != name])
        if group == "measures":
            self.measures_gone.setdefault(name, obj)
        if group == "entities" and _kind(el.type) == "primary" and sm.dimensions and sm.primary_entity is None:
            sm.primary_entity = name  # its dimensions still group its own measures; nothing joins through it
        return True

    # -- what depends on what ------------------------------------------------------------------
    def _present(self) -> tuple[dict[str, str], set[str], set[str]]:
        measures = {meas.name: sm.name for sm in self.m.semantic_models for meas in sm.measures}
        return measures, {sm.name for sm in self.m.semantic_models}, {x.name for x in self.m.metrics}

    def _gone_source(self, kind: str, name: str) -> str:
        """The exclusion that removed a measure, metric or model named ``name``."""
        if kind == "metric":
            return f"metrics.{name}"
        if kind == "semantic model":
            return f"semantic_models.{name}"
        return self.measures_gone.get(name, "")

    def cascade(self) -> None:
        """Remove every metric and saved query whose inputs are gone, until none is left."""
        changed = True
        while changed:
            changed = False
            measures, models, metrics = self._present()
            for metric in list(self.m.metrics):
                missing = _missing_input(metric, measures, models, metrics, self.m)
                if missing is not None:
                    kind, name = missing
                    src = self._gone_source(kind, name)
                    changed |= self.remove(f"metrics.{metric.name}", f"uses {kind} {name!r}, excluded — "
                                           f"{self._because(src) if src in self.out else 'not in the layer'}",
                                           self.root.get(src))
                    metrics.discard(metric.name)
            metrics = {x.name for x in self.m.metrics}
            for sq in list(self.m.saved_queries):
                gone = next((n for n in sq.query_params.metrics if n not in metrics), None)
                if gone is not None:
                    src = f"metrics.{gone}"
                    changed |= self.remove(f"saved_queries.{sq.name}", f"uses metric {gone!r}, excluded — "
                                           f"{self._because(src) if src in self.out else 'not in the layer'}",
                                           self.root.get(src))

    def validate(self) -> bool:
        """Remove what MetricFlow's validator rejects; True when something was removed."""
        from metricflow_semantic_interfaces.validations.semantic_manifest_validator import SemanticManifestValidator

        errors = list(SemanticManifestValidator().validate_semantic_manifest(self.m).errors)
        if not errors:
            return False
        removed = False
        for issue in errors:
            msg = " ".join(str(issue.message).split("Traceback", 1)[0].split())
            for target in _issue_targets(issue, self.m):
                if self.remove(target, f"MetricFlow rejects it once {self._excluded_list()} are excluded: {msg}"):
                    removed = True
        if not removed:
            shown = "; ".join(" ".join(str(i.message).split())[:300] for i in errors[:5])
            raise SemanticModelError(f"after excluding {self._excluded_list()} for data problems, MetricFlow "
                                     f"still rejects the layer: {shown}")
        return True

    def _excluded_list(self) -> str:
        names = list(self.out)
        return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    def filters(self, whole: PydanticSemanticManifest) -> bool:
        """Remove metrics and saved queries that compiled on the whole manifest and no longer do
        (a filter or group-by naming a removed object); True when something was removed."""

        mine, theirs = Engine(self.m), Engine(whole)
        removed = False
        for metric in list(self.m.metrics):
            failure = _failure(mine, (metric.name,))
            if failure is not None and _failure(theirs, (metric.name,)) is None:
                removed |= self.remove(f"metrics.{metric.name}", "MetricFlow cannot list its group-bys once "
                                       f"{self._excluded_list()} are excluded: {failure}")
                continue
            if not _has_filter(metric):
                continue
            for group_by in ((), ("metric_time__day",)):
                q = MetricQuery(metrics=(metric.name,), group_by=group_by)
                failure = _failure(theirs, q)
                if failure is not None:
                    continue  # fails on the whole layer too: semantic check reports it, not the pruning
                failure = _failure(mine, q)
                if failure is not None:
                    removed |= self.remove(f"metrics.{metric.name}", self._named("its filter", metric, whole, failure))
                break
        for sq in list(self.m.saved_queries):
            params = sq.query_params
            if not (params.group_by or params.where or params.order_by):
                continue
            if _failure(theirs, sq.name) is None and (failure := _failure(mine, sq.name)) is not None:
                removed |= self.remove(f"saved_queries.{sq.name}",
                                       self._named("its group-by, order or filter", sq, whole, failure))
        return removed

    def _named(self, what: str, obj: PydanticMetric | PydanticSavedQuery, whole: PydanticSemanticManifest,
               failure: str) -> str:
        """Why a metric or saved query no longer compiles: the excluded name its text uses, else
        MetricFlow's reason."""
        names = excluded_names(whole, self.out.values())
        for quoted in _QUOTED.findall(obj.json()):
            hit = exclusion_for(names, quoted)
            if hit is not None:
                return f"{what} uses {quoted!r}, excluded — {self._because(hit[1].object)}"
        return f"it no longer compiles once {self._excluded_list()} are excluded: {failure}"


def _failure(engine: Engine, q: MetricQuery | str | tuple[str, ...]) -> str | None:
    """MetricFlow's reason when ``q`` (a query, a saved query's name, or metric names whose
    group-bys are listed) fails on ``engine``; None when it does not."""
    try:
        if isinstance(q, str):
            engine.compile_saved(q)
        elif isinstance(q, tuple):
            engine.group_bys(q)
        else:
            engine.compile(q)
    except Exception as exc:  # noqa: BLE001 — any compile failure is what is asked
        return mf_reason(exc)
    return None


def _has_filter(metric: PydanticMetric) -> bool:
    tp = metric.type_params
    inputs: list[PydanticMetricInputMeasure | PydanticMetricInput | None] = [
        tp.measure, tp.numerator, tp.denominator, *(tp.metrics or ()), *(tp.input_measures or ())]

    if tp.cumulative_type_params is not None:
        inputs.append(tp.cumulative_type_params.metric)
    conv = tp.conversion_type_params
    if conv is not None:
        inputs += [conv.base_measure, conv.conversion_measure, conv.base_metric, conv.conversion_metric]
    return metric.filter is not None or any(x is not None and x.filter is not None for x in inputs)


def _missing_input(metric: PydanticMetric, measures: dict[str, str], models: set[str], metrics: set[str],
                   manifest: PydanticSemanticManifest) -> tuple[str, str] | None:
    """The first input of ``metric`` that is not in the manifest: (``measure`` | ``metric`` |
    ``semantic model`` | ``time dimension``, its name), or None."""
    tp = metric.type_params
    conv = tp.conversion_type_params
    cum = tp.cumulative_type_params
    measure_refs: list[PydanticMetricInputMeasure | None] = [tp.measure, *(tp.input_measures or ())]
    metric_refs: list[PydanticMetricInput | None] = [
tp.numerator, tp.denominator, *(tp.metrics or ())]
    if conv is not None:
        measure_refs += [conv.base_measure, conv.conversion_measure]
        metric_refs += [conv.base_metric, conv.conversion_metric]
    if cum is not None:
        metric_refs.append(cum.metric)
    for ref in metric_refs:  # a metric's own inputs first: the closest cause
        if ref is not None and ref.name not in metrics:
            return "metric", ref.name
    for ref in measure_refs:
        if ref is not None and ref.name not in measures:
            return "measure", ref.name
    agg = tp.metric_aggregation_params
    if agg is not None:
        if agg.semantic_model not in models:
            return "semantic model", agg.semantic_model
        if tp.measure is None:  # a simple metric written without a measure: its own time dimension
            sm = next(x for x in manifest.semantic_models if x.name == agg.semantic_model)
            time_dim = agg.agg_time_dimension or (sm.defaults.agg_time_dimension if sm.defaults else None)
            if time_dim is not None and not any(d.name == time_dim for d in sm.dimensions):
                return "time dimension", f"{agg.semantic_model}.{time_dim}"
    return None


def _issue_targets(issue: ValidationIssue, manifest: PydanticSemanticManifest) -> list[str]:
    """The manifest objects a MetricFlow validation issue concerns (a saved query's issue names
    only the value it rejects: every saved query using that value)."""
    ctx: Any = issue.context  # one of MetricFlow's context classes, told apart by their fields

    if hasattr(ctx, "semantic_model_element"):
        ref = ctx.semantic_model_element
        group = {"measure": "measures", "dimension": "dimensions", "entity": "entities"}.get(ctx.element_type.value)
        return [f"semantic_models.{ref.semantic_model_name}.{group}.{ref.element_name}"] if group else []
    if hasattr(ctx, "semantic_model"):
        return [f"semantic_models.{ctx.semantic_model.semantic_model_name}"]
    if hasattr(ctx, "metric"):
        return [f"metrics.{ctx.metric.metric_name}"]
    if hasattr(ctx, "element_value"):
        return [f"saved_queries.{sq.name}" for sq in manifest.saved_queries if ctx.element_value in sq.json()]
    if hasattr(ctx, "object_type") and hasattr(ctx, "object_name"):
        kind = str(ctx.object_type).lower()
        group = ("saved_queries" if "saved" in kind else "metrics" if "metric" in kind
                 else "semantic_models" if "semantic" in kind else None)
        return [f"{group}.{ctx.object_name}"] if group else []
    return []


def prune(manifest: PydanticSemanticManifest, removals: Sequence[tuple[str, str]]
          ) -> tuple[PydanticSemanticManifest, tuple[Exclusion, ...]]:
    """A copy of MetricFlow's ``manifest`` without ``removals`` (``(object path, reason)`` pairs)
    and everything that depends on them, validated by MetricFlow; with every exclusion made.
    Nothing to remove: the manifest itself, unchanged.  Raises :class:`SemanticModelError` when
    MetricFlow rejects what is left and names nothing that could be removed."""
    if not removals:
        return manifest, ()
    quiet()
    p = _Pruner(copy.deepcopy(manifest))
    for obj, reason in removals:
        p.remove(obj, reason)
    for _ in range(MAX_ROUNDS):
        p.cascade()
        if p.validate():
            continue
        if not p.filters(manifest):
            break
    return p.m, tuple(p.out.values())


def excluded_names(manifest: PydanticSemanticManifest, exclusions: Iterable[Exclusion]) -> dict[str, Exclusion]:

    """The names a query could use that an exclusion took away (``manifest``: the whole one): a
    metric's or saved query's name, a dimension's, entity's or measure's name, and for a semantic
    model every element of it; the first exclusion of a name wins."""
    models = {sm.name: sm for sm in manifest.semantic_models}
    out: dict[str, Exclusion] = {}
    exclusions = sorted(exclusions, key=lambda ex: not ex.object.startswith("metrics."))  # a metric's own first
    for ex in exclusions:
        parts = ex.object.split(".")
        if parts[0] in ("metrics", "saved_queries") or len(parts) == 4:
            out.setdefault(parts[-1], ex)
        elif parts[0] == "semantic_models" and parts[1] in models:
            sm = models[parts[1]]
            for el in (*sm.dimensions, *sm.entities, *sm.measures):
                out.setdefault(el.name, ex)
    return out


def exclusion_for(names: dict[str, Exclusion], name: str) -> tuple[str, Exclusion] | None:
    """The excluded name a query's name uses, with its exclusion: the name itself (a metric, a
    saved query), else its parts from the last (``order__shop__town`` uses ``town``, then
    ``shop`` …; a trailing time grain is not a part).  Asked only of a query that failed."""

    if not names:
        return None
    if name in names:
        return name, names[name]
    parts = name.split("__")
    if len(parts) > 1 and parts[-1] in GRAINS:
        parts = parts[:-1]
    for part in reversed(parts):
        if part in names:
            return part, names[part]
    return None
