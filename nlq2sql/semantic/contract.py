"""The v2 answer contract, generated from the manifest: JSON Schema, parse, per-part comparison.

An answer is a MetricFlow query (:class:`~.query.MetricQuery`) or ``{"unanswerable": "reason"}``.
The schema uses MetricFlow's names: metrics, accepted group-bys (``flat``: any metric's;
``branches``: one branch per metric with only its valid group-bys), the data's values for a small
categorical ``where``, bounded numbers. A **listing** is its own branch (``metrics`` ``maxItems: 0``,
at least one group-by) beside query branches (``minItems: 1``), so ``{"metrics": [], "group_by": []}``
matches none, without ``if``/``then`` or ``uniqueItems`` (not every grammar backend takes them).
Cross-part rules the schema cannot carry are MetricFlow's compile errors, recorded per item."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from nlq2sql.errors import InputError, IntentError
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.query import ARITY, GRAINS, OPS, MetricQuery, Unanswerable

__all__ = ["PARTS", "SCHEMA_MODES", "Answer", "KnownValues", "answer_schema", "is_listing_branch", "parse_answer",
           "part_matches"]

SCHEMA_MODES = ("flat", "branches")
PARTS = ("metrics", "group_by", "where", "order_by", "limit")
MAX_METRICS, MAX_GROUP_BY, MAX_WHERE, MAX_VALUES, MAX_ORDER, MAX_LIMIT = 4, 4, 5, 10, 4, 1000
Answer = MetricQuery | Unanswerable


def _enum(values: list[str] | tuple[str, ...]) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


#: ``(field, known values)`` pairs: a ``where`` on such a field may only name those values.
KnownValues = tuple[tuple[str, tuple[str, ...]], ...]


def _by_arity() -> tuple[tuple[tuple[str, ...], int, int], ...]:
    """The operators grouped by how many values they take (``Where``'s :data:`~.query.ARITY`), so a
    constrained answer never breaks it; a list is bounded by :data:`MAX_VALUES`."""
    groups: dict[tuple[int, int | None], list[str]] = {}
    for op in OPS:
        groups.setdefault(ARITY[op], []).append(op)
    return tuple((tuple(ops), least, MAX_VALUES if most is None else most) for (least, most), ops in groups.items())


_ARITY = _by_arity()


def _conditions(fields: list[str], values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "object", "additionalProperties": False, "required": ["field", "op", "values"],
             "properties": {"field": _enum(fields), "op": _enum(ops),
                            "values": {"type": "array", "items": values, "minItems": lo, "maxItems": hi}}}
            for ops, lo, hi in _ARITY]


def _where_item(fields: list[str], known: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """One ``where`` condition, as ``Where`` accepts it: one value for eq…lte, two for between,
    a list for in/not_in (one branch per arity, so the grammar counts them); a field with known
    values takes only those (its own branches, so the grammar ties the values to the field); any
    other field takes a short string or a number."""
    free = [f for f in fields if f not in known]
    pinned = [c for f in fields if f in known for c in _conditions([f], _enum(known[f]))]
    return {"anyOf": [*pinned, *_conditions(free, {"anyOf": [{"type": "string", "maxLength": 64},
                                                             {"type": "number"}]})]}


def _query(metrics: list[str], group_bys: list[str], all_metrics: list[str],
           known: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    fields = sorted(set(group_bys) | {f"metric_time__{g}" for g in GRAINS})
    return {
        "type": "object", "additionalProperties": False,
        "required": ["metrics", "group_by", "where", "order_by", "limit"],
        "properties": {
            # No uniqueItems: vLLM 0.32's xgrammar refuses the whole schema for it (HTTP 400, measured);
            # a name given twice is read once (MetricQuery de-duplicates).
            "metrics": {"type": "array", "items": _enum(metrics), "minItems": 1, "maxItems": MAX_METRICS},
            "group_by": {"type": "array", "items": _enum(group_bys), "maxItems": MAX_GROUP_BY},
            "where": {"type": "array", "maxItems": MAX_WHERE, "items": _where_item(fields, known)},
            "order_by": {"type": "array", "maxItems": MAX_ORDER, "items": {
                "type": "object", "additionalProperties": False, "required": ["field", "descending"],
                "properties": {"field": _enum(sorted(set(group_bys) | set(all_metrics))),
                               "descending": {"type": "boolean"}}}},
            "limit": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}, {"type": "null"}]},
        },
    }


def _listing(names: list[str], known: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """The listing branch: no metric, one to :data:`MAX_GROUP_BY` of the dimension-value names,
    ``where`` and ``order_by`` on those names only (no ``metric_time``: a listing has none)."""
    out = _query([], names, [], known)
    props = out["properties"]
    props["metrics"] = {"type": "array", "items": {"type": "string"}, "maxItems": 0}
    props["group_by"]["minItems"] = 1
    props["where"]["items"] = _where_item(names, known)
    props["order_by"]["items"]["properties"]["field"] = _enum(names)
    return out


def is_listing_branch(branch: dict[str, Any]) -> bool:
    """Whether a branch of :func:`answer_schema` is the listing's (its ``metrics`` must be empty)."""
    return branch.get("properties", {}).get("metrics", {}).get("maxItems") == 0


_UNANSWERABLE = {"type": "object", "additionalProperties": False, "required": ["unanswerable"],
                 "properties": {"unanswerable": {"type": "string", "minLength": 1, "maxLength": 200}}}


@lru_cache(maxsize=32)
def _schema(catalog: Catalog, mode: str, abstain: bool, values: KnownValues) -> str:
    metrics = list(catalog.metrics)
    known = dict(values)
    eng = catalog.engine
    branches: list[dict[str, Any]]
    if mode == "flat":
        union = sorted({g for m in metrics for g in eng.group_bys((m,))})
        branches = [_query(metrics, union, metrics, known)]
    elif mode == "branches":
        # One branch per distinct group-by set: its metrics may be combined, its group-bys are valid for all.
        by_set: dict[tuple[str, ...], list[str]] = {}
        for m in metrics:
            by_set.setdefault(eng.group_bys((m,)), []).append(m)
        branches = [_query(ms, list(gbs), metrics, known) for gbs, ms in by_set.items()]
    else:
        raise InputError(f"unknown schema mode {mode!r} (known: {', '.join(SCHEMA_MODES)})", field="--schema")
    if listables := list(eng.listables()):
        branches.append(_listing(listables, known))
    if abstain:
        branches.append(_UNANSWERABLE)
    out: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                           "title": "nlq2sql intent v2 (a MetricFlow query)"}
    if len(branches) == 1:
        out.update(branches[0])
    else:
        out["anyOf"] = branches
    # Key order kept as written: grammar backends generate properties in the schema's order, and
    # sorted keys put group_by before metrics — a small model, shown {"metrics": … first in the
    # prompt, then fled to the other branch ({"unanswerable": …}) on every question (measured).
    return json.dumps(out)


