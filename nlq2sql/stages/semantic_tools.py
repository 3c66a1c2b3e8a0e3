"""What the ``semantic`` and ``sql`` commands do, as library calls (same checks for any caller); a
stage because checking a model builds and executes queries. ``check``: every metric × dimension
(and time series) builds and runs on the database; ``init``: a starting YAML from a database's
tables; ``sql_for``: one intent → its SQL, bound parameters and optionally rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
from pydantic import Field

from nlq2sql.errors import ExcludedObjectError, InputError, IntentError, Nlq2SqlError, QueryTimeoutError, SqlBuildError
from nlq2sql.records.typed import JsonValue, Typed
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.contract import answer_schema
from nlq2sql.semantic.prune import Exclusion
from nlq2sql.semantic.query import GRAINS, MetricQuery
from nlq2sql.semantic.warehouse import connect_read_only, open_error
from nlq2sql.stages.execute import DEFAULT_TIMEOUT_S, Executor
from nlq2sql.stages.intent import (
    canonicalise,
    compact_regex,
    consistency_problem,
    excluded_problem,
    intent_schema,
    parse_intent,
)
from nlq2sql.stages.sqlbuild import build_sql

if TYPE_CHECKING:
    from nlq2sql.semantic.engine import Query
    from nlq2sql.semantic.query import MetricQuery

__all__ = ["CheckReport", "DimensionShown", "MetricShown", "Progress", "QueryCheck", "ShowReport", "SqlResult", "check",
           "closest", "compile_or_explain", "dumps", "grouped_names", "init_yaml", "name_problems", "show", "show_text",
           "slowest", "sql_for", "v2_shape_hint"]


class QueryCheck(Typed):
    """One query ``check`` ran: what it asked, its row count or the error that stopped it, and
    how long compiling and running it took.  ``slow``: it ran past the time limit (not ``ok``,
    yet no failure of the layer: ``CheckReport.slow``, not ``failed``)."""

    metric: str
    dimension: str
    ok: bool
    seconds: float
    rows: int | None = None
    error: str | None = None
    slow: bool = False  # written when set (a timed-out query's)


class CheckReport(Typed):
    """What ``semantic check`` found (``--json`` prints it as it stands)."""

    semantic_model: str
    path: str
    sha256: str
    engine: str
    metrics: int
    dimensions: int
    time_spine: str | None
    saved_queries: list[str]
    compiles: int
    queries: int
    query_timeout_s: float  # each query's time limit (``--query-timeout``)
    seconds: float  # the whole check's wall time
    failed: list[QueryCheck]
    slow: list[QueryCheck]  # ran past ``query_timeout_s``: not failures (exit 0 with a warning)
    results: list[QueryCheck]
    data_problems: list[str]  # each ``file:line: field 'key': message`` (they exclude what they touch)
    excluded: list[Exclusion]  # what the data problems left out, and why: the rest is checked above


class MetricShown(Typed):
    label: str
    type: str
    description: str
    group_by: list[str]


class DimensionShown(Typed):
    group_by: str
    model: str
    expr: str
    values: tuple[str, ...] | None


class ShowReport(Typed):
    """What ``semantic show`` prints: the derived vocabulary, values and years, and the JSON Schemas
    and regex sent to the server (those stay JSON documents: they are sent as they are)."""

    semantic_model: str
    path: str
    sha256: str
    time_spine: str | None
    metrics: dict[str, MetricShown]
    dimensions: dict[str, DimensionShown]
    saved_queries: dict[str, str]
    excluded: list[Exclusion]  # what data problems left out of the layer (see ``semantic check``)
    years: list[str]
    filter_fields: list[str]
    schema_mode: str
    intent_schema: dict[str, Any] = Field(alias="schema")  # (``schema`` is a BaseModel method)
    query_schema: dict[str, Any]
    compact_regex: str


class SqlResult(Typed):
    """One intent's SQL (``nlq2sql sql``): the v2 query as compiled (with its kind) or the v1 intent
    as canonicalised (each a model's JSON dump), its parameters, and with ``execute`` the rows as
    DuckDB returned them."""

    intent: dict[str, Any] | None = None
    query: dict[str, Any] | None = None
    kind: str | None = None
    sql: str
    params: list[JsonValue]
    columns: list[str] | None = None
    rows: list[list[JsonValue]] | None = None


#: ``check``'s progress callback: (queries done, queries in all, the one just done).
Progress = Callable[[int, int, QueryCheck], None]


def check(wh: Warehouse, *, timeout_s: float | None = None, progress: Progress | None = None) -> CheckReport:
    """Execute, per metric, one query per dimension it reaches and one monthly series; a metric
    that needs ``metric_time`` (cumulative, offset windows) is asked each with the month added.
    Every saved query is compiled and executed too.  Each query has ``timeout_s`` (default: the
    executor's); one that runs past it is *slow*, listed apart from the failures.  ``progress`` is
    called after each query."""
    import time
    from functools import partial

    cat = wh.catalog
    limit = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    asked: list[tuple[str, str, Callable[[], Query]]] = []
    for metric in cat.metrics:
        reachable = set(cat.engine.group_bys((metric,)))
        month = MetricQuery(metrics=(metric,), group_by=("metric_time__month",))
        asked.append((metric, "(time series, month)", partial(cat.engine.compile, month)))
        for d, dd in cat.dimensions.items():
            if dd.group_by not in reachable:
                continue
            q = MetricQuery(metrics=(metric,), group_by=(dd.group_by,))
            try:
                cat.engine.compile(q)
            except Nlq2SqlError:  # e.g. a cumulative metric: asked per month
                q = MetricQuery(metrics=(metric,), group_by=("metric_time__month", dd.group_by))
            asked.append((metric, d, partial(cat.engine.compile, q)))
    for sq in cat.manifest.saved_queries:
        asked.append((f"saved query {sq.name}", "", partial(cat.engine.compile_saved, sq.name)))
    results: list[QueryCheck] = []
    start = time.perf_counter()
    with Executor(wh.db_path, timeout_s=limit) as ex:
        for metric, dimension, make in asked:
            t0 = time.perf_counter()
            try:
                rows = ex.run(make())
                r = QueryCheck(metric=metric, dimension=dimension, ok=True, seconds=_secs(t0), rows=len(rows))
            except QueryTimeoutError as exc:
                r = QueryCheck(metric=metric, dimension=dimension, ok=False, seconds=_secs(t0), error=str(exc),
                               slow=True)
            except Nlq2SqlError as exc:
                r = QueryCheck(metric=metric, dimension=dimension, ok=False, seconds=_secs(t0), error=str(exc))
            results.append(r)
            if progress is not None:
                progress(len(results), len(asked), r)
    seconds = _secs(start)
    cat = wh.catalog
    return CheckReport(semantic_model=cat.name, path=cat.path, sha256=cat.sha256, engine="metricflow",
                       metrics=len(cat.metrics), dimensions=len(cat.dimensions), time_spine=cat.spine,
                       saved_queries=[q.name for q in cat.manifest.saved_queries],
                       compiles=cat.engine.compiles, queries=len(results), query_timeout_s=limit, seconds=seconds,
                       failed=[r for r in results if not r.ok and not r.slow], slow=[r for r in results if r.slow],
                       results=results, data_problems=[str(p) for p in wh.data_problems],
                       excluded=list(cat.excluded))


def _secs(since: float) -> float:
    import time

    return round(time.perf_counter() - since, 3)


def slowest(report: CheckReport, n: int = 3) -> list[QueryCheck]:
    """The ``n`` queries of a check that took longest, longest first."""
    return sorted(report.results, key=lambda r: -r.seconds)[:n]


def show(wh: Warehouse, schema: str = "flat") -> ShowReport:
    """The derived vocabulary, values, years and the JSON Schema sent to the server."""
    cat = wh.catalog
    return ShowReport(
        semantic_model=cat.name, path=cat.path, sha256=cat.sha256, time_spine=cat.spine,
        metrics={m.name: MetricShown(label=m.label, type=m.type, description=m.description,
                                     group_by=list(cat.engine.group_bys((m.name,)))) for m in cat.metrics.values()},
        dimensions={d.name: DimensionShown(group_by=d.group_by, model=d.model, expr=d.expr, values=wh.values(d.name))
                    for d in cat.dimensions.values()},
        saved_queries={q.name: q.query_params.json() if hasattr(q.query_params, "json") else str(q.query_params)
                       for q in cat.manifest.saved_queries},
        excluded=list(cat.excluded), years=list(wh.years), filter_fields=list(cat.vocabulary.filter_fields),
        schema_mode=schema, schema=intent_schema(cat, schema),
        query_schema=answer_schema(cat, schema, values=wh.schema_values),  # the v2 answer's (--answer query)
        compact_regex=compact_regex(cat, schema))


def _excluded_name(data: JsonValue, wh: Warehouse) -> str | None:
    """A v1 intent's metric, dimension or filter field that the partial layer excluded: why."""
    if not isinstance(data, dict):
        return None
    filters = data.get("filters")
    filters = filters if isinstance(filters, list) else []
    names = [("metric", data.get("metric")), ("dimension", data.get("dimension")),
             *(("filter field", f.get("field")) for f in filters if isinstance(f, dict))]
    for what, name in names:
        if isinstance(name, str) and (why := excluded_problem(wh.catalog, what, name)) is not None:
            return why
    return None


def grouped_names(names: Iterable[str]) -> list[str]:
    """Group-by names with a time dimension's grains folded into one entry
    (``metric_time__{day,week,month,quarter,year}``, grains finest first), in their first order."""
    bases: dict[str, list[str]] = {}
    for n in names:
        base, _, grain = n.rpartition("__")
        key = base if base and grain in GRAINS else n
        bases.setdefault(key, [])
        if key != n:
            bases[key].append(grain)
    return [f"{k}__{{{','.join(sorted(g, key=GRAINS.index))}}}" if g else k for k, g in bases.items()]


def show_text(report: ShowReport, width: int = 100) -> str:
    """``semantic show``'s short listing (as ``mf list metrics``): each metric with its label and
    type, the group-by names metrics reach (one list per distinct set, time grains folded), the
    dimensions with their known values, saved queries and years; ``--json`` prints the whole report."""
    import textwrap

    sets: dict[tuple[str, ...], str] = {}
    for m in report.metrics.values():
        sets.setdefault(tuple(m.group_by), chr(ord("A") + len(sets)) if len(sets) < 26 else str(len(sets)))
    lines = [f"{report.semantic_model} ({report.path}) · time spine: {report.time_spine} · "
             f"sha256 {report.sha256[:12]}", "", f"Metrics ({len(report.metrics)}):"]
    pad = max((len(n) for n in report.metrics), default=0)
    lpad = max((len(f"{m.label} ({m.type})") for m in report.metrics.values()), default=0)
    for name, m in report.metrics.items():
        lines.append(f"  {name.ljust(pad)}  {f'{m.label} ({m.type})'.ljust(lpad)}  group by: "
                     f"{sets[tuple(m.group_by)]}")
    lines.append("")
    for names, tag in sets.items():
        folded = grouped_names(names)
        lines.append(f"Group by {tag} ({len(names)} names):")
        lines += textwrap.wrap(", ".join(folded), width=width, initial_indent="  ", subsequent_indent="  ",
                               break_on_hyphens=False, break_long_words=False)
    lines += ["", f"Dimensions ({len(report.dimensions)}):"]
    pad = max((len(n) for n in report.dimensions), default=0)
    for name, d in report.dimensions.items():
        vals = "" if d.values is None else (": " + ", ".join(d.values[:12]) +
                                            (f", … {len(d.values) - 12} more" if len(d.values) > 12 else ""))
        lines.append(f"  {name.ljust(pad)}  {d.group_by}{vals}")
    if report.saved_queries:
        lines += ["", f"Saved queries: {', '.join(report.saved_queries)}"]
    if report.years:
        lines += ["", f"Years in the data: {', '.join(report.years)}"]
    lines += ["", "--json prints everything: the JSON Schemas and the regex sent to the server too"]
    return "\n".join(lines) + "\n"


def sql_for(wh: Warehouse, intent_json: str, *, execute: bool = False) -> SqlResult:
    """One intent (JSON text: v2 MetricFlow query, or v1) → SQL and parameters; exact rows with ``execute``.

    A v2 query (a ``metrics`` key) is compiled as it is; a v1 intent is canonicalised first.
    Rows are printed as DuckDB returns them (no rounding), with the column names.
    """
    from pydantic import ValidationError

    try:
        data = json.loads(intent_json)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not JSON: {exc}", field="--intent") from None
    out: SqlResult
    if isinstance(data, dict) and "metrics" in data:
        try:
            mq = MetricQuery.model_validate(data)
        except ValidationError as exc:
            e = exc.errors()[0]
            where = ".".join(str(x) for x in e["loc"])
            raise InputError(f"{where}: {e['msg']}" if where else e["msg"], field="--intent") from None
        q = compile_or_explain(wh, mq)
        out = SqlResult(query=json.loads(mq.key()), kind=mq.kind, sql=q.sql, params=list(q.params))
    else:
        if isinstance(data, dict) and "intent" not in data:  # neither shape: most likely a v2 query misspelt
            raise InputError(v2_shape_hint(wh, data), field="--intent")
        try:
            intent = parse_intent(intent_json, wh.catalog)
        except IntentError as exc:
            raise InputError(_excluded_name(data, wh) or f"{exc.status}: {exc.reason}", field="--intent") from None
        problem = consistency_problem(intent)
        if problem:
            raise InputError(f"inconsistent intent: {problem}", field="--intent")
        canon = canonicalise(intent)
        q = build_sql(canon, wh.catalog)
        out = SqlResult(intent=canon.model_dump(mode="json"), sql=q.sql, params=list(q.params))
    if execute:
        con = connect_read_only(wh.db_path)
        try:
            cur = con.execute(q.sql, list(q.params))
            out.columns = [d[0] for d in cur.description or ()]
            out.rows = [list(r) for r in cur.fetchall()]
        except duckdb.Error as exc:
            raise InputError(f"the query failed in DuckDB: {str(exc).splitlines()[0]}", field="--intent") from None
        finally:
            con.close()
    return out


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names nearest ``name``: first those holding it as whole ``__`` parts (``region``
    → ``customer__region``, ``order_date`` → ``order__order_date__month``; the shortest first),
    then difflib's close matches of the whole name and of the names' last part."""
    import difflib

    pool = sorted(set(known))
    inside = sorted((k for k in pool if f"__{name}__" in f"__{k}__"), key=lambda k: (len(k), k))
    tails: dict[str, list[str]] = {}
    for k in pool:
        tails.setdefault(k.rsplit("__", 1)[-1], []).append(k)
    near = difflib.get_close_matches(name, pool, n=n, cutoff=0.6)
    near_tail = [k for t in difflib.get_close_matches(name.rsplit("__", 1)[-1], list(tails), n=n, cutoff=0.75)
                 for k in sorted(tails[t], key=lambda k: (len(k), k))]
    out: list[str] = []
    for k in (*inside, *near, *near_tail):
        if k not in out and k != name:
            out.append(k)
    return out[:n]


def _unknown(what: str, name: str, known: Iterable[str]) -> str:
    near = closest(name, known)
    return f"unknown {what} {name!r}" + (f" (closest: {', '.join(near)})" if near else "")


def name_problems(wh: Warehouse | Catalog, mq: MetricQuery) -> list[str]:
    """What in a v2 query names nothing the layer has: each unknown metric, group-by, filter or
    order field, with the layer's closest names (group-bys: those reachable from its metrics)."""
    cat = wh.catalog if isinstance(wh, Warehouse) else wh
    engine = cat.engine
    metrics = tuple(cat.metrics)
    problems = [_unknown("metric", m, metrics) for m in mq.metrics if m not in cat.metrics]
    if problems:
        return problems  # the group-bys depend on the metrics: name those first
    try:
        reach = engine.group_bys(tuple(mq.metrics)) if mq.metrics else ()
        anywhere = {g for m in metrics for g in engine.group_bys((m,))}
    except Exception:  # noqa: BLE001 — a listing MetricFlow cannot make: no suggestion, its reason stands
        return []
    known = reach or tuple(anywhere)
    for where, names in (("group-by", mq.group_by), ("filter field", [w.field for w in mq.where or ()]),
                         ("order field", [o.field for o in mq.order_by or ()
                                          if o.field not in mq.metrics and o.field not in mq.group_by])):
        for g in names:
            if g in known:
                continue
            if where == "order field":  # an order field is one of the query's own metrics or group-bys
                problems.append(_unknown(where, g, (*mq.metrics, *mq.group_by)) + " (an order field is one of "
                                "the query's metrics or group_by)")
            elif g in anywhere:
                problems.append(f"{where} {g!r} is not reachable from {', '.join(mq.metrics)} (reachable: "
                                f"{', '.join(closest(g, known)) or 'see semantic show'})")
            else:
                problems.append(_unknown(where, g, known))
    return problems


def compile_or_explain(wh: Warehouse, mq: MetricQuery) -> Query:
    """``mq`` compiled; a query MetricFlow refuses is bad input: the unknown names with the
    layer's closest ones, else MetricFlow's reason, one line."""
    try:
        return wh.catalog.engine.compile(mq)
    except ExcludedObjectError as exc:  # a name the data left out of the layer: said with why
        raise InputError(str(exc), field="--intent") from None
    except SqlBuildError as exc:
        problems = name_problems(wh, mq)
        reason = "; ".join(problems) if problems else "MetricFlow cannot compile it: " + " ".join(str(exc).split())
        raise InputError(reason, field="--intent") from None


def v2_shape_hint(wh: Warehouse, data: Mapping[str, object]) -> str:
    """For a JSON object that is neither a v2 query (``metrics``) nor a v1 intent (``intent``):
    the v2 shape, filled with the object's own metric where it named one."""
    metric = data.get("metric") if isinstance(data.get("metric"), str) else next(iter(wh.catalog.metrics), "m")
    example = json.dumps({"metrics": [metric], "group_by": ["..."], "order_by": [{"field": metric,
                                                                                   "descending": True}],
                          "limit": 5})
    keys = ", ".join(repr(k) for k in list(data)[:4]) or "no keys"
    return (f"not a query: a v2 query has a 'metrics' list (this object has {keys}); e.g. {example} "
            f"(group_by, where, order_by and limit optional; a v1 intent names its 'intent')")


class _Entity(Typed):
    name: str
    type: str  # primary / foreign
    expr: str


class _Granularity(Typed):
    time_granularity: str


class _Dimension(Typed):
    name: str
    type: str  # categorical / time
    type_params: _Granularity | None = None


class _Measure(Typed):
    name: str
    agg: str
    expr: str


class _MeasureRef(Typed):
    measure: str


class _Metric(Typed):
    name: str
    label: str
    type: str
    type_params: _MeasureRef


class _Defaults(Typed):
    agg_time_dimension: str


class _Model(Typed):
    """One table's semantic model as ``semantic init`` writes it (the YAML keys in this order; an
    empty list or an unset default is left out)."""

    name: str
    description: str
    model: str
    primary_entity: str | None = None
    defaults: _Defaults | None = None
    entities: list[_Entity] = []
    dimensions: list[_Dimension] = []
    measures: list[_Measure] = []


_NUMERIC = ("INT", "DECIMAL", "DOUBLE", "FLOAT", "REAL", "NUMERIC", "HUGEINT", "BIGINT", "SMALLINT", "TINYINT")


def init_yaml(db: Path, *, max_categorical: int = 200) -> str:
    """A starting semantic model from a database: one semantic model per table, id columns as
    entities (the first ``*_id`` column named after the table primary, others foreign), text
    columns with few values as categorical dimensions, dates as time dimensions, numbers as sum
    measures, plus a count metric per table.  Meant to be edited, then checked."""
    import yaml

    try:
        con = connect_read_only(db)
    except duckdb.Error as exc:
        raise InputError(open_error(exc), path=str(db), field="--db") from None
    try:
        tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                            "WHERE table_schema = 'main' ORDER BY table_name").fetchall()]
        if not tables:
            raise InputError("the database has no tables", path=str(db), field="--db")
        models: list[_Model] = []
        metrics: list[_Metric] = []
        used: set[str] = set()  # measure and metric names are unique across a MetricFlow project
        for t in tables:
            cols = con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
                               "ORDER BY ordinal_position", [t]).fetchall()
            entities: list[_Entity] = []
            dims: list[_Dimension] = []
            measures: list[_Measure] = []
            time_dim = None
            for name, dtype in cols:
                dtype = dtype.upper()
                if name.lower().endswith("_id") or name.lower() == "id":
                    one = _singular(t)
                    primary = (name.lower() in (f"{one.lower()}_id", "id")
                               and not any(e.type == "primary" for e in entities)
                               and _unique(con, t, name))  # a key the data repeats would fan out every join
                    entities.append(_Entity(name=name if name.lower() != "id" else f"{one}_id",
                                            type="primary" if primary else "foreign", expr=name))
                elif dtype in ("DATE", "TIMESTAMP") or dtype.startswith("TIMESTAMP"):
                    dims.append(_Dimension(name=name, type="time", type_params=_Granularity(time_granularity="day")))
                    time_dim = time_dim or name
                elif dtype.startswith(_NUMERIC):
                    mname = f"total_{name}" if f"total_{name}" not in used else f"{t}_total_{name}"
                    used.add(mname)
                    measures.append(_Measure(name=mname, agg="sum", expr=name))
                elif dtype == "VARCHAR" or dtype == "BOOLEAN":
                    n = con.execute(f'SELECT COUNT(DISTINCT "{name}") FROM "{t}"').fetchone()
                    if n is not None and n[0] <= max_categorical:
                        dims.append(_Dimension(name=name, type="categorical"))
            model = _Model(name=t, description=f"Table {t} (edit me).", model=f"ref('{t}')")
            if not any(e.type == "primary" for e in entities):
                model.primary_entity = t  # MetricFlow: a model with dimensions needs a primary entity
            if time_dim:
                model.defaults = _Defaults(agg_time_dimension=time_dim)
                measures.insert(0, _Measure(name=f"{t}_count", agg="count", expr="1"))
                metrics += [_Metric(name=m.name, label=f"{t} rows" if i == 0 else m.name.replace("_", " "),
                                    type="simple", type_params=_MeasureRef(measure=m.name))
                            for i, m in enumerate(measures)]
            else:
                measures = []
            model.entities, model.dimensions, model.measures = entities, dims, measures
            models.append(model)
    finally:
        con.close()
    head = ("# A starting semantic model generated by `nlq2sql semantic init` from "
            f"{db.name}.\n# Edit names, labels and joins, then run `nlq2sql semantic check`.\n")
    doc = {"semantic_models": [m.model_dump(exclude_defaults=True) for m in models],  # the YAML document: the edge
           "metrics": [m.model_dump() for m in metrics]}
    return head + yaml.safe_dump(doc, sort_keys=False)


def _singular(table: str) -> str:
    """``supplies`` -> ``supply``, ``orders`` -> ``order``, ``address`` stays: entity names read as one row."""
    if table.lower().endswith("ies") and len(table) > 3:
        return table[:-3] + "y"
    if table.lower().endswith("s") and not table.lower().endswith("ss"):
        return table[:-1]
    return table


def _unique(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    """True when ``column`` has no NULL and no repeated value in ``table`` (what a primary entity promises)."""
    row = con.execute(f'SELECT COUNT(*) = COUNT(DISTINCT "{column}") AND COUNT("{column}") = COUNT(*) '
                      f'FROM "{table}"').fetchone()
    return bool(row and row[0])


def dumps(report: CheckReport | ShowReport) -> str:
    """A report as the CLI prints it: indented JSON, a value JSON cannot hold written as its ``str``."""
    return json.dumps(report.to_json(), indent=2, default=str)
