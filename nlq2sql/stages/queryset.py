"""Eval sets whose golds are v2 intents (MetricFlow queries), or none: unanswerable questions.

A line is ``{"id", "question", "gold": {MetricFlow query} | null, "answerable": bool, "category",
"pair_id", "tags"}``. A v1 line is restated as the query it means (a ranking orders by its metric
with its limit; otherwise rows compare as a multiset), so every shipped set runs in the v2 arm.
Every answerable gold must compile and return rows on the data."""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nlq2sql.errors import EvalSetError, ExcludedObjectError, Problems, SqlBuildError
from nlq2sql.inputs import json_object, read_text
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.query import MetricQuery, OrderBy
from nlq2sql.stages.evalset import (
    CATEGORY,
    FORMATS_DOC,
    ID_MAX_LENGTH,
    category_of_kind,
    load_evalset,
    resolve_path,
    unknown_value,
)
from nlq2sql.stages.execute import Executor, rows_equal
from nlq2sql.stages.goldsql import GOLD_SQL_KEY
from nlq2sql.stages.intent import Intent, canonicalise, is_ordered
from nlq2sql.stages.semantic_tools import name_problems
from nlq2sql.stages.sqlbuild import build_sql, to_query

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["GoldProblem", "QueryCase", "QuerySet", "Upgrade", "check_query_set", "from_v1", "load_query_set",
           "scan_query_set", "upgrade_v1_set"]


class QueryCase(BaseModel):
    """One question with its v2 gold, or none when the layer cannot answer it (its JSON Schema is
    ``schemas/evalset-v2-line.schema.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="QueryCase")
    id: str = Field(min_length=1, max_length=ID_MAX_LENGTH)
    question: str = Field(min_length=1, max_length=2000)
    gold: MetricQuery | None = Field(description="The MetricFlow query that answers the question; null for a "
                                     "question the layer cannot answer (answerable false).")
    answerable: bool = True
    category: str = Field(default="", description="A reporting label (per-category tables group by it); absent or "
                          "null: unanswerable for a null gold, else the query's kind (top_n for an ordered query "
                          "with a limit, time_series when grouped by metric_time, listing with no metric, else "
                          "breakdown).")
    pair_id: str | None = None
    tags: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _derive_category(cls, data: JsonValue) -> JsonValue:
        if isinstance(data, dict) and data.get("category") is None:
            gold = data.get("gold", ...)
            category = "unanswerable" if gold is None else ""
            if isinstance(gold, dict):
                with contextlib.suppress(ValidationError):  # the gold's own problems: the model's validation
                    category = category_of_kind(MetricQuery.model_validate(gold).kind)
            data = {**data, "category": category}
        return data

    @model_validator(mode="after")
    def _gold_iff_answerable(self) -> QueryCase:
        if self.answerable != (self.gold is not None):
            raise ValueError("an answerable item has a gold query; an unanswerable one has gold null")
        return self


@dataclass(frozen=True)
class QuerySet:
    name: str
    path: str
    sha256: str
    cases: tuple[QueryCase, ...]
    lines: tuple[int, ...] = ()  # the line of each case, where the loader kept them


def from_v1(intent: Intent, catalog: Catalog) -> MetricQuery:
    """The MetricFlow query a v1 gold means: a ranking orders by its metric (with its limit), a
    limited breakdown by its dimension; a breakdown or a time series does not order."""
    q = to_query(canonicalise(intent), catalog)
    if intent.intent == "top_n_by_metric" or intent.order is not None:
        keep: tuple[OrderBy, ...] = tuple(q.order_by or ())[:1]
        return q.model_copy(update={"order_by": keep})
    if q.limit is not None:  # "the first ten products": v1 cut them in the dimension's order
        return q
    return q.model_copy(update={"order_by": None})


_V1_ONLY = frozenset({"metric", "dimension", "time_grain", "filters", "order"})


def _case(obj: dict[str, Any], catalog: Catalog, path: str, line: int
          ) -> tuple[QueryCase | None, list[EvalSetError]]:
    """A line's case (None when it has problems) and every problem of it."""
    def problem(msg: str, field: str | None = "gold") -> tuple[None, list[EvalSetError]]:
        return None, [EvalSetError(msg, path=path, line=line, field=field)]

    gold = obj.get("gold")
    if GOLD_SQL_KEY in obj:
        return problem("a gold-SQL line (gold_sql) in a set of MetricFlow queries; a set mixes no kinds of gold "
                       f"(see {FORMATS_DOC})", GOLD_SQL_KEY)
    if isinstance(gold, dict) and "intent" in gold:
        try:
            v1 = Intent.model_validate(gold)
            obj = {**obj, "gold": from_v1(v1, catalog).model_dump(mode="json")}
        except (ValidationError, SqlBuildError) as exc:
            msg = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            return problem(f"v1 gold: {msg}")
    elif isinstance(gold, dict) and set(gold) & _V1_ONLY and not set(gold) & {"metrics", "where", "order_by"}:
        return problem("looks like a v1 intent without its 'intent' key (breakdown, top_n_by_metric or "
                       "time_series): add it, or write the gold as a MetricFlow query (metrics, group_by, where, "
                       f"order_by, limit); see {FORMATS_DOC}")
    try:
        case = QueryCase.model_validate(obj)
    except ValidationError as exc:
        return None, [EvalSetError(err["msg"], path=path, line=line, field=".".join(str(p) for p in err["loc"])
                                   or "(line)") for err in exc.errors()]
    problems: list[EvalSetError] = []
    if not CATEGORY.match(case.category):
        problems.append(EvalSetError(f"category {case.category!r} must be a short label (letters, digits, _ . -)",
                                     path=path, line=line, field="category"))
    if case.gold is not None:
        try:
            catalog.engine.compile(case.gold)
        except ExcludedObjectError as exc:  # names the exclusion and why, not MetricFlow's "unknown name"
            problems.append(EvalSetError(f"gold: {exc}", path=path, line=line, field="gold"))
        except SqlBuildError as exc:
            names = name_problems(catalog, case.gold)
            msg = "; ".join(names) if names else " ".join(str(exc).split())
            problems.append(EvalSetError(f"gold does not compile: {msg}", path=path, line=line, field="gold"))
    return (None if problems else case), problems


