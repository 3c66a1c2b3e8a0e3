"""Eval sets: JSONL → validated, typed EvalCase objects (line numbers kept for errors)."""

from __future__ import annotations

import gc
import hashlib
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nlq2sql.errors import EvalSetError
from nlq2sql.inputs import BOM, json_object, not_utf8, regular_file, reusable_rest, split_id
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import DEFAULT_WAREHOUSE, WAREHOUSE_DIR, Catalog
from nlq2sql.stages.intent import Intent, consistency_problem, vocabulary_problem

__all__ = ["BLOCK", "CASE_MEMO_SIZE", "CATEGORY", "EVALSET_DIR", "ID_MAX_LENGTH", "CaseIndex", "EvalCase", "EvalSet",
           "evalset_dir", "index_evalset", "load_evalset", "parse_line", "resolve_path"]

EVALSET_DIR = PROJECT_ROOT / "evalsets"
#: Longest case id.
ID_MAX_LENGTH = 128
#: Distinct eval-set lines (all but the id) whose parsed case is remembered while loading (bounded).
CASE_MEMO_SIZE = 4096
#: Categories are reporting labels (per-category tables group by them): any short label.
CATEGORY = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")


class EvalCase(BaseModel):
    """One question with its gold intent."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1, max_length=ID_MAX_LENGTH)
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


def evalset_dir(warehouse: str) -> Path:
    """Where a shipped warehouse's sets live (the default warehouse's in ``evalsets/``)."""
    return EVALSET_DIR if warehouse == DEFAULT_WAREHOUSE else WAREHOUSE_DIR / warehouse / "evalsets"


def resolve_path(name_or_path: str | Path, warehouse: str) -> Path:
    """A shipped set by name (``heldout``, of the given warehouse) or any JSONL path."""
    path = Path(name_or_path)
    if path.suffix == ".jsonl" or path.exists() or path.is_symlink():  # a dangling link: say so
        return path
    folder = evalset_dir(warehouse)
    shipped = folder / f"{name_or_path}.jsonl"
    if shipped.exists():
        return shipped
    known = ", ".join(sorted(p.stem for p in folder.glob("*.jsonl"))) or "none"
    raise EvalSetError(f"no eval set named '{name_or_path}' for warehouse {warehouse!r} (shipped: {known})")


def _field_of(err: Mapping[str, Any]) -> str:
    return ".".join(str(p) for p in err["loc"]) or "(line)"


def parse_line(text: str, *, path: str, line: int, catalog: Catalog | Warehouse) -> EvalCase:
    """One JSONL line → EvalCase, or EvalSetError naming file, line and field."""
    obj = json_object(text, path=path, line=line, cls=EvalSetError)
    try:
        case = EvalCase.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise EvalSetError(err["msg"], path=path, line=line, field=_field_of(err)) from None
    if not CATEGORY.match(case.category):
        raise EvalSetError(f"category {case.category!r} must be a short label (letters, digits, _ . -)",
                           path=path, line=line, field="category")
    problem = consistency_problem(case.gold)
    if problem:
        raise EvalSetError(f"inconsistent gold intent: {problem}", path=path, line=line, field="gold")
    wh = catalog if isinstance(catalog, Warehouse) else None
    cat = catalog.catalog if isinstance(catalog, Warehouse) else catalog
    vocab = vocabulary_problem(case.gold, cat)
    if vocab:
        raise EvalSetError(vocab[1], path=path, line=line, field=f"gold.{vocab[0]}")
    if wh is not None:
        for i, flt in enumerate(case.gold.filters):
            if not wh.has_value(flt.field, flt.value):
                raise EvalSetError(f"value {flt.value!r} is not a known {flt.field} in warehouse {wh.name!r}",
                                   path=path, line=line, field=f"gold.filters.{i}.value")
    return case


class _CaseMemo:
    """:func:`parse_line` remembered per line content but for the leading id.

    A large eval set is often a few hundred questions repeated under new ids; a repeated
    line (see :func:`inputs.split_id`) gets the case parsed and checked for its first
    occurrence instead of being parsed, validated and checked against the warehouse again.
    Cases made from it share that case's gold intent, question and labels (immutable), so
    the set also holds far less memory.
    """

    def __init__(self, catalog: Catalog | Warehouse) -> None:
        self.catalog = catalog
        self.memo: dict[str, EvalCase] = {}

    def case(self, text: str, *, path: str, line: int) -> tuple[str, EvalCase]:
        """(the line's id, its case); the case is shared with equal lines: its id may be the first's."""
        split = split_id(text)
        if split is not None:
            rid, rest = split
            first = self.memo.get(rest)
            if first is not None and 0 < len(rid) <= ID_MAX_LENGTH:  # what validating the id checks
                return rid, first
        case = parse_line(text, path=path, line=line, catalog=self.catalog)
        if split is not None and reusable_rest(split[1]):
            if len(self.memo) >= CASE_MEMO_SIZE:
                self.memo.clear()
            self.memo[split[1]] = case
        return case.id, case


#: Bytes of whole lines read, decoded and split at a time.
BLOCK = 1 << 20


def _lines(fh: BinaryIO, digest: Any, path: str = "") -> Iterator[str]:
    """Decoded lines, exactly as ``data.decode().splitlines()`` would give, read a block of whole
    lines at a time (decoding and splitting a block costs a fraction of doing it per line) so
    the file is never held in memory twice over.  Strictly UTF-8 (a leading byte-order mark is
    dropped): a byte that is not is refused with its line and byte offset, never replaced (a
    replaced byte would change the question sent to the model) -- after the lines before it."""
    offset = n = 0
    for batch in iter(lambda: fh.readlines(BLOCK), []):  # split on b"\n": never inside a UTF-8 sequence
        chunk = b"".join(batch)
        digest.update(chunk)
        start = len(BOM) if offset == 0 and chunk.startswith(BOM) else 0
        try:
            lines = chunk[start:].decode("utf-8").splitlines()
        except UnicodeDecodeError as exc:
            bad = start + exc.start
            yield from chunk[start:max(start, chunk.rfind(b"\n", 0, bad) + 1)].decode("utf-8").splitlines()
            line = n + len((chunk[start:bad].decode("utf-8") + "x").splitlines())
            raise not_utf8(exc, path=path, line=line, line_offset=offset + start, cls=EvalSetError) from None
        n, offset = n + len(lines), offset + len(chunk)
        yield from lines


def _cases(path: Path, catalog: Catalog | Warehouse, digest: Any) -> Iterator[tuple[str, EvalCase]]:
    """(id, case) of each line in turn (the n-th pair is line n), checked; lines equal but for
    the id share one case object, whose own id is the first such line's (:class:`_CaseMemo`)."""
    memo = _CaseMemo(catalog)
    try:
        with open(regular_file(path, cls=EvalSetError), "rb") as fh:
            for lineno, raw in enumerate(_lines(fh, digest, str(path)), start=1):
                if not raw.strip():
                    raise EvalSetError("empty line", path=str(path), line=lineno)
                yield memo.case(raw, path=str(path), line=lineno)
    except OSError as exc:
        raise EvalSetError(f"cannot read: {exc.strerror}", path=str(path)) from None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing creates no reference cycles: pausing the cyclic collector saves it re-walking
    the growing set of cases every few hundred allocations (a third of the load time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _duplicate(rid: str, first_line: int, path: Path, line: int) -> EvalSetError:
    return EvalSetError(f"duplicate id {rid!r} (first on line {first_line})", path=str(path), line=line, field="id")


def _bound(name_or_path: str | Path, catalog: Catalog | Warehouse) -> tuple[Path, Catalog | Warehouse]:
    return resolve_path(name_or_path, catalog.name), catalog


def load_evalset(name_or_path: str | Path, catalog: Catalog | Warehouse) -> EvalSet:
    """Load and validate a whole set; the first problem raises with its location.

    Gold intents are checked against a warehouse's vocabulary; given a bound
    :class:`~nlq2sql.semantic.Warehouse`, their filter values must also occur in its data.
    A bare :class:`Catalog` checks names only (no database).  There is no default warehouse:
    the caller names one (the CLI's default is chosen at the CLI).
    """
    path, catalog = _bound(name_or_path, catalog)
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    digest = hashlib.sha256()
    with _gc_paused():
        for lineno, (rid, case) in enumerate(_cases(path, catalog, digest), start=1):
            if rid in seen:
                raise _duplicate(rid, seen[rid], path, lineno)
            seen[rid] = lineno
            cases.append(case if case.id == rid else case.model_copy(update={"id": rid}))
    if not cases:
        raise EvalSetError("eval set is empty", path=str(path))
    return EvalSet(name=path.stem, path=str(path), sha256=digest.hexdigest(), cases=tuple(cases))


@dataclass(frozen=True)
class CaseIndex:
    """An eval set as offline re-scoring reads it: each id with its position in the file, and
    per position a case shared by every line equal to it but for the id.

    A shared case's own ``id`` is the first such line's (:meth:`case` gives one with the
    right id).  It holds about a hundred bytes per item where an :class:`EvalSet` holds a case
    per item (about a kilobyte), so a million re-scored items do not need a gigabyte.
    """

    name: str
    path: str
    sha256: str
    ids: dict[str, int]  # id → position (0-based; line position + 1), in file order
    shared: list[EvalCase]  # by position

    def case(self, cid: str) -> EvalCase:
        """The case with id ``cid``, as :func:`load_evalset` gives it."""
        case = self.shared[self.ids[cid]]
        return case if case.id == cid else case.model_copy(update={"id": cid})


def index_evalset(name_or_path: str | Path, catalog: Catalog | Warehouse) -> CaseIndex:
    """:func:`load_evalset`'s checks and errors, into a :class:`CaseIndex`."""
    path, catalog = _bound(name_or_path, catalog)
    ids: dict[str, int] = {}
    shared: list[EvalCase] = []
    digest = hashlib.sha256()
    with _gc_paused():
        for pos, (rid, case) in enumerate(_cases(path, catalog, digest)):
            if rid in ids:
                raise _duplicate(rid, ids[rid] + 1, path, pos + 1)
            ids[rid] = pos
            shared.append(case)
    if not shared:
        raise EvalSetError("eval set is empty", path=str(path))
    return CaseIndex(name=path.stem, path=str(path), sha256=digest.hexdigest(), ids=ids, shared=shared)
