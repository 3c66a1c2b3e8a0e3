"""Where nlq2sql keeps caches (models, warehouse, vLLM state): one place, overridable."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PACKAGE_ROOT", "PROJECT_ROOT", "SPEC_FILE", "WAREHOUSE_DIR", "cache_dir", "shipped_warehouses"]

PACKAGE_ROOT = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_ROOT.parent
#: The shipped warehouses: one folder each, holding its semantic model (and build.py, eval sets).
WAREHOUSE_DIR = PROJECT_ROOT / "warehouses"
SPEC_FILE = "semantic_model.yml"


def shipped_warehouses() -> list[str]:
    """The shipped warehouses' names, sorted: the registry every help text and message lists
    (a folder glob, so the CLI can list them without importing MetricFlow)."""
    return sorted(p.parent.name for p in WAREHOUSE_DIR.glob(f"*/{SPEC_FILE}"))


def cache_dir() -> Path:
    """``$NLQ2SQL_CACHE_DIR`` or ``<project>/.cache``; created on first use."""
    path = Path(os.environ.get("NLQ2SQL_CACHE_DIR") or PROJECT_ROOT / ".cache")
    path.mkdir(parents=True, exist_ok=True)
    return path
