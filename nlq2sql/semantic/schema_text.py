"""The warehouse as the SQL arm's prompt sees it: the tables and columns the semantic layer reads.

Tables, columns with DuckDB types, the layer's descriptions, joins (foreign entity → the model where
it is primary), a few known values and each metric's computation, read from the catalog and data in
a fixed order, so one warehouse always gives the same bytes (prompts are cached and compared). In
the semantic layer so the prompt stage renders it without importing the SQL answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp

from nlq2sql.semantic.binding import PROMPT_VALUES_MAX, Warehouse
from nlq2sql.semantic.catalog import Catalog

if TYPE_CHECKING:
    from metricflow_semantic_interfaces.implementations.elements.measure import PydanticMeasure
    from metricflow_semantic_interfaces.implementations.metric import PydanticMetric

__all__ = ["ColumnInfo", "Relationship", "TableInfo", "describe_tables", "relationships", "schema_text"]


@dataclass
class ColumnInfo:
    name: str
    type: str
    notes: list[str] = field(default_factory=list)
    values: tuple[str, ...] | None = None


@dataclass
class TableInfo:
    name: str
    model: str
    description: str
    columns: list[ColumnInfo]
    measures: list[str]


@dataclass(frozen=True, order=True)
class Relationship:
    """``table.column`` (a foreign entity) → ``ref_table.ref_column`` (where that entity is primary)."""

    table: str
    column: str
    ref_table: str
    ref_column: str
    entity: str


def _value(x: object) -> str:
    return str(getattr(x, "value", x)).lower()


def _columns_of(expr: str) -> list[str]:
    """Column names an expression reads (a bare name reads itself)."""
    if expr.isidentifier():
        return [expr]
    try:
        tree = sqlglot.parse_one(expr, read="duckdb")
    except Exception:  # noqa: BLE001 — an expression sqlglot cannot read contributes no column names
        return []
    return sorted({c.name for c in tree.find_all(exp.Column)})


def _db_columns(warehouse: Warehouse, table: str) -> list[tuple[str, str]]:
    rows = warehouse.connect().execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = $1 "
        "AND table_schema = 'main' ORDER BY ordinal_position", [table]).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _agg(m: PydanticMeasure) -> str:
    agg, expr = _value(m.agg), m.expr or m.name
    if agg == "count_distinct":
        return f"COUNT(DISTINCT {expr})"
    if agg == "sum_boolean":
        return f"SUM(CASE WHEN {expr} THEN 1 ELSE 0 END)"
    if agg == "percentile":
        p = getattr(m.agg_params, "percentile", None)
        disc = getattr(m.agg_params, "use_discrete_percentile", False)
        return f"{'QUANTILE_DISC' if disc else 'QUANTILE_CONT'}({expr}, {p})"
    if agg == "average":
        return f"AVG({expr})"
    return f"{agg.upper()}({expr})"


def relationships(catalog: Catalog) -> list[Relationship]:
    """Every join the layer declares: a foreign entity's column → the primary (or unique) entity's."""
    primary: dict[str, tuple[str, str]] = {}
    for sm in catalog.manifest.semantic_models:
        for e in sm.entities:
            if _value(e.type) in ("primary", "unique", "natural") and e.name not in primary:
                primary[e.name] = (sm.node_relation.alias, e.expr or e.name)
    out: set[Relationship] = set()
    for sm in catalog.manifest.semantic_models:
        for e in sm.entities:
            if _value(e.type) == "foreign" and e.name in primary:
                ref_table, ref_col = primary[e.name]
                out.add(Relationship(sm.node_relation.alias, e.expr or e.name, ref_table, ref_col, e.name))
    return sorted(out)


def describe_tables(catalog: Catalog, warehouse: Warehouse) -> list[TableInfo]:
    """The tables the layer reads, each with the columns it reads (DuckDB types, what the layer says
    about them, known values of small categorical ones) and its measures; sorted by table name.  A
    partial layer is described whole (less the relations the database lacks): what data problems
    exclude from the query vocabulary are still columns SQL may read."""
    known: dict[tuple[str, str], tuple[str, ...]] = {}
    for d in catalog.dimensions.values():
        vals = warehouse.values(d.name)
        if vals is not None and 0 < len(vals) <= PROMPT_VALUES_MAX and d.expr.isidentifier():
            known[(d.table, d.expr.lower())] = vals
    tables: list[TableInfo] = []
    manifest = catalog.whole if catalog.whole is not None else catalog.manifest  # a column all NULL is still one
    for sm in sorted(manifest.semantic_models, key=lambda s: (s.node_relation.alias, s.name)):
        table = sm.node_relation.alias
        cols = {n.lower(): ColumnInfo(n, t) for n, t in _db_columns(warehouse, table)}
        if not cols:  # a relation the database lacks (excluded from the layer): nothing to describe
            continue
        read: set[str] = set()

        def note(expr: str, text: str, cols: dict[str, ColumnInfo] = cols, read: set[str] = read) -> None:
            for c in _columns_of(expr):
                info = cols.get(c.lower())
                if info is not None:
                    read.add(c.lower())
                    if text and text not in info.notes:
                        info.notes.append(text)

        for e in sm.entities:
            kind = _value(e.type)
            expr = e.expr or e.name
            key = "key" if kind in ("primary", "unique", "natural") else "reference"
            text = f"{kind} {key} ({e.name})" if expr.isidentifier() else f"{kind} {key} {e.name} = {expr}"
            note(expr, text)
        for d in sm.dimensions:
            expr = d.expr or d.name
            desc = f": {d.description.rstrip('.')}" if d.description else ""
            if _value(d.type) == "time":
                grain = _value(getattr(d.type_params, "time_granularity", "day") or "day")
                note(expr, f"time dimension {d.name} ({grain}){desc}")
            else:
                label = d.name if expr == d.name else f"{d.name} = {expr}"
                note(expr, f"dimension {label}{desc}" if not expr.isidentifier() or expr != d.name or desc else "")
        measures: list[str] = []
        for m in sm.measures:
            note(m.expr or m.name, "")
            desc = f" — {m.description.rstrip('.')}" if m.description else ""
            measures.append(f"{m.name} = {_agg(m)}{desc}")
        for (t, col), vals in known.items():
            if t == table and col in cols:
                cols[col].values = vals
                read.add(col)
        columns = [c for key, c in cols.items() if key in read]
        tables.append(TableInfo(table, sm.name, (sm.description or "").strip(), columns, measures))
    return tables


def _metric_line(m: PydanticMetric) -> str:
    tp, kind = m.type_params, _value(m.type)
    head = f"- {m.name}" + (f" ({m.label})" if m.label and m.label != m.name else "")
    if m.description:
        head += f": {m.description.rstrip('.')}"
    if kind == "simple" and tp.measure is not None:
        how = f"measure {tp.measure.name}"
    elif kind == "ratio" and tp.numerator is not None and tp.denominator is not None:
        how = f"{tp.numerator.name} / {tp.denominator.name} (NULL when the denominator is 0)"
    elif kind == "derived":
        inputs = ", ".join(f"{i.alias or i.name}" + (f" = {i.name}" if i.alias else "")
                           + (f" offset {i.offset_window.count} {i.offset_window.granularity}"
                              if i.offset_window else "") for i in tp.metrics or ())
        how = f"{tp.expr} where {inputs}"
    elif kind == "cumulative":
        ctp = getattr(tp, "cumulative_type_params", None)
        window = getattr(ctp, "window", None) or tp.window
        grain = getattr(ctp, "grain_to_date", None) or tp.grain_to_date
        base = tp.measure.name if tp.measure is not None else "?"
        how = f"running total of {base}" + (f" over {window.count} {window.granularity}" if window else
                                            f" from the start of each {grain}" if grain else " over all time")
    else:
        how = kind
    filters = getattr(m.filter, "where_filters", None) or []
    if filters:
        how += " where " + " and ".join(f.where_sql_template.strip() for f in filters)
    return f"{head} [{kind}: {how}]"


def schema_text(catalog: Catalog, warehouse: Warehouse) -> str:
    """The prompt text: tables and columns (types, notes, values), relationships, metrics."""
    lines: list[str] = ["Tables (DuckDB; schema main):"]
    for t in describe_tables(catalog, warehouse):
        lines.append(f"{t.name}" + (f" — {t.description.rstrip('.')}" if t.description else ""))
        for c in t.columns:
            extra = "; ".join(c.notes)
            if c.values:
                extra += ("; " if extra else "") + "values: " + ", ".join(c.values)
            lines.append(f"  {c.name} {c.type}" + (f" — {extra}" if extra else ""))
        if t.measures:
            lines.append("  measures: " + "; ".join(t.measures))
    rels = relationships(catalog)
    if rels:
        lines.append("Relationships (foreign → primary):")
        lines += [f"- {r.table}.{r.column} → {r.ref_table}.{r.ref_column}" for r in rels]
    lines.append("Metrics (how the semantic layer computes them):")
    lines += [_metric_line(m) for m in sorted(catalog.manifest.metrics, key=lambda m: m.name)]
    if warehouse.years:
        lines.append(f"Years in the data: {', '.join(warehouse.years)}")
    return "\n".join(lines)
