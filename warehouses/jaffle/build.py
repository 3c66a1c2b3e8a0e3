"""The ``jaffle`` warehouse: dbt's Jaffle Shop, the project every dbt user has run.

The raw data is generated at build time by ``jafgen`` (PyPI; dbt Labs' generator of the
jaffle-shop seeds): a simulation of a café chain day by day, customers of six personas
(commuters, remote workers, students, brunch crowd, casuals, health nuts) buying jaffles and
drinks at stores that open one after another.  Nothing is downloaded.

**Deterministic.**  jafgen draws from Python's global ``random``, numpy's global legacy
``RandomState``, Faker (customer names) and ``uuid.uuid4()`` (every id, from the OS's entropy).
For the build, the first three are seeded (and the caller's global states restored after), and
the ``uuid`` name inside jafgen's modules is replaced by a shim whose ``uuid4()`` draws from
its own seeded generator, so two builds give the same rows, ids included.  jafgen's CSV
writer is not used (it writes to ``./jaffle-data`` in the working directory): the rows are
taken from the simulation exactly as its ``save_results`` would write them, and loaded into
DuckDB as the ``raw_*`` tables.  Two pure speed-ups leave every draw unchanged: the progress
bar is off, and the annual curve's 365-point domain is computed once instead of per call.
Customer *names* come from Faker's name lists, so a different Faker release may spell them
differently; nothing else depends on Faker.

**Simulated period:** two years from jafgen's epoch, 2018-09-01 to 2020-08-30.  Four of
jafgen's six stores open in that window (Philadelphia 2018-09-01, Brooklyn 2019-03-12,
Chicago 2020-04-28, San Francisco 2020-05-08); New Orleans and Los Angeles are in
``locations`` with no orders.

**``scale``** is the size of each store's market relative to jafgen's own (1.0 = jafgen's
default customer base, 100 per market unit); the default 0.2 gives ~56k orders and ~82k order
items in a few seconds.  Years are fixed.

Tables, as dbt-labs/jaffle-shop builds them (staging as views, marts as tables; money as
DECIMAL(16,2) dollars from the raw cents):

- sources ``raw_customers``, ``raw_orders``, ``raw_items``, ``raw_products``,
  ``raw_supplies``, ``raw_stores``;
- staging views ``stg_customers``, ``stg_orders``, ``stg_order_items``, ``stg_products``,
  ``stg_supplies``, ``stg_locations``;
- marts ``order_items`` (product name and price, supply cost, food/drink flags, order day),
  ``orders`` (order total, subtotal, tax, cost, item counts,
  is_food_order, is_drink_order, customer_order_number; orders without items are dropped, as
  dbt's inner join does), ``customers`` (first/last order, lifetime orders and spend,
  customer_type new/returning), ``products``, ``supplies``, ``locations``;
- ``time_spine_daily(date_day)``: dbt's daily time spine model, 2018-01-01 … 2020-08-31 (the
  simulated period), declared in the semantic model's YAML.  It ends with the data on purpose:
  MetricFlow joins a cumulative metric's rows to every spine day after them, so each spine day
  past the last order costs a scan of all items, and an all-time cumulative keeps printing
  its final value for every such day.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

#: Bumped whenever generation changes, so a stale cached warehouse is never reused.
VERSION = 1
DEFAULT_SCALE = 0.2

SEED = 20180901
YEARS = 2
#: jafgen's market size per unit of a store's TAM at scale 1.0 (``Simulation.scale``).
JAFGEN_SCALE = 100
SPINE_START, SPINE_END = "2018-01-01", "2020-08-31"


class _SeededUuid:
    """Stands in for the ``uuid`` module inside jafgen: ``uuid4()`` from a seeded generator."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """jafgen's randomness seeded for one build; every global touched is put back after."""
    import jafgen.curves as curves
    import jafgen.simulation as simulation
    from faker import Faker
    from jafgen.customers import customers, order, order_item, tweet

    modules = (simulation, customers, order, order_item, tweet)
    saved_uuid = [m.uuid for m in modules]  # type: ignore[attr-defined]
    saved_track = simulation.track
    saved_domain = curves.AnnualCurve.__dict__["Domain"]
    py_state, np_state = random.getstate(), np.random.get_state()
    annual = np.linspace(0, 2 * np.pi, 365)  # the same values AnnualCurve.Domain builds per call
    try:
        shim = _SeededUuid(seed + 1)
        for m in modules:
            m.uuid = shim  # type: ignore[attr-defined]
        simulation.track = lambda it, description=None: it  # no progress bar on the console
        curves.AnnualCurve.Domain = property(lambda self: annual)  # type: ignore[method-assign,assignment]
        random.seed(seed)
        np.random.seed(seed % 2**32)
        Faker.seed(seed)
        yield
    finally:
        for m, u in zip(modules, saved_uuid, strict=True):
            m.uuid = u  # type: ignore[attr-defined]
        simulation.track = saved_track
        curves.AnnualCurve.Domain = saved_domain  # type: ignore[method-assign]
        random.setstate(py_state)
        np.random.set_state(np_state)


