"""The ``sql-grammar`` answer's constraint: a SQL-subset grammar generated from the warehouse.

Sent as ``structured_outputs: {"grammar": …}``, it makes a table or column outside the warehouse
impossible *in generation* (every column is ``table.column`` of a real pair). The subset is what a
metric question needs: SELECT expressions and aggregates (``AS`` alias), FROM with JOIN … ON, WHERE
(comparisons, IN, BETWEEN, AND, OR), GROUP BY, ORDER BY, LIMIT, string/number/DATE literals, or
``{"unanswerable": "…"}``; spacing fixed as the solved examples are written (:mod:`.solved`).
Syntax is xgrammar's EBNF (``root ::= …``; vLLM answers HTTP 400 to a grammar it cannot parse). The
text is deterministic per warehouse, so its sha256 identifies it in the manifest."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.semantic.schema_text import describe_tables

__all__ = ["AGGREGATES", "CAST_TYPES", "FUNCTIONS", "GRAINS", "SqlGrammar", "check_compiles", "grammar_text",
           "sql_grammar"]

AGGREGATES = ("SUM", "AVG", "MIN", "MAX", "COUNT")
CAST_TYPES = ("DOUBLE", "DECIMAL(18, 2)", "BIGINT", "INTEGER", "DATE", "TIMESTAMP", "VARCHAR")
GRAINS = ("day", "week", "month", "quarter", "year")
#: One-argument functions a metric question may need (date parts, names of days and months).
FUNCTIONS = ("YEAR", "QUARTER", "MONTH", "DAY", "DAYNAME", "MONTHNAME", "DAYOFWEEK", "LOWER", "UPPER", "ABS")

#: The rules that do not depend on the warehouse (``column`` and ``table`` are generated).
_FIXED = r"""
root ::= select | abstain
abstain ::= "{\"unanswerable\": \"" [^"\\\n]* "\"}"
select ::= "SELECT " distinct? select_list " FROM " table join* where? group? order? limit?
distinct ::= "DISTINCT "
select_list ::= select_item (", " select_item)*
select_item ::= expr (" AS " alias)?
alias ::= [a-z_] [a-z0-9_]*
join ::= " " join_kind? "JOIN " table " ON " column " = " column
join_kind ::= "LEFT " | "INNER "
where ::= " WHERE " cond
group ::= " GROUP BY " expr (", " expr)*
order ::= " ORDER BY " order_item (", " order_item)*
order_item ::= (expr | position) (" DESC" | " ASC")?
position ::= [1-9] [0-9]?
limit ::= " LIMIT " [1-9] [0-9]*
cond ::= conj (" OR " conj)*
conj ::= pred (" AND " pred)*
pred ::= "(" cond ")" | "NOT " pred | compare | in_list | between | is_null | column
compare ::= expr " " cmp " " operand
in_list ::= expr " NOT"? " IN (" literal (", " literal)* ")"
between ::= expr " BETWEEN " operand " AND " operand
is_null ::= expr " IS" " NOT"? " NULL"
cmp ::= "=" | "<>" | "!=" | "<" | "<=" | ">" | ">="
operand ::= literal | expr
expr ::= term ((" + " | " - " | " * " | " / ") term)*
term ::= aggregate | func | column | number | "(" expr ")" | case
case ::= "CASE" (" WHEN " cond " THEN " operand)+ (" ELSE " operand)? " END"
aggregate ::= "COUNT(*)" | agg_name "(" "DISTINCT "? expr ")"
func ::= "DATE_TRUNC('" grain "', " expr ")" | "CAST(" expr " AS " cast_type ")" | two_args | round | extract
  | fn_name "(" expr ")"
two_args ::= ("NULLIF(" | "COALESCE(") expr ", " expr ")"
round ::= "ROUND(" expr (", " [0-9])? ")"
extract ::= "EXTRACT(" part " FROM " expr ")"
part ::= "year" | "quarter" | "month" | "week" | "day"
literal ::= string | number | "DATE " string | "TRUE" | "FALSE"
string ::= "'" [^'\\\n]* "'"
number ::= "-"? [0-9]+ ("." [0-9]+)?
"""


def _alt(words: list[str] | tuple[str, ...]) -> str:
    return " | ".join(json.dumps(w) for w in words)


def _rule_name(table: str) -> str:
    return "col_" + "".join(ch if ch.isalnum() else "_" for ch in table.lower())


def grammar_text(columns: dict[str, list[str]]) -> str:
    """The grammar for ``{table: [column, …]}``: the fixed rules, then ``table`` and ``column``."""
    if not columns or not all(columns.values()):
        raise ValueError("a SQL grammar needs at least one table, each with at least one column")
    tables = sorted(columns)
    lines = [_FIXED.strip(),
             f"agg_name ::= {_alt(AGGREGATES)}",
             f"cast_type ::= {_alt(CAST_TYPES)}",
             f"grain ::= {_alt(GRAINS)}",
             f"fn_name ::= {_alt(FUNCTIONS)}",
             f"table ::= {_alt(tables)}",
             "column ::= " + " | ".join(f"{json.dumps(t + '.')} {_rule_name(t)}" for t in tables)]
    lines += [f"{_rule_name(t)} ::= {_alt(sorted(columns[t]))}" for t in tables]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class SqlGrammar:
    """A warehouse's grammar: the text sent and its identity (recorded in the manifest)."""

    text: str
    tables: tuple[str, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def manifest(self) -> dict[str, object]:
        return {"syntax": "xgrammar-ebnf", "sha256": self.sha256, "tables": list(self.tables), "text": self.text}


def sql_grammar(catalog: Catalog, warehouse: Warehouse) -> SqlGrammar:
    """The grammar over the tables and columns the prompt describes (``schema_text``)."""
    cols = {t.name: [c.name for c in t.columns] for t in describe_tables(catalog, warehouse) if t.columns}
    return SqlGrammar(grammar_text(cols), tuple(sorted(cols)))


def check_compiles(text: str) -> None:
    """Parse and compile ``text`` as vLLM's xgrammar backend will (EBNF, a small vocabulary):
    a ``ValueError`` with xgrammar's message when it cannot.  xgrammar ships with vLLM."""
    import xgrammar as xgr

    try:
        grammar = xgr.Grammar.from_ebnf(text)
        vocab = [chr(c) for c in range(32, 127)] + ["</s>"]
        info = xgr.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])
        xgr.GrammarCompiler(info, max_threads=1).compile_grammar(grammar)
    except Exception as exc:  # noqa: BLE001 — xgrammar raises RuntimeError/ValueError by build
        raise ValueError(f"xgrammar refuses the SQL grammar: {str(exc).splitlines()[0] if str(exc) else exc}") \
            from exc
