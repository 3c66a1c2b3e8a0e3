"""Eval sets whose golds are SQL: the format of Spider, BIRD, defog's sql-eval and most query logs.

A line is ``{"id", "question", "gold_sql": str | [str, ...] | null, "answerable"?, "ordered"?,
"category"?, "tags"?, "pair_id"?, "source_sql"?, "source_dialect"?}``. A list gives alternatives
(right when the rows of ANY match); ``null`` with ``answerable: false`` is a question to abstain on;
``source_sql``/``source_dialect`` keep the gold as first stated, before transpiling (never run).
When absent, from the first gold as sqlglot (DuckDB) reads it: ``ordered`` = an outermost
``ORDER BY``; ``category`` (:func:`derive_category`) = the first of ``time_series`` (a date
truncation or extraction in GROUP BY), ``top_n`` (outer ORDER BY with LIMIT), ``breakdown``,
``aggregate``, ``listing``; ``unanswerable`` for an unanswerable line. Lines mixing ``gold_sql`` and
``gold`` are refused; every problem is reported at once (:class:`~nlq2sql.errors.EvalSetProblems`).
The SQL runs on the run's warehouse with ``search_path`` from :func:`layer_search_path` (or ``--search-path``)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlglot
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlglot import exp

from nlq2sql.errors import EvalSetError, Problems
from nlq2sql.inputs import json_object, read_text
from nlq2sql.stages.evalset import CATEGORY, ID_MAX_LENGTH, resolve_path

if TYPE_CHECKING:
    from metricflow_semantic_interfaces.implementations.semantic_manifest import PydanticSemanticManifest

__all__ = ["GOLD_SQL_KEY", "MAX_ALTERNATIVES", "SEARCH_PATH_ENTRY", "GoldSqlCase",
           "GoldSqlLine", "GoldSqlSet", "derive_category", "derive_ordered", "is_gold_sql_set",
           "layer_search_path", "load_gold_sql_set", "parse_search_path", "resolve_search_path", "tie_columns"]

GOLD_SQL_KEY = "gold_sql"
#: Most acceptable alternatives one item may list.
MAX_ALTERNATIVES = 16
MAX_SQL_CHARS = 20_000
#: One schema of a search path: a plain identifier (nothing DuckDB would read as more than a name).
SEARCH_PATH_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
#: Functions that bucket or extract a date: a GROUP BY key made by one makes a time series.
_DATE_FUNCS = frozenset({"date_trunc", "datetrunc", "time_bucket", "strftime", "date_part", "datepart",
                         "extract", "year", "month", "quarter", "week", "yearweek", "day", "dayofmonth",
                         "timestamp_trunc", "datetime_trunc", "trunc"})
_DATE_NODES = tuple(c for c in (getattr(exp, n, None) for n in (
    "DateTrunc", "TimestampTrunc", "DatetimeTrunc", "TimeTrunc", "Extract", "Year", "Month", "Quarter", "Week",
    "Day", "DayOfMonth", "TimeToStr")) if isinstance(c, type))


class GoldSqlLine(BaseModel):
    """One line of a gold-SQL set as written (its JSON Schema is ``schemas/evalset-gold-sql-line.schema.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="GoldSqlLine")
    id: str = Field(min_length=1, max_length=ID_MAX_LENGTH)
    question: str = Field(min_length=1, max_length=2000)
    gold_sql: str | list[str] | None = Field(
        description="The gold DuckDB SELECT, or a list of acceptable alternatives (right when the answer returns "
                    "the rows of any one); null for an unanswerable question (answerable false).")
    answerable: bool = True
    ordered: bool | None = Field(default=None, description="Compare rows in order; absent: whether the (first) "
                                 "gold SQL has an outermost ORDER BY.")
    category: str | None = Field(default=None, max_length=32, description="A reporting label; absent: derived "
                                 "from the SQL's shape (time_series, top_n, breakdown, aggregate, listing).")
    tags: list[str] = Field(default_factory=list, max_length=32)
    pair_id: str | None = Field(default=None, max_length=ID_MAX_LENGTH)
    source_sql: str | list[str] | None = Field(default=None, description="The gold as the source benchmark "
                                               "stated it, before transpiling to DuckDB (recorded, never run).")
    source_dialect: str | None = Field(default=None, max_length=32, description="sqlglot's name of source_sql's "
                                       "dialect.")

    @field_validator("gold_sql", "source_sql")
    @classmethod
    def _sql_texts(cls, v: str | list[str] | None) -> str | list[str] | None:
        texts = [v] if isinstance(v, str) else v or []
        if isinstance(v, list) and not 1 <= len(v) <= MAX_ALTERNATIVES:
            raise ValueError(f"a list of 1 to {MAX_ALTERNATIVES} SQL statements")
        for t in texts:
            if not t.strip():
                raise ValueError("an empty SQL statement")
            if len(t) > MAX_SQL_CHARS:
                raise ValueError(f"a SQL statement longer than {MAX_SQL_CHARS} characters")
        return v

    @model_validator(mode="after")
    def _gold_iff_answerable(self) -> GoldSqlLine:
        if self.answerable != (self.gold_sql is not None):
            raise ValueError("an answerable item has gold_sql; an unanswerable one has gold_sql null "
                             "and answerable false")
        return self


