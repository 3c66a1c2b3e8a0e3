"""Which run directories the viewer's arguments name, and how to show them without machine paths.

An argument is a run directory (``manifest.json``) or a folder with runs at any depth, walked in
natural order; a run directory is a leaf; dot-folders are not entered; a symlinked folder is not
entered (no loops); what cannot be listed is noted, not fatal. A run is shown by a relative path
(from the working directory, else from the argument's name), so a bundle has no absolute path and
same-named runs are told apart by their parents."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from nlq2sql.errors import InputError, RecordError
from nlq2sql.records.store import MANIFEST

__all__ = ["Discovery", "Found", "discover", "natural", "shown_root", "unique_names"]


@dataclass(frozen=True)
class Found:
    """A run directory: where it is, how the page shows it, and whether it was named directly
    (then a run that cannot be read is an error) or found by walking (then it is skipped)."""

    path: Path
    shown: str
    direct: bool


@dataclass
class Discovery:
    found: list[Found] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "shown path: why", for the page and stderr


def natural(name: str) -> list[int | str]:
    """Sort key: ``c2`` before ``c16``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def shown_root(arg: Path) -> PurePosixPath:
    """How an argument is shown: relative to the working directory when inside it, else its name."""
    real = arg.resolve()
    try:
        rel = real.relative_to(Path.cwd().resolve())
    except ValueError:
        rel = None
    if rel is not None and rel.parts:
        return PurePosixPath(*rel.parts)
    return PurePosixPath(real.name or "run")


def _is_run(d: Path) -> bool:
    try:
        return (d / MANIFEST).is_file()
    except OSError:
        return False


def _walk(top: Path, root: PurePosixPath, out: Discovery) -> None:
    def shown(p: str | Path) -> str:
        try:
            return str(root / PurePosixPath(*Path(p).relative_to(top).parts))
        except ValueError:
            return str(root)

    def unreadable(exc: OSError) -> None:
        out.skipped.append(f"{shown(exc.filename or top)}: cannot list: {exc.strerror or exc}")

    linked: list[Found] = []  # after the walk: a run reached by its real path is shown by that
    for dirpath, dirnames, _ in os.walk(top, onerror=unreadable, followlinks=False):
        here = Path(dirpath)
        if here != top and _is_run(here):
            out.found.append(Found(here, shown(here), direct=False))
            dirnames[:] = []
            continue
        keep = []
        for name in sorted(dirnames, key=natural):
            sub = here / name
            if name.startswith("."):
                continue
            if sub.is_symlink():  # looked at, never entered
                if _is_run(sub):
                    linked.append(Found(sub, shown(sub), direct=False))
                continue
            keep.append(name)
        dirnames[:] = keep
    out.found += linked


def discover(paths: list[Path]) -> Discovery:
    """The runs the arguments name, in order, each once (by real path), with what was skipped."""
    if not paths:
        raise InputError("give at least one run directory", field="RUN_DIR")
    out = Discovery()
    for p in paths:
        if not p.exists():
            raise InputError("no such directory", path=str(p))
        if not p.is_dir():
            raise InputError("not a run directory (a run directory holds manifest.json and records.jsonl)",
                             path=str(p))
        root = shown_root(p)
        if (p / MANIFEST).exists():
            out.found.append(Found(p, str(root), direct=True))
            continue
        before = len(out.found)
        _walk(p, root, out)
        if len(out.found) == before:
            raise RecordError("not a run directory: no manifest.json here or in its sub-directories"
                              + (f" ({'; '.join(out.skipped)})" if out.skipped else ""), path=str(p))
    unique: list[Found] = []
    seen: set[Path] = set()
    for f in out.found:
        real = f.path.resolve()
        if real not in seen:
            seen.add(real)
            unique.append(f)
    out.found = unique
    return out


def unique_names(shown: list[str]) -> list[str]:
    """For each shown path, its shortest tail of folders that no other run shares
    (``a-baseline-flat`` becomes ``tpch-heldout/a-baseline-flat`` when several exist)."""
    parts = [PurePosixPath(s).parts or (s,) for s in shown]
    depth = [1] * len(parts)
    while True:
        tails = ["/".join(p[-d:]) for p, d in zip(parts, depth, strict=True)]
        clash = {t for t, n in Counter(tails).items() if n > 1}
        grow = [i for i, t in enumerate(tails) if t in clash and depth[i] < len(parts[i])]
        if not grow:
            return tails
        for i in grow:
            depth[i] += 1
