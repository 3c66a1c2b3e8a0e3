"""Intent v2 (a MetricFlow query): the contract from the manifest, parsing, and MetricFlow's rows
against hand-written reference SQL on the test warehouse."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from nlq2sql.errors import IntentError, SqlBuildError
from nlq2sql.semantic import load_catalog
from nlq2sql.semantic.contract import answer_schema, parse_answer, part_matches
from nlq2sql.semantic.engine import Query
from nlq2sql.semantic.query import MetricQuery, Unanswerable
from nlq2sql.stages.execute import Executor

CAT = load_catalog("retail")

#: (v2 query, hand-written reference SQL over the retail tables, ordered?)
REFERENCE: list[tuple[dict[str, Any], str, bool]] = [
    ({"metrics": ["revenue"], "group_by": ["customer_id__region"]},
     "SELECT c.region, SUM(l.quantity * l.unit_price * (1 - l.discount)) FROM order_lines l "
     "LEFT JOIN customers c USING (customer_id) GROUP BY 1", False),
    ({"metrics": ["revenue", "orders"], "group_by": ["metric_time__quarter", "product_id__category"],
      "where": [{"field": "customer_id__region", "op": "in", "values": ["North", "South"]},
                {"field": "metric_time__day", "op": "between", "values": ["2024-01-01", "2024-06-30"]}]},
     "SELECT DATE_TRUNC('quarter', l.order_date), p.category, SUM(l.quantity * l.unit_price * (1 - l.discount)), "
     "COUNT(DISTINCT l.order_id) FROM order_lines l LEFT JOIN customers c USING (customer_id) "
     "LEFT JOIN products p USING (product_id) WHERE c.region IN ('North', 'South') "
     "AND l.order_date BETWEEN DATE '2024-01-01' AND DATE '2024-06-30' GROUP BY 1, 2", False),
    ({"metrics": ["units"], "group_by": ["product_id__product"], "order_by": [
        {"field": "units", "descending": True}, {"field": "product_id__product", "descending": False}], "limit": 3},
     "SELECT p.product_name, SUM(l.quantity) AS u FROM order_lines l LEFT JOIN products p USING (product_id) "
     "GROUP BY 1 ORDER BY u DESC, 1 LIMIT 3", True),
    ({"metrics": ["avg_order_value"], "group_by": ["channel_id__channel"],
      "where": [{"field": "channel_id__channel", "op": "neq", "values": ["Phone"]}]},
     "SELECT ch.channel_name, SUM(l.quantity * l.unit_price * (1 - l.discount)) / COUNT(DISTINCT l.order_id) "
     "FROM order_lines l LEFT JOIN channels ch USING (channel_id) WHERE ch.channel_name <> 'Phone' GROUP BY 1",
     False),
    ({"metrics": ["customers"], "group_by": ["metric_time__month"],
      "where": [{"field": "customer_id__segment", "op": "not_in", "values": ["Consumer"]}],
      "order_by": [{"field": "metric_time__month", "descending": False}]},
     "SELECT DATE_TRUNC('month', l.order_date) AS m, COUNT(DISTINCT l.customer_id) FROM order_lines l "
     "LEFT JOIN customers c USING (customer_id) WHERE c.segment NOT IN ('Consumer') GROUP BY 1 ORDER BY m", True),
    ({"metrics": ["units", "orders"], "group_by": ["customer_id__region", "customer_id__segment"],
      "where": [{"field": "metric_time__year", "op": "eq", "values": ["2025-01-01"]}]},
     "SELECT c.region, c.segment, SUM(l.quantity), COUNT(DISTINCT l.order_id) FROM order_lines l "
     "LEFT JOIN customers c USING (customer_id) WHERE YEAR(l.order_date) = 2025 GROUP BY 1, 2", False),
    ({"metrics": ["revenue"], "group_by": ["customer_id"], "order_by": [{"field": "revenue", "descending": True}],
      "limit": 5},
     "SELECT l.customer_id, SUM(l.quantity * l.unit_price * (1 - l.discount)) AS r FROM order_lines l "
     "GROUP BY 1 ORDER BY r DESC LIMIT 5", True),
    ({"metrics": ["orders"], "group_by": ["metric_time__week"],
      "where": [{"field": "metric_time__day", "op": "gte", "values": ["2025-03-01"]},
                {"field": "metric_time__day", "op": "lt", "values": ["2025-04-01"]}]},
     "SELECT DATE_TRUNC('week', l.order_date), COUNT(DISTINCT l.order_id) FROM order_lines l "
     "WHERE l.order_date >= DATE '2025-03-01' AND l.order_date < DATE '2025-04-01' GROUP BY 1", False),
]


@pytest.mark.parametrize("query, reference, ordered", REFERENCE, ids=[str(i) for i in range(len(REFERENCE))])
def test_metricflow_rows_equal_hand_written_sql(query: dict[str, Any], reference: str, ordered: bool,
                                                executor: Executor) -> None:
    from nlq2sql.stages.execute import rows_equal

    q = CAT.engine.compile(MetricQuery.model_validate(query))
    got, want = executor.run(q), executor.run(Query(reference, ()))
    assert want, "the reference returns rows on the test warehouse"
    assert rows_equal(got, want, ordered=ordered), (q.sql, got[:3], want[:3])


def test_query_model_rules() -> None:
    with pytest.raises(ValidationError, match="exactly two"):
        MetricQuery.model_validate({"metrics": ["x"], "where": [{"field": "a", "op": "between", "values": ["1"]}]})
    with pytest.raises(ValidationError, match="exactly one"):
        MetricQuery.model_validate({"metrics": ["x"], "where": [{"field": "a", "op": "eq", "values": ["1", "2"]}]})
    with pytest.raises(ValidationError):
        MetricQuery.model_validate({"metrics": []})
    assert MetricQuery.model_validate({"metrics": ["x", "x"], "group_by": ["a", "b", "a"]}).group_by == ("a", "b")
    ts = MetricQuery.model_validate({"metrics": ["x"], "group_by": ["metric_time__month"]})
    top = MetricQuery.model_validate({"metrics": ["x"], "group_by": ["a__b"], "order_by": [{"field": "x"}], "limit": 3})
    assert (ts.kind, top.kind, MetricQuery(metrics=("x",)).kind) == ("time_series", "top_n_by_metric", "breakdown")
    assert MetricQuery(metrics=("x",), where=()).key() == MetricQuery(metrics=("x",), where=None).key()


def test_schema_accepts_what_parse_accepts_and_names_come_from_metricflow() -> None:
    good = {"metrics": ["revenue", "orders"], "group_by": ["customer_id__region", "metric_time__month"],
            "where": [{"field": "metric_time__day", "op": "between", "values": ["2024-01-01", "2024-03-31"]}],
            "order_by": [{"field": "revenue", "descending": True}], "limit": 5}
    for mode in ("flat", "branches"):
        schema = answer_schema(CAT, mode)
        jsonschema.validate(good, schema)
        jsonschema.validate({"unanswerable": "no margin data"}, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**good, "metrics": ["profit"]}, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**good, "group_by": ["region"]}, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**good, "limit": 10**6}, schema)
    flat = answer_schema(CAT, "flat", abstain=False)["anyOf"]  # the query branch, then the listing branch
    assert [b["properties"]["metrics"].get("minItems") for b in flat] == [1, None]
    assert "anyOf" not in json.dumps(flat[0]["properties"]["metrics"])
    assert isinstance(parse_answer(json.dumps(good), CAT), MetricQuery)
    assert parse_answer('{"unanswerable": "no margin data"}', CAT) == Unanswerable(unanswerable="no margin data")


def test_known_values_pin_a_small_fields_where_and_only_that_fields() -> None:
    from nlq2sql.answers.kinds import bind_sampling
    from nlq2sql.semantic.binding import open_warehouse
    from nlq2sql.transport.client import Sampling

    wh = open_warehouse("retail")
    known = dict(wh.schema_values)
    # Small categorical fields, by every entity path; a 30-product list too; no entity, no time.
    assert set(known["customer_id__region"]) == {"Central", "East", "North", "South", "West"}
    assert "product_id__product" in known and "customer_id" not in known
    assert not any(name.startswith("metric_time") for name in known)
    base = {"metrics": ["revenue"], "group_by": [], "order_by": [], "limit": None}
    for mode in ("flat", "branches"):
        schema = answer_schema(CAT, mode, values=wh.schema_values)
        jsonschema.validate({**base, "where": [{"field": "customer_id__region", "op": "in",
                                                "values": ["North", "South"]}]}, schema)
        jsonschema.validate({**base, "where": [{"field": "metric_time__day", "op": "gte",
                                                "values": ["2024-01-01"]}]}, schema)
        for bad in (["north"], ["North "], ["Atlantis"], [3]):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate({**base, "where": [{"field": "customer_id__region", "op": "in",
                                                        "values": bad}]}, schema)
        # Without the warehouse's values any short value is allowed (a bare catalog knows no data).
        jsonschema.validate({**base, "where": [{"field": "customer_id__region", "op": "eq", "values": ["Atlantis"]}]},
                            answer_schema(CAT, mode))
    bound = json.loads(bind_sampling(Sampling(), wh, "query").schema_json or "")
    assert bound == answer_schema(CAT, "flat", values=wh.schema_values)
    assert json.loads(bind_sampling(Sampling(), CAT, "query").schema_json or "") == answer_schema(CAT, "flat")


def test_the_schema_counts_each_operators_values() -> None:
    """Whatever the grammar lets the model write, ``Where`` accepts: one value for eq…lte, two for
    between, a list for in/not_in — pinned fields and free ones alike (a live SmolLM2 answer once
    wrote ``eq`` with ten values, schema-valid and refused by the parser)."""
    from nlq2sql.semantic.binding import open_warehouse

    wh = open_warehouse("retail")
    base = {"metrics": ["revenue"], "group_by": [], "order_by": [], "limit": None}
    for values in ((), wh.schema_values):
        validator = jsonschema.Draft202012Validator(answer_schema(CAT, "flat", values=values))
        for field, v in (("customer_id__region", "North"), ("metric_time__day", "2024-01-01")):
            for op in ("eq", "neq", "gt", "gte", "lt", "lte", "in", "not_in", "between"):
                for n in (1, 2, 3):
                    answer = {**base, "where": [{"field": field, "op": op, "values": [v] * n}]}
                    ok = validator.is_valid(answer)
                    assert ok == (n == 2 if op == "between" else n == 1 or op in ("in", "not_in")), (field, op, n)
                    if ok:
                        MetricQuery.model_validate(answer)


@pytest.mark.parametrize("warehouse", ["retail", "tpch", "flights", "jaffle"])
def test_every_shipped_gold_is_an_answer_its_warehouses_schema_allows(warehouse: str) -> None:
    """The values pinned by the schema are the values the golds use: a model constrained by it
    can still write every gold."""
    from nlq2sql.semantic.binding import open_warehouse
    from nlq2sql.stages.evalset import evalset_dir
    from nlq2sql.stages.queryset import load_query_set

    wh = open_warehouse(warehouse)
    validator = jsonschema.Draft202012Validator(answer_schema(wh.catalog, "flat", values=wh.schema_values))
    checked = 0
    for path in sorted(evalset_dir(warehouse).glob("*.jsonl")):
        for case in load_query_set(path, wh.catalog).cases:
            if case.gold is None:
                continue
            gold = case.gold.model_dump(mode="json")
            answer = {k: gold.get(k) or ([] if k in ("group_by", "where", "order_by") else gold.get(k))
                      for k in ("metrics", "group_by", "where", "order_by", "limit")}
            errors = [e.message for e in validator.iter_errors(answer)]
            assert not errors, (path.name, case.id, errors[:1])
            checked += 1
    assert checked >= 100


@pytest.mark.parametrize("text, status", [
    ("not json", "invalid_json"), ("[" * 5000, "invalid_json"), ('{"metrics": ["profit"]}', "schema_invalid"),
    ('{"metrics": ["revenue"], "group_by": ["region"]}', "schema_invalid"), ('{"unanswerable": ""}', "schema_invalid"),
    ('{"metrics": ["revenue"], "sql": "DROP TABLE x"}', "schema_invalid")])
def test_parse_statuses(text: str, status: str) -> None:
    with pytest.raises(IntentError) as info:
        parse_answer(text, CAT)
    assert info.value.status == status


def test_part_matches() -> None:
    gold = MetricQuery.model_validate({"metrics": ["revenue", "orders"], "group_by": ["customer_id__region"],
                                       "where": [{"field": "customer_id__region", "op": "in", "values": ["N", "S"]}]})
    same = MetricQuery.model_validate({"metrics": ["orders", "revenue"], "group_by": ["customer_id__region"],
                                       "where": [{"field": "customer_id__region", "op": "in", "values": ["S", "N"]}]})
    assert all(part_matches(same, gold).values())
    other = gold.model_copy(update={"limit": 3, "group_by": ("product_id__category",)})
    assert part_matches(other, gold) == {"metrics": True, "group_by": False, "where": True, "order_by": True,
                                         "limit": False}


def test_hostile_values_are_parameters_and_a_bad_name_is_metricflows_error(executor: Executor) -> None:
    hostile = "x'); DROP TABLE order_lines; --"
    q = CAT.engine.compile(MetricQuery.model_validate({"metrics": ["revenue"], "group_by": ["customer_id__region"],
                                                       "where": [{"field": "customer_id__region", "op": "eq",
                                                                  "values": [hostile]}]}))
    assert hostile not in q.sql and q.params == (hostile,)
    assert executor.run(q) == []
    jinja = "{{ 7 * 7 }}"
    q = CAT.engine.compile(MetricQuery.model_validate({"metrics": ["revenue"], "group_by": ["customer_id__region"],
                                                       "where": [{"field": "customer_id__region", "op": "eq",
                                                                  "values": [jinja]}]}))
    assert "49" not in q.sql and q.params == (jinja,), "values never pass through MetricFlow's Jinja"
    with pytest.raises(SqlBuildError, match="group-by"):
        CAT.engine.compile(MetricQuery.model_validate({"metrics": ["revenue"], "group_by": ["nosuch"]}))
