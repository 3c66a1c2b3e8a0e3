"""Semantic models: a team's dbt Semantic Layer YAML drives the intent contract and the SQL."""

from nlq2sql.semantic.binding import Warehouse, open_warehouse
from nlq2sql.semantic.catalog import (
           DEFAULT_WAREHOUSE,
           Catalog,
           Vocabulary,
           default_catalog,
           load_catalog,
           shipped_names,
)

__all__ = ["DEFAULT_WAREHOUSE", "Catalog", "Vocabulary", "Warehouse", "default_catalog", "load_catalog",
           "open_warehouse", "shipped_names"]