def answer_schema(catalog: Catalog, mode: str = "flat", *, abstain: bool = True,
                  values: KnownValues = ()) -> dict[str, Any]:
    """The JSON Schema a v2 answer is constrained by (a fresh copy: callers may change it).
    ``values``: the known values of small categorical fields (the bound warehouse's
    :attr:`~nlq2sql.semantic.binding.Warehouse.schema_values`); without them any value is allowed."""
    return json.loads(_schema(catalog, mode, abstain, tuple(values)))  # type: ignore[no-any-return]


def parse_answer(text: str, catalog: Catalog) -> Answer:
    """Raw model text → a query in the manifest's names, or an abstention; IntentError otherwise."""
    try:
        obj = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise IntentError("invalid_json", f"not JSON: {exc}") from None
    except RecursionError:
        raise IntentError("invalid_json", "not JSON: nested too deeply") from None
    if isinstance(obj, dict) and "unanswerable" in obj:
        try:
            return Unanswerable.model_validate(obj)
        except ValidationError as exc:
            raise IntentError("schema_invalid", _first(exc)) from None
    try:
        q = MetricQuery.model_validate(obj)
    except ValidationError as exc:
        raise IntentError("schema_invalid", _first(exc)) from None
    unknown = [m for m in q.metrics if m not in catalog.metrics]
    if unknown:
        raise IntentError("schema_invalid", f"metrics: {unknown[0]!r} is not a metric of {catalog.name!r}")
    if not q.metrics:  # a listing: MetricFlow's dimension-value names, in every part
        valid = set(catalog.engine.listables())
        bad = [g for g in (*q.group_by, *(w.field for w in q.where or ()), *(o.field for o in q.order_by or ()))
               if g not in valid]
        if bad:
            raise IntentError("schema_invalid", f"{bad[0]!r} cannot be listed without a metric")
        return q
    valid = set(catalog.engine.group_bys(q.metrics))
    bad = [g for g in q.group_by if g not in valid]
    if bad:
        raise IntentError("schema_invalid", f"group_by: {bad[0]!r} is not valid for {', '.join(q.metrics)}")
    return q


def _first(exc: ValidationError) -> str:
    e = exc.errors()[0]
    where = "/".join(str(x) for x in e["loc"]) or "(root)"
    return f"{where}: {e['msg']}"


def _where_set(q: MetricQuery) -> frozenset[tuple[str, str, tuple[str, ...]]]:
    return frozenset((w.field, w.op, tuple(sorted(map(str, w.values)))) for w in q.where or ())


def part_matches(pred: MetricQuery, gold: MetricQuery) -> dict[str, bool]:
    """Per-part agreement for the taxonomy (lists compared as sets, where items by field/op/values)."""
    return {"metrics": set(pred.metrics) == set(gold.metrics),
            "group_by": set(pred.group_by) == set(gold.group_by),
            "where": _where_set(pred) == _where_set(gold),
            "order_by": tuple(pred.order_by or ()) == tuple(gold.order_by or ()),
            "limit": pred.limit == gold.limit}
