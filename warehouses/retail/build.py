"""The ``retail`` warehouse's data: a deterministic synthetic retail star schema in DuckDB.

Generated with numpy's PCG64 from a fixed seed and stored with exact DECIMAL money, so
the same query returns the same bytes on every machine.  One fact table of order lines
and dimension tables for products (with categories), customers (segment, region),
channels and dates.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

SEED = 20240101
BASE_LINES = 100_000
START = dt.date(2024, 1, 1)
END = dt.date(2025, 12, 31)

REGIONS = ("North", "South", "East", "West", "Central")
SEGMENTS = ("Consumer", "Corporate", "Small Business")
CHANNELS = ("Online", "Retail", "Partner", "Phone")
CATEGORY_PRODUCTS: dict[str, tuple[str, ...]] = {
    "Electronics": ("Laptop", "Tablet", "Headphones", "Monitor", "Smartphone", "Camera"),
    "Furniture": ("Desk", "Office Chair", "Bookshelf", "Filing Cabinet", "Sofa", "Lamp"),
    "Office Supplies": ("Paper", "Pens", "Stapler", "Notebook", "Printer Ink", "Binder"),
    "Apparel": ("T-Shirt", "Jacket", "Sneakers", "Backpack", "Hat", "Jeans"),
    "Grocery": ("Coffee", "Tea", "Snacks", "Water", "Cereal", "Chocolate"),
}
CATEGORIES = tuple(CATEGORY_PRODUCTS)
PRODUCTS = tuple(p for ps in CATEGORY_PRODUCTS.values() for p in ps)
YEARS = tuple(str(y) for y in range(START.year, END.year + 1))

#: Allowed values per filter field, for eval-set checks and prompts.
VALUES: dict[str, tuple[str, ...]] = {
    "region": REGIONS, "segment": SEGMENTS, "channel": CHANNELS,
    "category": CATEGORIES, "product": PRODUCTS, "year": YEARS,
}

N_CUSTOMERS = 2_000


#: Bumped whenever generation changes, so a stale cached warehouse is never reused.
VERSION = 2
DEFAULT_SCALE = 1.0


def _frames(scale: float) -> dict[str, pd.DataFrame]:
    rng = np.random.Generator(np.random.PCG64(SEED))
    n_lines = int(BASE_LINES * scale)
    products = pd.DataFrame({
        "product_id": np.arange(1, len(PRODUCTS) + 1, dtype=np.int32),
        "product_name": list(PRODUCTS),
        "category": [c for c, ps in CATEGORY_PRODUCTS.items() for _ in ps],
        "list_price": np.round(rng.uniform(3, 1500, len(PRODUCTS)), 2),
    })
    customers = pd.DataFrame({
        "customer_id": np.arange(1, N_CUSTOMERS + 1, dtype=np.int32),
        "segment": rng.choice(SEGMENTS, N_CUSTOMERS, p=[0.55, 0.3, 0.15]),
        "region": rng.choice(REGIONS, N_CUSTOMERS, p=[0.24, 0.22, 0.2, 0.19, 0.15]),
    })
    channels = pd.DataFrame({"channel_id": np.arange(1, len(CHANNELS) + 1, dtype=np.int32),
                             "channel_name": list(CHANNELS)})
    days = pd.date_range(START, END, freq="D")
    dates = pd.DataFrame({"date_key": days.date, "year": days.year.astype(np.int32),
                          "quarter": days.quarter.astype(np.int32),
                          "month": days.month.astype(np.int32)})
    # Orders carry customer, channel and date; lines carry product, quantity and price.
    n_orders = max(1, n_lines * 2 // 5)
    order_day = rng.integers(0, len(days), n_orders)
    order_customer = rng.integers(1, N_CUSTOMERS + 1, n_orders)
    order_channel = rng.choice(np.arange(1, len(CHANNELS) + 1), n_orders, p=[0.4, 0.3, 0.2, 0.1])
    line_order = np.sort(rng.integers(0, n_orders, n_lines))
    product_idx = rng.integers(0, len(PRODUCTS), n_lines)
    price_cents = np.round(products["list_price"].to_numpy()[product_idx] * 100
                           * rng.uniform(0.9, 1.1, n_lines)).astype(np.int64)
    facts = pd.DataFrame({
        "order_id": (line_order + 1).astype(np.int64),
        "order_date": days.date[order_day[line_order]],
        "customer_id": order_customer[line_order].astype(np.int32),
        "channel_id": order_channel[line_order].astype(np.int32),
        "product_id": (product_idx + 1).astype(np.int32),
        "quantity": rng.integers(1, 6, n_lines).astype(np.int32),
        "unit_price_cents": price_cents,
        "discount_pct": rng.choice([0, 0, 0, 5, 10, 15, 20], n_lines).astype(np.int32),
    })
    return {"products": products, "customers": customers, "channels": channels,
            "dates": dates, "facts": facts}


def build(out: Path, scale: float = DEFAULT_SCALE) -> None:
    """Write the warehouse to a new DuckDB file ``out`` (the caller renames it into place)."""
    frames = _frames(scale)
    con = duckdb.connect(str(out))
    try:
        for name, df in frames.items():
            con.register(f"_{name}", df)
        con.execute("CREATE TABLE products AS SELECT product_id, product_name, category, "
                    "CAST(list_price AS DECIMAL(10,2)) AS list_price FROM _products ORDER BY product_id")
        con.execute("CREATE TABLE customers AS SELECT * FROM _customers ORDER BY customer_id")
        con.execute("CREATE TABLE channels AS SELECT * FROM _channels ORDER BY channel_id")
        con.execute("CREATE TABLE dates AS SELECT * FROM _dates ORDER BY date_key")
        con.execute(
            "CREATE TABLE order_lines AS SELECT order_id, "
            "ROW_NUMBER() OVER (PARTITION BY order_id ORDER BY product_id, quantity, unit_price_cents) AS line_no, "
            "order_date, customer_id, channel_id, product_id, quantity, "
            # DECIMAL / INTEGER is DOUBLE in DuckDB: scale by a DECIMAL literal to stay exact.
            "CAST(unit_price_cents * 0.01 AS DECIMAL(12,2)) AS unit_price, "
            "CAST(discount_pct * 0.01 AS DECIMAL(4,2)) AS discount FROM _facts ORDER BY order_id, line_no")
        con.execute("CHECKPOINT")
    finally:
        con.close()
