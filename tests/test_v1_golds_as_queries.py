"""Issue 21's migration check on every shipped warehouse with v1 sets: each v1 gold restated as a
MetricFlow query (``from_v1``, how v2 runs read those sets) returns the rows the v1 SQL builder's
query returns (retail's sets are also checked in ``test_query_arm``)."""

from __future__ import annotations

import pytest

from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.execute import Executor, rows_equal
from nlq2sql.stages.intent import canonicalise, is_ordered
from nlq2sql.stages.queryset import from_v1
from nlq2sql.stages.sqlbuild import build_sql


@pytest.mark.parametrize("warehouse", ["tpch", "flights"])
def test_every_v1_gold_of_the_warehouse_returns_its_rows_as_a_query(warehouse: str) -> None:
    wh = open_warehouse(warehouse)
    cat = wh.catalog
    n = 0
    with Executor(wh.db_path) as ex:
        for name in ("dev", "heldout", "adversarial"):
            for case in load_evalset(PROJECT_ROOT / "warehouses" / warehouse / "evalsets" / f"{name}.jsonl", wh).cases:
                gold = canonicalise(case.gold)
                q = from_v1(case.gold, cat)
                assert rows_equal(ex.run(cat.engine.compile(q)), ex.run(build_sql(gold, cat)),
                                  ordered=q.ordered and is_ordered(gold)), (warehouse, case.id)
                n += 1
    assert n >= 80, n  # dev + held-out (44) + adversarial: every line read