def scan_query_set(name_or_path: str | Path, catalog: Catalog, problems: Problems | None = None) -> QuerySet:
    """The sound items of a set (shipped name of the catalog's warehouse, or a path) with their
    lines; every problem of the others goes to ``problems`` -- raised together at the end when
    none is given (:class:`~nlq2sql.errors.EvalSetProblems`, file, line and field each)."""
    path = resolve_path(name_or_path, catalog.name)
    text = read_text(path, "eval set")
    where = str(path)
    found = problems if problems is not None else Problems(where)
    cases: list[QueryCase] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json_object(line, path=where, line=lineno, cls=EvalSetError)
        except EvalSetError as exc:
            found.add(exc)
            continue
        case, bad = _case(obj, catalog, where, lineno)
        for p in bad:
            found.add(p)
        if case is None:
            continue
        if case.id in seen:
            found.add(EvalSetError(f"duplicate id {case.id!r} (first on line {seen[case.id]})", path=where,
                                   line=lineno, field="id"))
            continue
        seen[case.id] = lineno
        cases.append(case)
        lines.append(lineno)
    if not cases and not found:
        found.add(EvalSetError("no items", path=where))
    if problems is None:
        found.raise_any()
    return QuerySet(name=path.stem, path=where, sha256=hashlib.sha256(text.encode()).hexdigest(), cases=tuple(cases),
                    lines=tuple(lines))


