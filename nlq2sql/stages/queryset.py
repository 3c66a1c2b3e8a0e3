"""Eval sets whose golds are v2 intents (MetricFlow queries), or none: unanswerable questions.

A line is ``{"id", "question", "gold": {MetricFlow query} | null, "answerable": bool,
"category", "pair_id", "tags"}``.  A v1 line (``gold`` with an ``intent`` key) is read too and
restated as the MetricFlow query it means, so every shipped set runs in the v2 arm without a
second copy: a breakdown or a time series does not order (its rows are compared as a
multiset), a ranking orders by its metric with its limit.  Every answerable gold must compile
and, checked against the data, return rows.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nlq2sql.errors import EvalSetError, ExcludedObjectError, SqlBuildError
from nlq2sql.inputs import json_object, read_text
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.query import MetricQuery, OrderBy
from nlq2sql.stages.evalset import CATEGORY, ID_MAX_LENGTH, resolve_path
from nlq2sql.stages.execute import Executor, rows_equal
from nlq2sql.stages.intent import Intent, canonicalise, is_ordered
from nlq2sql.stages.sqlbuild import to_query

__all__ = ["GoldProblem", "QueryCase", "QuerySet", "Upgrade", "check_query_set", "from_v1", "load_query_set",
           "upgrade_v1_set"]


class QueryCase(BaseModel):
    """One question with its v2 gold, or none when the layer cannot answer it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1, max_length=ID_MAX_LENGTH)
    question: str = Field(min_length=1, max_length=2000)
    gold: MetricQuery | None
    answerable: bool = True
    category: str
    pair_id: str | None = None
    tags: tuple[str, ...] = ()

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


def _case(obj: dict[str, Any], catalog: Catalog, path: str, line: int) -> QueryCase:
    gold = obj.get("gold")
    if isinstance(gold, dict) and "intent" in gold:
        try:
            v1 = Intent.model_validate(gold)
            obj = {**obj, "gold": from_v1(v1, catalog).model_dump(mode="json")}
        except (ValidationError, SqlBuildError) as exc:
            msg = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise EvalSetError(f"v1 gold: {msg}", path=path, line=line, field="gold") from None
    try:
        case = QueryCase.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(line)"
        raise EvalSetError(err["msg"], path=path, line=line, field=field) from None
    if not CATEGORY.match(case.category):
        raise EvalSetError(f"category {case.category!r} must be a short label", path=path, line=line,
                           field="category")
    if case.gold is not None:
        try:
            catalog.engine.compile(case.gold)
        except ExcludedObjectError as exc:  # names the exclusion and why, not MetricFlow's "unknown name"
            raise EvalSetError(f"gold: {exc}", path=path, line=line, field="gold") from None
        except SqlBuildError as exc:
            raise EvalSetError(f"gold does not compile: {exc}", path=path, line=line, field="gold") from None
    return case


def load_query_set(name_or_path: str | Path, catalog: Catalog) -> QuerySet:
    """Read and check a set (shipped name of the catalog's warehouse, or a path); EvalSetError names file and line."""
    path = resolve_path(name_or_path, catalog.name)
    text = read_text(path, "eval set")
    cases: list[QueryCase] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        obj = json_object(line, path=str(path), line=lineno, cls=EvalSetError)
        case = _case(obj, catalog, str(path), lineno)
        if case.id in seen:
            raise EvalSetError(f"duplicate id {case.id!r} (first on line {seen[case.id]})", path=str(path),
                               line=lineno, field="id")
        seen[case.id] = lineno
        cases.append(case)
    if not cases:
        raise EvalSetError("no items", path=str(path))
    name = path.stem
    return QuerySet(name=name, path=str(path), sha256=hashlib.sha256(text.encode()).hexdigest(), cases=tuple(cases))


@dataclass(frozen=True)
class GoldProblem:
    """An item whose gold fails on the data or returns no rows, and why."""

    id: str
    problem: str


def check_query_set(qs: QuerySet, catalog: Catalog, executor: Executor) -> list[GoldProblem]:
    """Problems of the golds against the data: a gold that fails or returns no rows (refused)."""
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
            problems.append(GoldProblem(case.id, "the gold returns no rows (an empty gold cannot tell "
                                                 "a right answer from a wrong one)"))
    return problems


@dataclass(frozen=True)
class Upgrade:
    """A v1 set restated as v2: its lines (written only when ``problems`` is empty)."""

    path: str
    lines: tuple[str, ...]
    problems: tuple[str, ...]
    ordered: int  # golds whose order is compared


def upgrade_v1_set(name_or_path: str | Path, wh: Any, executor: Executor) -> Upgrade:
    """Every gold of a v1 set (``wh``: the bound warehouse, so filter values are checked against its
    data) as the MetricFlow query it means, each checked to return the rows the v1 gold returns
    (in order where both order: a v1 time series is compared as a multiset in v2, as v2 runs read
    it).  Every problem is reported, not only the first."""
    from nlq2sql.stages.evalset import load_evalset
    from nlq2sql.stages.sqlbuild import build_sql

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
