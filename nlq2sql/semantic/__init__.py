"""Semantic models: a team's dbt Semantic Layer YAML drives the intent contract and the SQL.

``spec`` reads the YAML (with lines for messages), ``catalog`` resolves metrics, dimensions
and one-hop joins, ``binding`` checks the result against a DuckDB database and reads the
values the prompt and the eval-set checks need.
"""

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