def _simulate(scale: float) -> dict[str, list[dict[str, Any]]]:
    """jafgen's entities (the rows its ``save_results`` writes as CSV), deterministically."""
    with _seeded(SEED):
        from jafgen.simulation import Simulation
        from jafgen.stores.inventory import Inventory
        from jafgen.stores.stock import Stock

        class _Sim(Simulation):  # type: ignore[misc]
            # jafgen's __init__ sets ``self.scale = 100`` and sizes the markets from it at once;
            # this property keeps the size asked for instead.
            scale = property(lambda self: self._market_scale, lambda self, value: None)

            def __init__(self, years: int, market_scale: float) -> None:
                self._market_scale = market_scale
                super().__init__(years, "raw")

        sim = _Sim(YEARS, JAFGEN_SCALE * scale)
        sim.run_simulation()
        entities = {
            "customers": [c.to_dict() for c in sim.customers.values()],
            "orders": [o.to_dict() for o in sim.orders],
            "items": [i.to_dict() for o in sim.orders for i in o.items],
            "stores": [m.store.to_dict() for m in sim.markets],
            "supplies": Stock.to_dict(),
            "products": Inventory.to_dict(),
        }
    if not entities["orders"] or not entities["items"]:
        raise RuntimeError(f"jafgen simulated no orders at scale {scale:g}: use a larger scale")
    return entities


_RAW_COLUMNS = {
    "customers": {"id": "VARCHAR", "name": "VARCHAR"},
    "orders": {"id": "VARCHAR", "customer": "VARCHAR", "ordered_at": "TIMESTAMP", "store_id": "VARCHAR",
               "subtotal": "INTEGER", "tax_paid": "INTEGER", "order_total": "INTEGER"},
    "items": {"id": "VARCHAR", "order_id": "VARCHAR", "sku": "VARCHAR"},
    "stores": {"id": "VARCHAR", "name": "VARCHAR", "opened_at": "TIMESTAMP", "tax_rate": "DOUBLE"},
    "supplies": {"id": "VARCHAR", "name": "VARCHAR", "cost": "INTEGER", "perishable": "BOOLEAN", "sku": "VARCHAR"},
    "products": {"sku": "VARCHAR", "name": "VARCHAR", "type": "VARCHAR", "price": "INTEGER",
                 "description": "VARCHAR"},
}

