"""The ``defog_geography`` warehouse: defog's sql-eval database ``geography``.

US states, cities, rivers, lakes, mountains and borders (the GeoQuery schema).

The data is what the ``defog-data`` package (PyPI, 0.1.1) ships, loaded by
:func:`nlq2sql.semantic.pgdump.build_defog_database`; ``scale`` is ignored.  Its questions:
``evalsets/sql-eval.jsonl`` (see ``evalsets/README.md`` beside this file).
"""

from __future__ import annotations

from pathlib import Path

from nlq2sql.semantic.pgdump import build_defog_database

#: Bumped whenever the build changes, so a stale cached warehouse is never reused.
VERSION = 1
DEFAULT_SCALE = 1.0
DATABASE = "geography"


def build(out: Path, scale: float = DEFAULT_SCALE) -> None:
    """Write the ``geography`` database to ``out`` (a new file)."""
    build_defog_database(out, DATABASE)