class GoldSqlCase(BaseModel):
    """One question with its gold SQL (alternatives in order), its ordering and category resolved."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    question: str
    gold_sql: tuple[str, ...] | None
    answerable: bool = True
    ordered: bool = False
    category: str
    pair_id: str | None = None
    tags: tuple[str, ...] = ()
    source_sql: tuple[str, ...] | None = None
    source_dialect: str | None = None


@dataclass(frozen=True)
class GoldSqlSet:
    name: str
    path: str
    sha256: str
    cases: tuple[GoldSqlCase, ...]


def _parse(sql: str) -> exp.Expression | None:
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
        return tree if isinstance(tree, exp.Expression) else None
    except Exception:  # noqa: BLE001 — an unparsable gold is reported by `evalset check`, not here
        return None


def derive_ordered(sql: str) -> bool:
    """Whether the statement orders its result: an outermost ORDER BY (sqlglot, DuckDB dialect)."""
    tree = _parse(sql)
    return tree is not None and tree.args.get("order") is not None


def _outer_select(tree: exp.Expression) -> exp.Select | None:
    node: exp.Expression = tree
    while isinstance(node, exp.Subquery):
        node = node.this
    return node if isinstance(node, exp.Select) else None


def _is_aggregate(node: exp.Expression) -> bool:
    """An aggregate function outside a window (``SUM(x) OVER ()`` is a per-row value) and outside a subquery."""
    for n in node.walk():
        if not isinstance(n, exp.AggFunc):
            continue
        p: exp.Expr | None = n
        while p is not node and p is not None:
            p = p.parent
            if isinstance(p, exp.Window | exp.Subquery | exp.Select):
                break
        else:
            return True
    return False


def _group_keys(select: exp.Select) -> list[exp.Expression]:
    """The GROUP BY keys, a select alias or an ordinal replaced by the expression it names."""
    group = select.args.get("group")
    if group is None:
        return []
    projections = select.expressions
    if group.args.get("all"):  # GROUP BY ALL: every projection that is not an aggregate
        return [p.this if isinstance(p, exp.Alias) else p for p in projections if not _is_aggregate(p)]
    aliases = {p.alias.lower(): p.this for p in projections if isinstance(p, exp.Alias) and p.alias}
    keys: list[exp.Expression] = []
    for key in group.expressions:
        if isinstance(key, exp.Literal) and key.is_int and 1 <= int(key.this) <= len(projections):
            target = projections[int(key.this) - 1]
            keys.append(target.this if isinstance(target, exp.Alias) else target)
        elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
            keys.append(aliases[key.name.lower()])
        else:
            keys.append(key)
    return keys


def _is_date_bucket(node: exp.Expression) -> bool:
    for n in node.walk():
        if _DATE_NODES and isinstance(n, _DATE_NODES):
            return True
        if isinstance(n, exp.Func) and (n.name if isinstance(n, exp.Anonymous) else n.sql_name()).lower() \
                in _DATE_FUNCS:
            return True
    return False


def derive_category(sql: str) -> str:
    """The category a gold SQL's shape gives (first rule that holds): ``time_series`` (a GROUP BY
    key is a date truncation or extraction), ``top_n`` (outermost ORDER BY and LIMIT),
    ``breakdown`` (GROUP BY with an aggregate), ``aggregate`` (an aggregate without GROUP BY),
    else ``listing`` (a statement sqlglot cannot read is a listing too)."""
    tree = _parse(sql)
    if tree is None:
        return "listing"
    select = _outer_select(tree)
    if select is None:  # a UNION and the like: ranked when ordered and cut, else a listing
        return "top_n" if tree.args.get("order") is not None and tree.args.get("limit") is not None else "listing"
    keys = _group_keys(select)
    if any(_is_date_bucket(k) for k in keys):
        return "time_series"
    if select.args.get("order") is not None and select.args.get("limit") is not None:
        return "top_n"
    aggregated = any(_is_aggregate(p) for p in select.expressions)
    if keys and aggregated:
        return "breakdown"
    if aggregated:
        return "aggregate"
    return "listing"


def tie_columns(sql: str) -> tuple[int, ...]:
    """Output column indexes of the outermost ORDER BY's keys (rows tied on all of them may come
    in any order); () when a key is not an output column (no tie is then relaxed)."""
    tree = _parse(sql)
    order = tree.args.get("order") if tree is not None else None
    if order is None or tree is None:
        return ()
    names = [str(n).lower() for n in getattr(tree, "named_selects", [])]
    out: list[int] = []
    for o in order.expressions:
        key = o.this if isinstance(o, exp.Ordered) else o
        if isinstance(key, exp.Literal) and key.is_int and 1 <= int(key.this) <= len(names):
            out.append(int(key.this) - 1)
        elif isinstance(key, exp.Column) and key.name.lower() in names:
            out.append(names.index(key.name.lower()))
        else:
            return ()
    return tuple(out)


def _line_kind(obj: dict[str, Any]) -> str:
    return "gold_sql" if GOLD_SQL_KEY in obj else "gold" if "gold" in obj else "other"


def is_gold_sql_set(name_or_path: str | Path, warehouse_name: str) -> bool:
    """Whether a set's lines carry ``gold_sql`` (read from its first non-blank line that is a JSON
    object; a file whose lines mix kinds is refused by :func:`load_gold_sql_set`).  A shipped name
    is resolved in the warehouse's folder; a file that cannot be read is left to its loader."""
    try:
        path = resolve_path(name_or_path, warehouse_name)
        if not path.is_file():  # a FIFO, a device, a folder: never opened here (the loader refuses them)
            return False
        with open(path, "rb") as fh:
            for raw in fh:
                text = raw.decode("utf-8", "replace").lstrip("\ufeff").strip()
                if not text:
                    continue
                try:
                    import json

                    obj = json.loads(text)
                except ValueError:
                    return False
                return isinstance(obj, dict) and GOLD_SQL_KEY in obj
    except (OSError, EvalSetError):
        return False
    return False