# dbt-labs/jaffle-shop's staging models, in DuckDB SQL (views, as dbt materialises staging).
# cents_to_dollars(c) is (c / 100)::numeric(16, 2); date_trunc('day', ...) keeps the day.
_STAGING = {
    "stg_customers": "SELECT id AS customer_id, name AS customer_name FROM raw_customers",
    "stg_locations": """
        SELECT id AS location_id, name AS location_name, tax_rate,
               CAST(date_trunc('day', opened_at) AS DATE) AS opened_date
        FROM raw_stores""",
    "stg_order_items": "SELECT id AS order_item_id, order_id, sku AS product_id FROM raw_items",
    "stg_orders": """
        SELECT id AS order_id, store_id AS location_id, customer AS customer_id,
               subtotal AS subtotal_cents, tax_paid AS tax_paid_cents, order_total AS order_total_cents,
               CAST(subtotal / 100 AS DECIMAL(16, 2)) AS subtotal,
               CAST(tax_paid / 100 AS DECIMAL(16, 2)) AS tax_paid,
               CAST(order_total / 100 AS DECIMAL(16, 2)) AS order_total,
               CAST(date_trunc('day', ordered_at) AS DATE) AS ordered_at
        FROM raw_orders""",
    "stg_products": """
        SELECT sku AS product_id, name AS product_name, type AS product_type,
               description AS product_description,
               CAST(price / 100 AS DECIMAL(16, 2)) AS product_price,
               coalesce(type = 'jaffle', false) AS is_food_item,
               coalesce(type = 'beverage', false) AS is_drink_item
        FROM raw_products""",
    "stg_supplies": """
        SELECT md5(coalesce(id, '_dbt_utils_surrogate_key_null_') || '-'
                   || coalesce(sku, '_dbt_utils_surrogate_key_null_')) AS supply_uuid,
               id AS supply_id, sku AS product_id, name AS supply_name,
               CAST(cost / 100 AS DECIMAL(16, 2)) AS supply_cost,
               perishable AS is_perishable_supply
        FROM raw_supplies""",
}

# The marts, in dependency order (tables).  Row order is fixed by ORDER BY so the file's
# contents, not only its query results, repeat.
_MARTS = {
    "products": "SELECT * FROM stg_products ORDER BY product_id",
    "supplies": "SELECT * FROM stg_supplies ORDER BY supply_id, product_id",
    "locations": "SELECT * FROM stg_locations ORDER BY opened_date, location_name",
    # order_items: dbt's mart (an item reaches its order's customer and location through the
    # order: two hops in the semantic model).
    "order_items": """
        WITH supply_cost_per_product AS (
            SELECT product_id, sum(supply_cost) AS supply_cost FROM stg_supplies GROUP BY 1
        )
        SELECT i.order_item_id, i.order_id, i.product_id, o.ordered_at,
               p.product_name, p.product_price, p.is_food_item, p.is_drink_item, s.supply_cost
        FROM stg_order_items i
        LEFT JOIN stg_orders o USING (order_id)
        LEFT JOIN stg_products p USING (product_id)
        LEFT JOIN supply_cost_per_product s USING (product_id)
        ORDER BY o.ordered_at, i.order_id, i.order_item_id""",
    "orders": """
        WITH order_items_summary AS (
            SELECT order_id,
                   sum(supply_cost) AS order_cost,
                   sum(product_price) AS order_items_subtotal,
                   count(order_item_id) AS count_order_items,
                   CAST(sum(CASE WHEN is_food_item THEN 1 ELSE 0 END) AS BIGINT) AS count_food_items,
                   CAST(sum(CASE WHEN is_drink_item THEN 1 ELSE 0 END) AS BIGINT) AS count_drink_items
            FROM order_items GROUP BY 1
        ), compute_booleans AS (
            SELECT o.*, s.order_cost, s.order_items_subtotal, s.count_food_items, s.count_drink_items,
                   s.count_order_items,
                   s.count_food_items > 0 AS is_food_order,
                   s.count_drink_items > 0 AS is_drink_order
            FROM stg_orders o
            INNER JOIN order_items_summary s USING (order_id)
        )
        SELECT *, row_number() OVER (PARTITION BY customer_id ORDER BY ordered_at, order_id)
                  AS customer_order_number
        FROM compute_booleans
        ORDER BY ordered_at, order_id""",
    "customers": """
        WITH customer_orders_summary AS (
            SELECT customer_id,
                   count(DISTINCT order_id) AS count_lifetime_orders,
                   count(DISTINCT order_id) > 1 AS is_repeat_buyer,
                   min(ordered_at) AS first_ordered_at,
                   max(ordered_at) AS last_ordered_at,
                   sum(subtotal) AS lifetime_spend_pretax,
                   sum(tax_paid) AS lifetime_tax_paid,
                   sum(order_total) AS lifetime_spend
            FROM orders
            WHERE customer_id IS NOT NULL AND order_id IS NOT NULL
            GROUP BY 1
        )
        SELECT c.*, s.count_lifetime_orders, s.first_ordered_at, s.last_ordered_at,
               s.lifetime_spend_pretax, s.lifetime_tax_paid, s.lifetime_spend,
               CASE WHEN s.is_repeat_buyer THEN 'returning' ELSE 'new' END AS customer_type
        FROM stg_customers c
        LEFT JOIN customer_orders_summary s USING (customer_id)
        ORDER BY s.first_ordered_at, c.customer_id""",
}


