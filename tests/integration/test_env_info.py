"""The manifests' git state: a run writing committed reports does not make itself dirty."""

from __future__ import annotations

import subprocess
from pathlib import Path

from nlq2sql.env_info import GitState, git_state


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)


def test_changes_under_reports_are_not_dirt_but_code_changes_are(tmp_path: Path) -> None:
    (tmp_path / "reports" / "run").mkdir(parents=True)
    (tmp_path / "reports" / "run" / "records.jsonl").write_text("{}\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "c")
    clean = git_state(tmp_path)
    assert clean.git_dirty is False and len(clean.git_commit or "") == 40

    (tmp_path / "reports" / "run" / "records.jsonl").write_text('{"id": 1}\n')  # a run rewrote it
    (tmp_path / "reports" / "new.md").write_text("untracked\n")
    assert git_state(tmp_path).git_dirty is False

    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_state(tmp_path).git_dirty is True


def test_not_a_checkout_says_unknown(tmp_path: Path) -> None:
    assert git_state(tmp_path) == GitState(git_commit=None, git_dirty=None)