def _texts(v: str | list[str] | None) -> tuple[str, ...] | None:
    return None if v is None else (v,) if isinstance(v, str) else tuple(v)


def _case(line: GoldSqlLine) -> GoldSqlCase:
    golds = _texts(line.gold_sql)
    first = golds[0] if golds else None
    ordered = line.ordered if line.ordered is not None else first is not None and derive_ordered(first)
    category = line.category or (derive_category(first) if first is not None else "unanswerable")
    return GoldSqlCase(id=line.id, question=line.question, gold_sql=golds, answerable=line.answerable,
                       ordered=ordered, category=category, pair_id=line.pair_id, tags=tuple(line.tags),
                       source_sql=_texts(line.source_sql), source_dialect=line.source_dialect)


def load_gold_sql_set(name_or_path: str | Path, warehouse_name: str) -> GoldSqlSet:
    """Read and check a gold-SQL set (a shipped name of the warehouse, or a path): every problem of
    the file at once (:class:`~nlq2sql.errors.EvalSetProblems`).  The gold SQL is run by ``evalset check`` and by
    scoring (:mod:`nlq2sql.answers.sql.gold`), not here."""
    path = resolve_path(name_or_path, warehouse_name)
    text = read_text(path, "eval set")
    where = str(path)
    problems = Problems(where)  # every problem of the file, reported together
    cases: list[GoldSqlCase] = []
    seen: dict[str, int] = {}
    first_kind: tuple[str, int] | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json_object(raw, path=where, line=lineno, cls=EvalSetError)
        except EvalSetError as exc:
            problems.add(exc)
            continue
        kind = _line_kind(obj)
        if first_kind is None:
            first_kind = (kind, lineno)
        if kind != "gold_sql":
            said = ("a 'gold' key (an intent or MetricFlow query)" if kind == "gold"
                    else "no 'gold_sql' key")
            problems.add(EvalSetError(f"{said} in a gold-SQL set (line {first_kind[1]} has gold_sql); a set "
                                         "mixes no kinds of gold", path=where, line=lineno, field=GOLD_SQL_KEY))
            continue
        try:
            line = GoldSqlLine.model_validate(obj)
        except ValidationError as exc:
            for err in exc.errors():
                field = ".".join(str(p) for p in err["loc"]) or "(line)"
                problems.add(EvalSetError(err["msg"], path=where, line=lineno, field=field))
            continue
        if line.category is not None and not CATEGORY.match(line.category):
            problems.add(EvalSetError(f"category {line.category!r} must be a short label (letters, digits, "
                                         "_ . -)", path=where, line=lineno, field="category"))
            continue
        if line.id in seen:
            problems.add(EvalSetError(f"duplicate id {line.id!r} (first on line {seen[line.id]})", path=where,
                                         line=lineno, field="id"))
            continue
        seen[line.id] = lineno
        cases.append(_case(line))
    if not cases and not problems:
        problems.add(EvalSetError("no items", path=where))
    problems.raise_any()
    return GoldSqlSet(name=path.stem, path=where, sha256=hashlib.sha256(text.encode()).hexdigest(),
                      cases=tuple(cases))


