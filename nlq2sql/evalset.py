"""Eval sets: JSONL → validated, typed EvalCase objects (line numbers kept for errors)."""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import EvalSetError
from .intent import Intent, consistency_problem
from .paths import PROJECT_ROOT
from .warehouse import VALUES

EVALSET_DIR = PROJECT_ROOT / "evalsets"
CATEGORIES = ("breakdown", "top_n", "time_series")


class EvalCase(BaseModel):
    """One question with its gold intent."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1, max_length=128)
    question: str = Field(min_length=1, max_length=2000)
    gold: Intent
    category: str
    pair_id: str | None = None
    tags: tuple[str, ...] = ()


class EvalSet(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    path: str
    sha256: str
    cases: tuple[EvalCase, ...]

    def by_id(self) -> dict[str, EvalCase]:
        return {c.id: c for c in self.cases}


def resolve_path(name_or_path: str | Path) -> Path:
    """A shipped set by name (``heldout``) or any JSONL path."""
    path = Path(name_or_path)
    if path.suffix == ".jsonl" or path.exists():
        return path
    shipped = EVALSET_DIR / f"{name_or_path}.jsonl"
    if shipped.exists():
        return shipped
    known = ", ".join(sorted(p.stem for p in EVALSET_DIR.glob("*.jsonl")))
    raise EvalSetError(f"no eval set named '{name_or_path}' (shipped: {known})")


def _field_of(err: Mapping[str, Any]) -> str:
    return ".".join(str(p) for p in err["loc"]) or "(line)"


def parse_line(text: str, *, path: str, line: int) -> EvalCase:
    """One JSONL line → EvalCase, or EvalSetError naming file, line and field."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvalSetError(f"malformed JSON ({exc.msg} at column {exc.colno})", path=path,
                           line=line) from None
    if not isinstance(obj, dict):
        raise EvalSetError("each line must be a JSON object", path=path, line=line)
    try:
        case = EvalCase.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise EvalSetError(err["msg"], path=path, line=line, field=_field_of(err)) from None
    if case.category not in CATEGORIES:
        raise EvalSetError(f"unknown category {case.category!r} (allowed: {', '.join(CATEGORIES)})",
                           path=path, line=line, field="category")
    problem = consistency_problem(case.gold)
    if problem:
        raise EvalSetError(f"inconsistent gold intent: {problem}", path=path, line=line, field="gold")
    for i, flt in enumerate(case.gold.filters):
        if flt.value not in VALUES[flt.field]:
            raise EvalSetError(f"value {flt.value!r} is not a known {flt.field}", path=path,
                               line=line, field=f"gold.filters.{i}.value")
    return case


def _lines(fh: BinaryIO, digest: Any) -> Iterator[str]:
    """Decoded lines, exactly as ``data.decode(errors="replace").splitlines()`` would give,
    read one line at a time so the file is never held in memory twice over."""
    for chunk in fh:  # split on b"\n" only, which never occurs inside a UTF-8 sequence
        digest.update(chunk)
        yield from chunk.decode("utf-8", errors="replace").splitlines()


def load_evalset(name_or_path: str | Path) -> EvalSet:
    """Load and validate a whole set; the first problem raises with its location."""
    path = resolve_path(name_or_path)
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    digest = hashlib.sha256()
    # Parsing creates no reference cycles: pausing the cyclic collector saves it re-walking
    # the growing list of cases every few hundred allocations (a third of the load time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with open(path, "rb") as fh:
            for lineno, raw in enumerate(_lines(fh, digest), start=1):
                if not raw.strip():
                    raise EvalSetError("empty line", path=str(path), line=lineno)
                case = parse_line(raw, path=str(path), line=lineno)
                if case.id in seen:
                    raise EvalSetError(f"duplicate id {case.id!r} (first on line {seen[case.id]})",
                                       path=str(path), line=lineno, field="id")
                seen[case.id] = lineno
                cases.append(case)
    except OSError as exc:
        raise EvalSetError(f"cannot read: {exc.strerror}", path=str(path)) from None
    finally:
        if gc_was_enabled:
            gc.enable()
    if not cases:
        raise EvalSetError("eval set is empty", path=str(path))
    return EvalSet(name=path.stem, path=str(path), sha256=digest.hexdigest(), cases=tuple(cases))
