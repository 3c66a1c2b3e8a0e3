"""defog's sql-eval question files → gold-SQL question lines, converted to DuckDB.

The CSV (``question, query, db_name, query_category, instructions``) states golds in PostgreSQL with
two conventions re-stated here (no shared code): ``;``-separated statements are alternatives; the
first ``{a, b, …}`` lists columns of which any non-empty subset is acceptable (``GROUP BY {}`` alike).
Each expanded statement is transpiled to DuckDB by sqlglot (types from the schema, so integer
division stays integer). ``CURRENT_DATE``/``NOW()``/``CURRENT_TIMESTAMP`` become :data:`PINNED_DATE`,
named in the question and tagged ``relative-date``, so gold rows do not depend on the run's day.
defog sorts both results before comparing, so ``ordered`` is ``False``; items it sorts by ORDER BY
columns are tagged ``defog-order``. ``instructions`` are appended after ``Instructions:`` (tag ``instructions``)."""

from __future__ import annotations

import csv
import io
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from nlq2sql.errors import InputError

__all__ = ["CSV_COLUMNS", "ORDER_WORDS", "PINNED_DATE", "Converted", "SourceRow", "convert_row", "db_names",
           "expand_braces",
           "order_sensitive", "pin_dates", "read_csv", "split_alternatives", "to_duckdb"]

#: The day every relative date is pinned to: the last change of defog's question files
#: (``data/questions_gen_postgres.csv`` and ``data/idk.csv``, 2025-02-02).
PINNED_DATE = "2025-02-02"
#: The columns a defog question file must have (``instructions`` may be absent).
CSV_COLUMNS = ("question", "query", "db_name", "query_category")
#: defog's evaluator sorts rows by the ORDER BY columns when the question uses one of these words.
ORDER_WORDS = re.compile(r"\b(order|sort|arrange)\b", re.I)
_RELATIVE = (exp.CurrentDate, exp.CurrentTimestamp, exp.CurrentDatetime)


@dataclass(frozen=True)
class SourceRow:
    """One row of a defog question file, with its 1-based line in the file."""

    line: int
    question: str
    query: str
    db_name: str
    category: str
    instructions: str = ""


@dataclass
class Converted:
    """A row converted: the question line's fields, or why it cannot be shipped."""

    row: SourceRow
    id: str
    question: str
    gold_sql: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def line(self) -> dict[str, object]:
        """The gold-SQL question line (JSON object)."""
        return {"id": self.id, "question": self.question, "gold_sql": self.gold_sql, "ordered": False,
                "category": self.row.category, "tags": self.tags}