def parse_search_path(text: str, option: str = "--search-path") -> tuple[str, ...]:
    """``a,b`` → ("a", "b"): each a plain identifier (letters, digits, _), so the value can only
    name schemas -- never quote its way into the ``SET`` that applies it."""
    entries = tuple(e.strip() for e in text.split(","))
    bad = [e for e in entries if not SEARCH_PATH_ENTRY.match(e)]
    if not entries or bad:
        raise EvalSetError(f"schema names separated by commas, each a plain identifier (letters, digits, _); "
                           f"refused: {', '.join(repr(b) for b in bad) or repr(text)}", field=option)
    return tuple(dict.fromkeys(entries))


def layer_search_path(manifest: PydanticSemanticManifest) -> tuple[str, ...]:
    """The schemas a semantic layer's relations live in (``node_relation.schema_name``), the one
    holding most of its semantic models first (dbt's target schema), the others in order of
    first appearance; entries that are not plain identifiers are left out."""
    counts: dict[str, int] = {}
    for sm in getattr(manifest, "semantic_models", ()):
        schema = getattr(getattr(sm, "node_relation", None), "schema_name", None)
        if isinstance(schema, str) and SEARCH_PATH_ENTRY.match(schema):
            counts[schema] = counts.get(schema, 0) + 1
    if not counts:
        return ("main",)
    order = list(counts)
    main = max(order, key=lambda s: (counts[s], -order.index(s)))
    return (main, *(s for s in order if s != main))


def resolve_search_path(manifest: PydanticSemanticManifest, override: Sequence[str] | None) -> tuple[str, ...]:
    """The search path a run uses: ``--search-path`` when given (checked by :func:`parse_search_path`),
    else the layer's (:func:`layer_search_path`)."""
    return tuple(override) if override else layer_search_path(manifest)
