"""Per-case snapshots: one file per case under ``tests/snapshots/<test module>/``.

A JSON value is compared **as parsed**: dicts regardless of key order, lists in order, and every
scalar with its JSON type (``1`` is not ``1.0``, ``True`` is not ``1``; floats compared exactly,
``NaN`` equal to itself).  A text value (a rendered Markdown or HTML page, where the text is the
product) is compared as text.  Snapshot JSON files are written with sorted keys, so a file changes
only when a value does.

``pytest --snapshot-update`` (or ``NLQ2SQL_SNAPSHOT_UPDATE=1``) writes the snapshots that are
missing or different instead of failing, and removes the files of a module's folder that no case
checked when the test calls :meth:`Snapshots.assert_complete`.  Review the diff (``git diff
tests/snapshots``) before committing it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["SNAPSHOTS", "UPDATE_ENV", "Snapshots", "assert_same_json", "assert_snapshot", "first_difference",
           "same_json", "update_requested"]

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE_ENV = "NLQ2SQL_SNAPSHOT_UPDATE"
#: A text case keeps the suffix its name ends with when it is one of these; else ``.txt``.
TEXT_SUFFIXES = (".md", ".html", ".txt", ".csv")
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


def _typed(x: Any) -> Any:
    """A JSON value with each scalar tagged by its type, for an equality that is JSON's."""
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, bool):
        return ("bool", x)
    if isinstance(x, int):
        return ("int", x)
    if isinstance(x, float):
        return ("float", x.hex())  # exact; NaN equals NaN, -0.0 is not 0.0
    if isinstance(x, dict):
        return {("key", k): _typed(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_typed(v) for v in x]
    raise TypeError(f"not a JSON value: {type(x).__name__}")


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are equal as parsed: key order ignored, scalar types kept."""
    return bool(_typed(a) == _typed(b))


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def first_difference(want: Any, got: Any, at: str = "$") -> str:
    """Where two JSON values first differ (a path like ``$.a[2].b``), for the failure message."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got), key=str):
            if k not in got:
                return f"{at}.{k}: missing (snapshot has {json.dumps(want[k])[:200]})"
            if k not in want:
                return f"{at}.{k}: not in the snapshot (value {json.dumps(got[k])[:200]})"
            if not same_json(want[k], got[k]):
                return first_difference(want[k], got[k], f"{at}.{k}")
    if isinstance(want, list) and isinstance(got, list):
        for i, (w, g) in enumerate(zip(want, got, strict=False)):
            if not same_json(w, g):
                return first_difference(w, g, f"{at}[{i}]")
        if len(want) != len(got):
            return f"{at}: {len(got)} items, the snapshot has {len(want)}"
    return f"{at}: {json.dumps(got)[:200]} ({type(got).__name__}), the snapshot has {json.dumps(want)[:200]} " \
           f"({type(want).__name__})"


def assert_same_json(got: Any, want: Any, what: object = "") -> None:
    """Assert two JSON values equal as parsed, naming where they first differ."""
    assert same_json(want, got), f"{what}: {first_difference(want, got)}"


def _first_line_difference(want: str, got: str) -> str:
    """The first line where two texts differ, for the failure message."""
    a, b = want.splitlines(keepends=True), got.splitlines(keepends=True)
    for i, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if x != y:
            return f"the text differs at line {i}: {y!r}, the snapshot has {x!r}"
    return f"the text differs: {len(b)} lines, the snapshot has {len(a)}"


def update_requested() -> bool:
    return os.environ.get(UPDATE_ENV, "") not in ("", "0")


class Snapshots:
    """The snapshots of one test module (``folder``); ``update``: write instead of failing."""

    def __init__(self, folder: Path, update: bool = False) -> None:
        self.folder = folder
        self.update = update
        self.checked: dict[Path, str] = {}
        self.written: list[Path] = []

    def path_for(self, case: str, value: Any) -> Path:
        """The case's file: its name split at ``/`` and ``:`` into folders, unsafe characters as ``_``."""
        parts = [_UNSAFE.sub("_", p) for p in re.split(r"[/:]", case)]
        if not case or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"snapshot case {case!r}: not a usable name")
        name = parts[-1]
        if isinstance(value, str):
            if not name.endswith(TEXT_SUFFIXES):
                name += ".txt"
        elif not name.endswith(".json"):
            name += ".json"
        return self.folder.joinpath(*parts[:-1], name)

    def check(self, case: str, value: Any) -> None:
        """Assert that ``value`` (a JSON value, or a ``str`` for text) is the case's snapshot."""
        path = self.path_for(case, value)
        other = self.checked.setdefault(path, case)
        assert other == case, f"snapshot cases {other!r} and {case!r} share the file {path}"
        rel = path.relative_to(SNAPSHOTS.parents[1]) if path.is_relative_to(SNAPSHOTS.parents[1]) else path
        if isinstance(value, str):
            old = path.read_text(encoding="utf-8") if path.is_file() else None
            same = old == value
            text = value
            why = "" if old is None or same else _first_line_difference(old, value)
        else:
            text = _dump(value)
            want = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
            same = path.is_file() and same_json(want, value)
            why = "" if same or not path.is_file() else first_difference(want, value)
        if same:
            return
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            self.written.append(path)
            return
        if not path.is_file():
            raise AssertionError(f"{case}: no snapshot {rel}; run pytest with --snapshot-update to write it")
        raise AssertionError(f"{case}: not its snapshot {rel}: {why}; if the change is meant, run pytest with "
                             f"--snapshot-update and review the diff")

    def assert_complete(self) -> None:
        """Every file in the module's folder was checked: a case no longer produced fails (or, when
        updating, its file is removed)."""
        stale = sorted(p for p in self.folder.rglob("*") if p.is_file() and p not in self.checked) \
            if self.folder.is_dir() else []
        if self.update:
            for p in stale:
                p.unlink()
            for d in sorted((d for d in self.folder.rglob("*") if d.is_dir()), reverse=True):
                if not any(d.iterdir()):
                    d.rmdir()
            return
        assert not stale, f"{len(stale)} snapshot(s) no case checks (a case no longer produced?), e.g. " \
                          f"{[str(p.relative_to(self.folder)) for p in stale[:5]]}; --snapshot-update removes them"


def assert_snapshot(folder: Path | str, case: str, value: Any, update: bool | None = None) -> None:
    """One case's check outside the fixture: ``folder`` under ``tests/snapshots`` (a test module's name)."""
    root = SNAPSHOTS / folder if isinstance(folder, str) else folder
    Snapshots(root, update_requested() if update is None else update).check(case, value)
