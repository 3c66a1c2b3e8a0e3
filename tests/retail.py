"""The retail warehouse, named where a test uses it.

Core functions take no default warehouse (issue 24): a test that means the shipped ``retail``
says so through these two names instead of relying on a fallback.
"""

from __future__ import annotations

from nlq2sql.semantic.binding import Warehouse, open_warehouse
from nlq2sql.semantic.catalog import Catalog, load_catalog

__all__ = ["RETAIL", "retail_wh"]

#: The shipped retail semantic model (names only: no database).
RETAIL: Catalog = load_catalog("retail")


def retail_wh() -> Warehouse:
    """The retail model bound to its database (filter values checked against the data)."""
    return open_warehouse("retail")
