"""Facts about the harness itself for manifests: version control state."""

from __future__ import annotations

import subprocess
from functools import lru_cache
from typing import Any

from .paths import PROJECT_ROOT


@lru_cache(maxsize=1)
def git_info() -> dict[str, Any]:
    """Commit and dirty flag of the harness checkout; None when not a git checkout."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                                  timeout=5, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}