def read_csv(text: str, source: str = "<csv>") -> list[SourceRow]:
    """A defog question file's rows; a missing column is one error naming the file."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"not a defog question file: no column {', '.join(missing)}", path=source)
    rows = []
    for rec in reader:
        rows.append(SourceRow(reader.line_num, rec["question"].strip(), rec["query"].strip(), rec["db_name"].strip(),
                              rec["query_category"].strip(), (rec.get("instructions") or "").strip()))
    return rows


def split_alternatives(query: str) -> list[str]:
    """The ``;``-separated statements of a gold, blank ones dropped (defog's own split)."""
    return [s.strip() for s in query.split(";") if s.strip()]


def expand_braces(statement: str) -> list[str]:
    """Every statement the first ``{a, b, …}`` stands for: each non-empty subset of the options in
    listed order, ``GROUP BY {}`` taking the same columns; a statement without braces is itself."""
    start = statement.find("{")
    end = statement.find("}", start + 1)
    if start == -1 or end == -1:
        return [statement]
    options = [o.strip() for o in statement[start + 1:end].split(",") if o.strip()]
    if not options:  # no column to choose: left as written (sqlglot then names the problem)
        return [statement]
    out = []
    for r in range(1, len(options) + 1):
        for combo in itertools.combinations(options, r):
            cols = ", ".join(combo)
            right = statement[end + 1:].replace("GROUP BY {}", f"GROUP BY {cols}")
            out.append(statement[:start] + cols + right)
    return out


def pin_dates(tree: exp.Expr, day: str = PINNED_DATE) -> tuple[exp.Expr, bool]:
    """``CURRENT_DATE`` → ``DATE 'day'``, ``NOW()``/``CURRENT_TIMESTAMP`` → ``TIMESTAMP 'day 00:00:00'``;
    whether anything was pinned."""
    pinned = False

    def swap(node: exp.Expr) -> exp.Expr:
        nonlocal pinned
        if isinstance(node, exp.CurrentDate):
            pinned = True
            return exp.cast(exp.Literal.string(day), exp.DType.DATE)
        if isinstance(node, _RELATIVE):
            pinned = True
            return exp.cast(exp.Literal.string(f"{day} 00:00:00"), exp.DType.TIMESTAMP)
        return node

    return tree.transform(swap), pinned


def to_duckdb(statement: str, schema: dict[str, dict[str, str]] | None = None,
              day: str = PINNED_DATE) -> tuple[str, bool]:
    """One PostgreSQL statement as DuckDB SQL (dates pinned) and whether a date was pinned.

    With ``schema`` (table → column → type) the statement's types are annotated first, so an
    integer division is written as DuckDB's integer division; a statement sqlglot cannot qualify
    against the schema is transpiled without types.  Raises ``sqlglot.errors.ParseError``."""
    tree = sqlglot.parse_one(statement, read="postgres")
    tree, pinned = pin_dates(tree, day)
    if schema and tree.find(exp.Div):
        mapping = MappingSchema(dict(schema), dialect="postgres")
        try:
            typed = annotate_types(qualify(tree.copy(), schema=mapping, dialect="postgres", quote_identifiers=False,
                                           expand_stars=False, validate_qualify_columns=False),
                                   schema=mapping, dialect="postgres")
        except sqlglot.errors.SqlglotError:
            typed = None
        if typed is not None and any(_integer_division(d) for d in typed.find_all(exp.Div)):
            tree = typed
    return tree.sql(dialect="duckdb"), pinned


def _integer_division(div: exp.Div) -> bool:
    """A PostgreSQL division of two integers (integer division there, not in DuckDB)."""
    return bool(div.args.get("typed")) and all(side.is_type(*exp.DataType.INTEGER_TYPES)
                                               for side in (div.left, div.right))


def order_sensitive(question: str, category: str) -> bool:
    """Whether defog's evaluator sorts this item's rows by the ORDER BY columns."""
    return category == "order_by" or ORDER_WORDS.search(question) is not None


def convert_row(row: SourceRow, item_id: str, schema: dict[str, dict[str, str]] | None = None,
                day: str = PINNED_DATE) -> Converted:
    """A defog row → its question line (every alternative expanded and transpiled, duplicates
    dropped in order); a statement sqlglot cannot read is a problem, the others are kept."""
    question = row.question
    tags: list[str] = []
    golds: list[str] = []
    problems: list[str] = []
    pinned_any = False
    for statement in split_alternatives(row.query):
        for expanded in expand_braces(statement):
            try:
                sql, pinned = to_duckdb(expanded, schema, day)
            except sqlglot.errors.SqlglotError as exc:
                problems.append(f"cannot read as PostgreSQL: {str(exc).splitlines()[0]}")
                continue
            pinned_any |= pinned
            if sql not in golds:
                golds.append(sql)
    if pinned_any:
        tags.append("relative-date")
        question = f"{question} (Today is {day}.)"
    if row.instructions:
        tags.append("instructions")
        question = f"{question}\nInstructions: {row.instructions}"
    if order_sensitive(row.question, row.category):
        tags.append("defog-order")
    if "{" in row.query:
        tags.append("either-column")
    return Converted(row, item_id, question, golds, tags, problems)


def db_names(rows: Iterable[SourceRow]) -> list[str]:
    """The databases a file's rows name, in first-seen order."""
    return list(dict.fromkeys(r.db_name for r in rows))
