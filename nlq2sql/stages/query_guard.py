"""Guardrails and value linking on the v2 answer (a MetricFlow query), and its canonical form.

A v2 query is read through a **v1 view** (derived kind, first metric and non-time group-by, limit,
order direction on a metric), so every v1 rule set applies unchanged; its changes are written back
onto the query. A rule set whose change cannot be written back, or would leave another kind than
meant, is skipped for that item: never a guess. Interventions keep v1 field names, judged against
the gold's view. The ``values`` rule set edits the query's ``where`` items (two values of one field:
``in``), repairing as the v1 repair does (:mod:`.value_links`)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from nlq2sql.semantic.catalog import YEAR_FIELD, Catalog
from nlq2sql.semantic.query import METRIC_TIME, MetricQuery, OrderBy, Unanswerable, Where
from nlq2sql.stages.guardrail import Intervention, RuleSet
from nlq2sql.stages.intent import Intent
from nlq2sql.stages.value_links import Link, ValueIndex, ValueRuleSet

__all__ = ["UNANSWERABLE_KEY", "apply_query_guardrails", "canonical_key", "intervention_correct", "link_where",
           "query_scope", "where_hint", "view"]

#: Every abstention is one vote, whatever its reason.
UNANSWERABLE_KEY = "unanswerable"
#: What a view may change and the query can take back.
_WRITABLE = frozenset({"intent", "limit", "order"})
_V1_GRAINS = ("month", "quarter", "year")
_NEGATED = {"eq": "neq", "in": "not_in", "neq": "eq", "not_in": "in"}
_POSITIVE = frozenset({"eq", "in"})


def canonical_key(answer: MetricQuery | Unanswerable) -> str:
    """Equal keys ⇔ the same question asked of MetricFlow: metrics, group-bys and ``where`` items
    as sets (``in`` values as a set), order and limit as given; every abstention alike."""
    if isinstance(answer, Unanswerable):
        return UNANSWERABLE_KEY
    where = sorted((w.field, w.op, sorted(map(str, w.values)) if w.op in ("in", "not_in") else list(map(str, w.values)))
                   for w in answer.where or ())
    data = {"metrics": sorted(answer.metrics), "group_by": sorted(answer.group_by), "where": where,
            "order_by": [[o.field, o.descending] for o in answer.order_by or ()], "limit": answer.limit}
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


# -- the v1 view --------------------------------------------------------------------------------
def _time(name: str) -> bool:
    return name == METRIC_TIME or name.startswith(METRIC_TIME + "__")


def view(q: MetricQuery, catalog: Catalog) -> Intent | None:
    """The v1 intent a query reads as (None when it reads as none: a limit past v1's bound, or a
    listing, which has no metric — the ranking and sort rules, written for metrics, leave it alone)."""
    if not q.metrics:
        return None
    short = {d.group_by: name for name, d in catalog.dimensions.items()}
    dims = [g for g in q.group_by if not _time(g)]
    grains = [g.rsplit("__", 1)[-1] for g in q.group_by if _time(g)]
    metric_order = next((o for o in q.order_by or () if o.field in q.metrics), None)
    try:
        return Intent(intent=q.kind, metric=q.metrics[0], dimension=short.get(dims[0], dims[0]) if dims else None,  # type: ignore[arg-type]
                      time_grain=grains[0] if grains and grains[0] in _V1_GRAINS else None,  # type: ignore[arg-type]
                      filters=[], limit=q.limit,
                      order=None if metric_order is None else "desc" if metric_order.descending else "asc")
    except ValidationError:
        return None


def _write_back(q: MetricQuery, before: Intent, after: Intent) -> MetricQuery | None:
    """The query with the view's changes (None: a change the query cannot take, or a kind that
    does not follow from them)."""
    changed = {f for f in Intent.model_fields if getattr(before, f) != getattr(after, f)}
    if not changed <= _WRITABLE:
        return None
    order = [o for o in q.order_by or ()]
    at = next((i for i, o in enumerate(order) if o.field in q.metrics), None)
    if after.order is None:
        order = [o for o in order if o.field not in q.metrics]
    elif at is not None:
        order[at] = OrderBy(field=order[at].field, descending=after.order == "desc")
    else:
        order.insert(0, OrderBy(field=q.metrics[0], descending=after.order == "desc"))
    try:
        new = q.model_copy(update={"limit": after.limit, "order_by": tuple(order) or None})
        new = MetricQuery.model_validate(new.model_dump())
    except ValidationError:
        return None
    return new if new.kind == after.intent else None


# -- value linking on v2 ------------------------------------------------------------------------
def link_where(links: tuple[Link, ...], catalog: Catalog) -> list[Where]:
    """Linked values as ``where`` items in MetricFlow's names: a year as its date range, two
    values of one field with one polarity as ``in`` / ``not_in``."""
    out: list[Where] = []
    grouped: dict[tuple[str, bool], list[str]] = {}
    for lk in links:
        if lk.field == YEAR_FIELD:
            out.append(Where(field="metric_time__day", op="between", values=(f"{lk.value}-01-01", f"{lk.value}-12-31"))
                       if lk.op == "eq" else Where(field="metric_time__year", op="neq", values=(f"{lk.value}-01-01",)))
            continue
        dim = catalog.dimensions.get(lk.field)
        if dim is not None:
            grouped.setdefault((dim.group_by, lk.op == "eq"), []).append(lk.value)
    for (fld, positive), vals in grouped.items():
        one = len(vals) == 1
        out.append(Where(field=fld, op=("eq" if one else "in") if positive else ("neq" if one else "not_in"),
                         values=tuple(vals)))
    return out


def where_hint(where: list[Where]) -> str:
    """What ``--link-values hint`` adds after a v2 question ('' when nothing is linked)."""
    if not where:
        return ""
    items = "; ".join(json.dumps(w.model_dump(mode="json"), separators=(",", ":")) for w in where)
    return f"\n\n(Known values named in this question, as where items: {items}.)"


def _polarity(where: tuple[Where, ...] | None, fields: set[str]) -> dict[tuple[str, str], bool]:
    """(field, value) → positive, over the ``where`` items on value fields."""
    return {(w.field, str(v)): w.op in _POSITIVE for w in where or () if w.field in fields and w.op in _NEGATED
            for v in w.values}


def _value_fields(idx: ValueIndex, catalog: Catalog) -> set[str]:
    return {catalog.dimensions[f].group_by for f in idx.fields if f in catalog.dimensions}


def _repair_values(rs: ValueRuleSet, q: MetricQuery, question: str, catalog: Catalog
                   ) -> tuple[MetricQuery, list[Intervention]]:
    assert rs.index is not None
    idx = rs.index
    fields = _value_fields(idx, catalog)
    linked = {(w.field, str(v)): w.op in _POSITIVE for w in link_where(idx.link(question), catalog)
              if w.field in fields for v in w.values}
    found: list[Intervention] = []

    def step(rule_id: str, where: list[Where]) -> None:
        nonlocal q
        try:
            new = q.model_copy(update={"where": tuple(where) or None})
            new = MetricQuery.model_validate(new.model_dump())
        except ValidationError:
            return
        if new.key() != q.key():
            found.append(Intervention(rule_id, ("where",), {"where": _dump_where(q)}, {"where": _dump_where(new)}))
            q = new

    # 1. values on a value field the question never names
    kept: list[Where] = []
    for w in q.where or ():
        vals = tuple(v for v in w.values if w.field not in fields or (w.field, str(v)) in linked
                     or idx.named(str(v), question))
        if vals:
            trimmed = vals != w.values and w.op in ("in", "not_in")
            kept.append(w.model_copy(update={"values": vals}) if trimmed else w)
    if len(kept) < len(q.where or ()) or kept != list(q.where or ()):
        step("values:drop", kept)
    # 2. a named value with the other polarity ("excluding X" answered as X only)
    fixed = []
    for w in q.where or ():
        want = {linked.get((w.field, str(v))) for v in w.values} - {None}
        positive = w.op in _POSITIVE
        fixed.append(w.model_copy(update={"op": _NEGATED[w.op]})
                     if w.op in _NEGATED and len(want) == 1 and want != {positive} else w)
    step("values:op", fixed)
    # 3. named values the answer lacks
    have = _polarity(q.where, fields)
    missing = [Link(fld, "eq" if pos else "neq", v, 0, 0) for (fld, v), pos in linked.items() if (fld, v) not in have]
    if missing:
        short = {d.group_by: name for name, d in catalog.dimensions.items()}
        extra = link_where(tuple(Link(short[lk.field], lk.op, lk.value, 0, 0) for lk in missing), catalog)
        step("values:add", _merge([*(q.where or ())], extra))
    return q, found


def _merge(where: list[Where], extra: list[Where]) -> list[Where]:
    """``extra`` added to ``where``: a value joins the item of its field and polarity (eq North +
    South → in [North, South]; two eq items on one field would match no row), else a new item."""
    out = list(where)
    for new in extra:
        positive = new.op in _POSITIVE
        at = next((i for i, w in enumerate(out) if w.field == new.field and w.op in _NEGATED
                   and (w.op in _POSITIVE) == positive), None)
        if at is None:
            out.append(new)
            continue
        values = tuple(dict.fromkeys((*out[at].values, *new.values)))
        out[at] = Where(field=new.field, op=("in" if positive else "not_in") if len(values) > 1 else out[at].op,
                        values=values)
    return out


def _dump_where(q: MetricQuery) -> list[dict[str, Any]]:
    return [w.model_dump(mode="json") for w in q.where or ()]


# -- applying rule sets, and judging them ---------------------------------------------------------
def apply_query_guardrails(rulesets: list[RuleSet], q: MetricQuery, question: str, catalog: Catalog
                           ) -> tuple[MetricQuery, list[Intervention]]:
    """Each rule set in order on the query (through its view, or on ``where`` for ``values``)."""
    out: list[Intervention] = []
    for rs in rulesets:
        if isinstance(rs, ValueRuleSet):
            q, found = _repair_values(rs, q, question, catalog)
            out += found
            continue
        before = view(q, catalog)
        if before is None:
            continue
        after, found = rs.apply(before, question)
        if not found:
            continue
        new = _write_back(q, before, after)
        if new is not None:
            q = new
            out += found
    return q, out


def query_scope(rulesets: list[RuleSet], raw: MetricQuery, gold: MetricQuery, catalog: Catalog) -> list[str]:
    """The rules that could have helped the item (recall's denominator), judged as for v1."""
    out: list[str] = []
    for rs in rulesets:
        if isinstance(rs, ValueRuleSet):
            assert rs.index is not None
            fields = _value_fields(rs.index, catalog)
            rk, gk = _polarity(raw.where, fields), _polarity(gold.where, fields)
            out += [rid for rid, hit in (("values:drop", any(k not in gk for k in rk)),
                                         ("values:op", any(k in gk and gk[k] != p for k, p in rk.items())),
                                         ("values:add", any(k not in rk for k in gk))) if hit]
            continue
        rv, gv = view(raw, catalog), view(gold, catalog)
        if rv is not None and gv is not None:
            out += rs.scope(rv.model_dump(mode="json"), gv.model_dump(mode="json"))
    return out


def intervention_correct(iv: Intervention, final: MetricQuery | None, gold: MetricQuery, catalog: Catalog,
                         rulesets: list[RuleSet]) -> bool:
    """Whether every field the intervention changed agrees with the gold after all rule sets ran:
    ``where`` items on value fields compared as (field, value) → polarity; view fields on the views."""
    if final is None:
        return False
    if iv.fields == ("where",):
        idx = next((rs.index for rs in rulesets if isinstance(rs, ValueRuleSet)), None)
        fields = _value_fields(idx, catalog) if idx is not None else set()
        return _polarity(final.where, fields) == _polarity(gold.where, fields)
    fv, gv = view(final, catalog), view(gold, catalog)
    return fv is not None and gv is not None and all(getattr(fv, f) == getattr(gv, f) for f in iv.fields)
