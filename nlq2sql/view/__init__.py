"""``nlq2sql view``: browse recorded runs in a browser (a local server or a static bundle).

Reads run records only; nothing in the core imports this package. The server binds 127.0.0.1, read-only."""

from __future__ import annotations

from nlq2sql.view.bundle import Bundle, build_bundle, write_bundle
from nlq2sql.view.runs import Run, Runs, find_run_dirs, load_runs

__all__ = ["Bundle", "Run", "Runs", "build_bundle", "find_run_dirs", "load_runs", "write_bundle"]
