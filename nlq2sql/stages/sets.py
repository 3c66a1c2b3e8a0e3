"""An eval set loaded as the kind its lines and the run's answer call for: the one dispatch.

Three kinds of set exist: v1 sets (golds are intents, :mod:`nlq2sql.stages.evalset`), v2 sets
(golds are MetricFlow queries, :mod:`nlq2sql.stages.queryset`) and gold-SQL sets (golds are SQL,
:mod:`nlq2sql.stages.goldsql`).  A gold-SQL set is recognised by its lines and scores every answer
kind by its rows; otherwise the answer decides: a v2 set for the query and SQL answers, a v1 set for
the intent.  ``eval`` and ``batch`` both load their set here, so they agree on which it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql.stages.evalset import EvalCase, EvalSet, load_evalset
from nlq2sql.stages.goldsql import GoldSqlCase, GoldSqlSet, is_gold_sql_set, load_gold_sql_set
from nlq2sql.stages.queryset import QueryCase, QuerySet, load_query_set

if TYPE_CHECKING:
    from nlq2sql.semantic.binding import Warehouse

__all__ = ["V2_GOLD_ANSWERS", "AnySet", "Case", "load_eval_set"]

#: The answer kinds scored against a v2 set's golds (MetricFlow queries) when the set's golds are not SQL.
V2_GOLD_ANSWERS = ("query", "sql", "sql-grammar")

AnySet = EvalSet | QuerySet | GoldSqlSet
Case = EvalCase | QueryCase | GoldSqlCase


def load_eval_set(name_or_path: str | Path, answer: str, wh: Warehouse) -> AnySet:
    """The set ``name_or_path`` (a shipped name of ``wh`` or a path) as the kind it is for ``answer``:
    a gold-SQL set whatever the answer, else v2 golds for the query and SQL answers, v1 for the intent.
    Every problem of the file is raised together (:class:`~nlq2sql.errors.EvalSetProblems`)."""
    if is_gold_sql_set(name_or_path, wh.name):
        return load_gold_sql_set(name_or_path, wh.name)
    if answer in V2_GOLD_ANSWERS:
        return load_query_set(name_or_path, wh.catalog)
    return load_evalset(name_or_path, wh)
