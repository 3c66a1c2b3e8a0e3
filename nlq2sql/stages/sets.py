"""The three kinds of eval set as one type (the dispatch is ``answers.kinds.load_eval_set``).

Three kinds of set exist: v1 sets (golds are intents, :mod:`nlq2sql.stages.evalset`), v2 sets
(golds are MetricFlow queries, :mod:`nlq2sql.stages.queryset`) and gold-SQL sets (golds are SQL,
:mod:`nlq2sql.stages.goldsql`).  A gold-SQL set is recognised by its lines and scores every answer
kind by its rows; otherwise the answer kind's own cases.
"""

from __future__ import annotations

from nlq2sql.stages.evalset import EvalCase, EvalSet
from nlq2sql.stages.goldsql import GoldSqlCase, GoldSqlSet
from nlq2sql.stages.queryset import QueryCase, QuerySet

__all__ = ["AnySet", "Case"]

AnySet = EvalSet | QuerySet | GoldSqlSet
Case = EvalCase | QueryCase | GoldSqlCase