def build(out: Path, scale: float = DEFAULT_SCALE) -> None:
    """Write the jaffle warehouse to ``out`` (a new file): jafgen's rows, dbt's staging and marts."""
    entities = _simulate(scale)
    con = duckdb.connect(str(out))
    try:
        con.execute("SET threads TO 2")
        for name, columns in _RAW_COLUMNS.items():
            frame = pd.DataFrame.from_records(entities[name], columns=list(columns))
            con.register("raw_frame", frame)
            casts = ", ".join(
                f"CAST({c} = 'True' AS BOOLEAN) AS {c}" if t == "BOOLEAN" else f"CAST({c} AS {t}) AS {c}"
                for c, t in columns.items())
            con.execute(f"CREATE TABLE raw_{name} AS SELECT {casts} FROM raw_frame")
            con.unregister("raw_frame")
        for name, sql in _STAGING.items():
            con.execute(f"CREATE VIEW {name} AS {sql}")
        for name, sql in _MARTS.items():
            con.execute(f"CREATE TABLE {name} AS {sql}")
        con.execute(f"CREATE TABLE time_spine_daily AS SELECT CAST(d AS DATE) AS date_day "
                    f"FROM range(DATE '{SPINE_START}', DATE '{SPINE_END}' + INTERVAL 1 DAY, INTERVAL 1 DAY) t(d)")
        _check(con)
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _check(con: duckdb.DuckDBPyConnection) -> None:
    """Fail the build, not a later query, when the data breaks what the marts promise (dbt's tests)."""
    checks = {
        "duplicate order_id": "SELECT COUNT(*) - COUNT(DISTINCT order_id) FROM orders",
        "duplicate order_item_id": "SELECT COUNT(*) - COUNT(DISTINCT order_item_id) FROM order_items",
        "duplicate customer_id": "SELECT COUNT(*) - COUNT(DISTINCT customer_id) FROM customers",
        "duplicate supply_uuid": "SELECT COUNT(*) - COUNT(DISTINCT supply_uuid) FROM supplies",
        "order_items_subtotal <> subtotal": "SELECT COUNT(*) FROM orders WHERE order_items_subtotal <> subtotal",
        "order_total <> subtotal + tax_paid": "SELECT COUNT(*) FROM orders WHERE order_total <> subtotal + tax_paid",
        "order without customer": "SELECT COUNT(*) FROM orders ANTI JOIN customers USING (customer_id)",
        "order without location": "SELECT COUNT(*) FROM orders ANTI JOIN locations USING (location_id)",
        "item without product": "SELECT COUNT(*) FROM order_items ANTI JOIN products USING (product_id)",
    }
    for what, sql in checks.items():
        row = con.execute(sql).fetchone()
        got = row[0] if row else None
        if got != 0:
            raise RuntimeError(f"jaffle data check failed: {what}: {got} (expected 0)")


if __name__ == "__main__":  # pragma: no cover - manual use: python build.py OUT.duckdb [SCALE]
    import sys
    import time

    target = Path(sys.argv[1])
    t0 = time.perf_counter()
    build(target, float(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_SCALE)
    print(f"wrote {target} in {time.perf_counter() - t0:.1f} s, {target.stat().st_size / 1e6:.1f} MB")
