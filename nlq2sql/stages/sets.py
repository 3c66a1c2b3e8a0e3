"""The three kinds of eval set as one type (dispatch: ``answers.kinds.load_eval_set``): v1 (intents),
v2 (MetricFlow queries) and gold-SQL sets; a gold-SQL set is recognised by its lines and scores
every answer kind by its rows."""

from __future__ import annotations

from nlq2sql.stages.evalset import EvalCase, EvalSet
from nlq2sql.stages.goldsql import GoldSqlCase, GoldSqlSet
from nlq2sql.stages.queryset import QueryCase, QuerySet

__all__ = ["AnySet", "Case"]

AnySet = EvalSet | QuerySet | GoldSqlSet
Case = EvalCase | QueryCase | GoldSqlCase