def load_query_set(name_or_path: str | Path, catalog: Catalog) -> QuerySet:
    """Read and check a set (shipped name of the catalog's warehouse, or a path); every problem of
    the file is raised together (:class:`~nlq2sql.errors.EvalSetProblems`)."""
    return scan_query_set(name_or_path, catalog)


@dataclass(frozen=True)
class GoldProblem:
    """An item whose gold fails on the data or returns no rows, and why."""

    id: str
    problem: str


def _unknown_values(q: MetricQuery, wh: Warehouse) -> list[str]:
    """Which values of the query's equality filters (``eq``/``in`` on a categorical dimension)
    the data does not hold, with what it does (:func:`~.evalset.unknown_value`)."""
    out: list[str] = []
    for i, w in enumerate(q.where or ()):
        if w.op not in ("eq", "in"):
            continue
        dim = wh.catalog.dimension_of(w.field)
        if dim is None:
            continue
        try:
            known = wh.values(dim.name)
        except KeyError:
            continue
        for v in w.values:
            if known is not None and str(v) not in known:
                out.append(f"where.{i} ({w.field}): " + unknown_value(wh, dim.name, v, shown=w.field))
    return out


def check_query_set(qs: QuerySet, catalog: Catalog, executor: Executor, wh: Warehouse | None = None
                    ) -> list[GoldProblem]:
    """Problems of the golds against the data: a gold that fails or returns no rows (refused); given
    the bound warehouse, an empty gold says which filter values the data does not hold."""
    problems: list[GoldProblem] = []
    for case in qs.cases:
        if case.gold is None:
            continue
        try:
            rows = executor.run(catalog.engine.compile(case.gold))
        except Exception as exc:  # noqa: BLE001 — any failure of a gold is a reported problem
            problems.append(GoldProblem(case.id, str(exc)))
            continue
        if not rows:
            why = _unknown_values(case.gold, wh) if wh is not None else []
            problems.append(GoldProblem(case.id, "the gold returns no rows" + (
                f": {'; '.join(why)}" if why else " (an empty gold cannot tell a right answer from a wrong one)")))
    return problems


@dataclass(frozen=True)
class Upgrade:
    """A v1 set restated as v2: its lines (written only when ``problems`` is empty)."""

    path: str
    lines: tuple[str, ...]
    problems: tuple[str, ...]
    ordered: int  # golds whose order is compared


def upgrade_v1_set(name_or_path: str | Path, wh: Warehouse, executor: Executor) -> Upgrade:
    """Every gold of a v1 set (``wh``: the bound warehouse, so filter values are checked against its
    data) as the MetricFlow query it means, each checked to return the rows the v1 gold returns
    (in order where both order: a v1 time series is compared as a multiset in v2, as v2 runs read
    it).  Every problem is reported, not only the first."""

    es = load_evalset(name_or_path, wh)
    cat = wh.catalog
    lines: list[str] = []
    problems: list[str] = []
    ordered = 0
    for case in es.cases:
        q = from_v1(case.gold, cat)
        both = q.ordered and is_ordered(case.gold)
        try:
            v1_rows = executor.run(build_sql(canonicalise(case.gold), cat))
            same = rows_equal(executor.run(cat.engine.compile(q)), v1_rows, ordered=both)
        except Exception as exc:  # noqa: BLE001 — any failure of a gold is a reported problem
            problems.append(f"{case.id}: {exc}")
            continue
        if not same:
            problems.append(f"{case.id}: the v2 query's rows differ from the v1 gold's")
            continue
        ordered += both
        new = QueryCase(id=case.id, question=case.question, gold=q, answerable=True, category=case.category,
                        pair_id=case.pair_id, tags=case.tags)
        dump = new.model_dump(mode="json", exclude_defaults=True)
        head = {k: dump.pop(k) for k in ("id", "question", "gold")}
        lines.append(json.dumps(head | {"answerable": True} | dump, ensure_ascii=False))
    return Upgrade(path=es.path, lines=tuple(lines), problems=tuple(problems), ordered=ordered)
