"""The direct-SQL answer arm: the model writes one DuckDB SELECT, scored by its rows.

The prompt describes the warehouse with :mod:`nlq2sql.semantic.schema_text`; ``guard`` refuses anything but one
read-only SELECT over the warehouse's tables, ``sandbox`` runs it locked down (read-only, no
external access, time limit, row cap, memory limit), ``equivalence`` compares its rows with the
gold's (strict and lenient), and ``score`` makes the item's record (see docs/sql-arm.md).
"""

from nlq2sql.answers.sql.equivalence import Equivalence, compare
from nlq2sql.answers.sql.guard import Verdict, check_sql
from nlq2sql.answers.sql.sandbox import Sandbox, SandboxResult
from nlq2sql.answers.sql.score import ANSWER_KIND, extract_sql, sql_record

__all__ = ["ANSWER_KIND", "Equivalence", "Sandbox", "SandboxResult", "Verdict", "check_sql", "compare",
           "extract_sql", "sql_record"]
