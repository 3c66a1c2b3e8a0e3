"""The ``defog_restaurants`` warehouse: defog's sql-eval database ``restaurants``.

Restaurants, their locations, food types and ratings.

The data is the PostgreSQL ``pg_dump`` text that the ``defog-data`` package (PyPI, 0.1.1)
installs as ``defog_data/restaurants/restaurants.sql``, loaded into DuckDB by
:func:`nlq2sql.semantic.pgdump.build_from_dump` (DDL transpiled by sqlglot, COPY rows cast to
the declared types).  Nothing is downloaded; ``scale`` is ignored (the database is what defog
ships).  Its questions: ``evalsets/sql-eval.jsonl`` (see ``warehouses/defog_restaurants/evalsets/README.md``).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from nlq2sql.semantic.pgdump import build_from_dump

#: Bumped whenever the build changes, so a stale cached warehouse is never reused.
VERSION = 1
DEFAULT_SCALE = 1.0
DATABASE = "restaurants"


def build(out: Path, scale: float = DEFAULT_SCALE) -> None:
    """Write the ``restaurants`` database to ``out`` (a new file)."""
    dump = files("defog_data").joinpath(DATABASE, f"{DATABASE}.sql")
    build_from_dump(out, dump.read_text(encoding="utf-8"), f"defog_data/{DATABASE}/{DATABASE}.sql")
