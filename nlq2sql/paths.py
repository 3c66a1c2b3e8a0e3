"""Where nlq2sql keeps caches (models, warehouse, vLLM state): one place, overridable."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PACKAGE_ROOT", "PROJECT_ROOT", "cache_dir"]

PACKAGE_ROOT = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_ROOT.parent


def cache_dir() -> Path:
    """``$NLQ2SQL_CACHE_DIR`` or ``<project>/.cache``; created on first use."""
    path = Path(os.environ.get("NLQ2SQL_CACHE_DIR") or PROJECT_ROOT / ".cache")
    path.mkdir(parents=True, exist_ok=True)
    return path
