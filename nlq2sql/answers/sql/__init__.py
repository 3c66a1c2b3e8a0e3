"""The direct-SQL answer arm: the model writes one DuckDB SELECT, scored by its rows.

``guard`` refuses anything but one read-only SELECT over the warehouse's tables, ``sandbox`` runs it
locked down, ``equivalence`` compares rows with the gold's, ``score`` makes the record (docs/sql-arm.md)."""

from nlq2sql.answers.sql.equivalence import Equivalence, compare
from nlq2sql.answers.sql.guard import Verdict, check_sql
from nlq2sql.answers.sql.sandbox import Sandbox, SandboxResult
from nlq2sql.answers.sql.score import ANSWER_KIND, extract_sql, sql_record

__all__ = ["ANSWER_KIND", "Equivalence", "Sandbox", "SandboxResult", "Verdict", "check_sql", "compare",
           "extract_sql", "sql_record"]
