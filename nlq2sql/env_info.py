"""Facts about the harness itself for manifests: version control state."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from nlq2sql.paths import PROJECT_ROOT

__all__ = ["OUTPUTS", "GitState", "git_info", "git_state"]

#: The committed outputs' folder (relative to the project), left out of the dirty check.
OUTPUTS = "reports"


@dataclass(frozen=True)
class GitState:
    """The checkout a run came from, as the manifest's ``git_commit`` / ``git_dirty`` keys hold it
    (None for both when it is not a git checkout).  Not JSON itself (its values go into the
    manifest's typed ``Origin``), and below ``records``: a plain frozen dataclass."""

    git_commit: str | None
    git_dirty: bool | None


@lru_cache(maxsize=1)
def git_info() -> GitState:
    """Commit and dirty flag of the harness checkout, once per process."""
    return git_state(PROJECT_ROOT)


def git_state(root: Path) -> GitState:
    """Commit and dirty flag (uncommitted changes to tracked files outside ``reports/``) of
    the checkout at ``root``; None for both when it is not a git checkout."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=5, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    commit = git("rev-parse", "HEAD")
    # ``reports/`` holds committed run records, which runs write themselves and nothing reads as
    # input: a run writing there must not make its own (or the next step's) manifest "dirty".
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){OUTPUTS}")
    return GitState(git_commit=commit, git_dirty=bool(status) if status is not None else None)
