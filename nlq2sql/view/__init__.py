"""``nlq2sql view``: browse recorded runs in a browser (a local server or a static bundle).

Reads run records only (``manifest.json``, ``records.jsonl``, ``summary.json``); nothing in
the core imports this package.  :mod:`.discover` finds run directories (at any depth),
:mod:`.runs` loads and checks them,
:mod:`.bundle` turns them into the page's files (HTML, script, style and data scripts),
:mod:`.server` serves those files on 127.0.0.1, read-only.
"""

from __future__ import annotations

from nlq2sql.view.bundle import Bundle, build_bundle, write_bundle
from nlq2sql.view.runs import Run, Runs, find_run_dirs, load_runs

__all__ = ["Bundle", "Run", "Runs", "build_bundle", "find_run_dirs", "load_runs", "write_bundle"]
