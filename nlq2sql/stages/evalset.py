"""Eval sets: JSONL → validated, typed EvalCase objects (line numbers kept for errors)."""

from __future__ import annotations

import gc
import hashlib
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nlq2sql.errors import EvalSetError, Problems
from nlq2sql.inputs import BOM, json_object, not_utf8, regular_file, reusable_rest, split_id
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import DEFAULT_WAREHOUSE, WAREHOUSE_DIR, Catalog
from nlq2sql.stages.intent import Intent, consistency_problem, vocabulary_problem
from nlq2sql.stages.semantic_tools import closest

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from nlq2sql.records.typed import JsonValue

__all__ = ["BLOCK", "CASE_MEMO_SIZE", "CATEGORY", "EVALSET_DIR", "FORMATS_DOC", "ID_MAX_LENGTH", "LIST_VALUES_MAX",
           "CaseIndex", "EvalCase", "EvalSet", "category_of_kind", "evalset_dir", "gold_kind", "index_evalset",
           "load_evalset", "parse_line", "resolve_path", "scan_evalset", "unknown_value"]

EVALSET_DIR = PROJECT_ROOT / "evalsets"
#: Longest case id.
ID_MAX_LENGTH = 128
#: Distinct eval-set lines (all but the id) whose parsed case is remembered while loading (bounded).
CASE_MEMO_SIZE = 4096
#: Categories are reporting labels (per-category tables group by them): any short label.
CATEGORY = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")
#: Where the three question-file formats are documented (messages point there).
FORMATS_DOC = "docs/evalsets.md"
#: A dimension with at most this many values has them all listed when a value is not among them.
LIST_VALUES_MAX = 20
_V1_KEYS = frozenset({"intent", "metric", "dimension", "time_grain", "filters", "order"})
_V2_KEYS = frozenset({"metrics", "group_by", "where", "order_by"})


def category_of_kind(kind: str) -> str:
    """The category a gold's kind gives when a line names none: ``top_n`` for a ranking
    (``top_n_by_metric``), else the kind itself (``breakdown``, ``time_series``, ``listing``)."""
    return "top_n" if kind == "top_n_by_metric" else kind


class EvalCase(BaseModel):
    """One question with its gold intent (its JSON Schema is ``schemas/evalset-line.schema.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="EvalCase")
    id: str = Field(min_length=1, max_length=ID_MAX_LENGTH)
    question: str = Field(min_length=1, max_length=2000)
    gold: Intent
    category: str = Field(default="", description="A reporting label (per-category tables group by it); absent "
                          "or null: derived from the gold's kind (top_n for top_n_by_metric, else the kind).")
    pair_id: str | None = None
    tags: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _derive_category(cls, data: JsonValue) -> JsonValue:
        if isinstance(data, dict) and data.get("category") is None:
            gold = data.get("gold")
            kind = gold.get("intent") if isinstance(gold, dict) else None
            data = {**data, "category": category_of_kind(kind) if isinstance(kind, str) else ""}
        return data


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


def _field_of(err: ErrorDetails) -> str:
    return ".".join(str(p) for p in err["loc"]) or "(line)"


def gold_kind(obj: Mapping[str, JsonValue]) -> str:
    """What a line's gold looks like: ``v1`` (an intent), ``v2`` (a MetricFlow query, or null for an
    unanswerable question), ``gold_sql``, or ``unknown`` -- for messages that name the right reader."""
    if "gold_sql" in obj:
        return "gold_sql"
    gold = obj.get("gold", ...)
    if gold is None or (gold is ... and "answerable" in obj):
        return "v2"
    if isinstance(gold, dict):
        keys = set(gold)
        if "intent" in keys or (keys & _V1_KEYS and not keys & _V2_KEYS):
            return "v1"
        if keys & _V2_KEYS:
            return "v2"
    return "unknown"


#: What a v1 reader says of a line of another kind (the suggestion is the point).
_NOT_V1 = {
    "v2": "the gold is a MetricFlow query (a v2 line): this reader takes v1 intents (--answer intent, the default); "
          f"run the set with --answer query (or convert nothing: `evalset check` reads either; see {FORMATS_DOC})",
    "gold_sql": "a gold-SQL line (gold_sql): `eval` and `evalset check` read such a set in every answer kind; "
                f"a set mixes no kinds of gold (see {FORMATS_DOC})",
}


def unknown_value(wh: Warehouse, dimension: str, value: object, shown: str | None = None) -> str:
    """Why a filter value is not in the data, with what is: the same value in another case, the
    dimension's values when it has few (:data:`LIST_VALUES_MAX`), else the closest (difflib,
    case-insensitive) when it has at most what :meth:`Warehouse.values` lists."""
    import difflib

    text = str(value)
    said = f"value {text!r} is not a known {shown or dimension} in warehouse {wh.name!r}"
    try:
        vals = wh.values(dimension)
    except KeyError:
        return said
    if not vals:
        return said
    same = [v for v in vals if v.casefold() == text.casefold()]
    if same:
        return f"{said} (the data spells it {', '.join(map(repr, same))}: values match case-sensitively)"
    if len(vals) <= LIST_VALUES_MAX:
        return f"{said} (known: {', '.join(map(repr, vals))})"
    folded = {v.casefold(): v for v in vals}
    near = [folded[v] for v in difflib.get_close_matches(text.casefold(), list(folded), n=5, cutoff=0.6)]
    return f"{said} ({len(vals)} values; closest: {', '.join(map(repr, near))})" if near else said


def _closest_known(msg: str, name: str, known: tuple[str, ...]) -> str:
    """``msg`` with the layer's closest names (:func:`~.semantic_tools.closest`)."""

    near = closest(name, known)
    return f"{msg}; closest: {', '.join(map(repr, near))}" if near else msg


def _line_problems(text: str, *, path: str, line: int, catalog: Catalog | Warehouse
                   ) -> tuple[EvalCase | None, list[EvalSetError]]:
    """One JSONL line → (its case, or None, and every problem found in it)."""
    try:
        obj = json_object(text, path=path, line=line, cls=EvalSetError)
    except EvalSetError as exc:
        return None, [exc]
    kind = gold_kind(obj)
    if kind in _NOT_V1:
        return None, [EvalSetError(_NOT_V1[kind], path=path, line=line, field="gold")]
    try:
        case = EvalCase.model_validate(obj)
    except ValidationError as exc:
        return None, [EvalSetError(err["msg"], path=path, line=line, field=_field_of(err)) for err in exc.errors()]
    problems: list[EvalSetError] = []
    if not CATEGORY.match(case.category):
        problems.append(EvalSetError(f"category {case.category!r} must be a short label (letters, digits, _ . -)",
                                     path=path, line=line, field="category"))
    problem = consistency_problem(case.gold)
    if problem:
        problems.append(EvalSetError(f"inconsistent gold intent: {problem}", path=path, line=line, field="gold"))
    wh = catalog if isinstance(catalog, Warehouse) else None
    cat = catalog.catalog if isinstance(catalog, Warehouse) else catalog
    vocab = vocabulary_problem(case.gold, cat)
    if vocab:
        field, msg = vocab
        name = {"metric": case.gold.metric, "dimension": case.gold.dimension}.get(field)
        known = cat.vocabulary.metrics if field == "metric" else cat.vocabulary.dimensions
        msg = _closest_known(msg, name, known) if name and msg.startswith("unknown") else msg
        problems.append(EvalSetError(msg, path=path, line=line, field=f"gold.{field}"))
    elif wh is not None:
        for i, flt in enumerate(case.gold.filters):
            if not wh.has_value(flt.field, flt.value):
                msg = (f"value {flt.value!r} is not a known year in warehouse {wh.name!r} (known: "
                       f"{', '.join(wh.years)})" if flt.field == "year" else unknown_value(wh, flt.field, flt.value))
                problems.append(EvalSetError(msg, path=path, line=line, field=f"gold.filters.{i}.value"))
    return (None if problems else case), problems


def parse_line(text: str, *, path: str, line: int, catalog: Catalog | Warehouse) -> EvalCase:
    """One JSONL line → EvalCase, or EvalSetError naming file, line and field (every problem of the
    line: :class:`~nlq2sql.errors.EvalSetProblems` when there are several)."""
    case, problems = _line_problems(text, path=path, line=line, catalog=catalog)
    if case is None:
        found = Problems(path)
        for p in problems:
            found.add(p)
        found.raise_any()
    assert case is not None
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

    def case(self, text: str, *, path: str, line: int) -> tuple[str, EvalCase | None, list[EvalSetError]]:
        """(the line's id, its case or None, its problems); the case is shared with equal lines: its
        id may be the first's."""
        split = split_id(text)
        if split is not None:
            rid, rest = split
            first = self.memo.get(rest)
            if first is not None and 0 < len(rid) <= ID_MAX_LENGTH:  # what validating the id checks
                return rid, first, []
        case, problems = _line_problems(text, path=path, line=line, catalog=self.catalog)
        if case is None:
            return "", None, problems
        if split is not None and reusable_rest(split[1]):
            if len(self.memo) >= CASE_MEMO_SIZE:
                self.memo.clear()
            self.memo[split[1]] = case
        return case.id, case, []


#: Bytes of whole lines read, decoded and split at a time.
BLOCK = 1 << 20


def _lines(fh: BinaryIO, digest: hashlib._Hash, path: str = "") -> Iterator[str]:
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


def _cases(path: Path, catalog: Catalog | Warehouse, digest: hashlib._Hash, problems: Problems
           ) -> Iterator[tuple[int, str, EvalCase]]:
    """(line, id, case) of each sound line in turn, checked; each problem of the others goes to
    ``problems`` (a byte that is not UTF-8 ends the reading: the lines after it are not read).
    Lines equal but for the id share one case object, whose own id is the first such line's
    (:class:`_CaseMemo`)."""
    memo = _CaseMemo(catalog)
    try:
        with open(regular_file(path, cls=EvalSetError), "rb") as fh:
            for lineno, raw in enumerate(_lines(fh, digest, str(path)), start=1):
                if not raw.strip():
                    problems.add(EvalSetError("empty line", path=str(path), line=lineno))
                    continue
                rid, case, found = memo.case(raw, path=str(path), line=lineno)
                if case is None:
                    for p in found:
                        problems.add(p)
                    continue
                yield lineno, rid, case
    except OSError as exc:
        raise EvalSetError(f"cannot read: {exc.strerror}", path=str(path)) from None
    except EvalSetError as exc:  # not UTF-8: what came before is reported with it
        if exc.line is None:
            raise
        problems.add(exc)


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


def _all_v2(problems: Problems, path: Path, sound: int) -> None:
    """A file whose every line is a v2 line (``sound``: lines read as items): one problem for the
    file, not one a line."""
    if not sound and problems.found and all(p.field == "gold" and str(p).endswith(_NOT_V1["v2"])
                                                    for p in problems.found):
        problems.found = [EvalSetError(f"holds v2 golds (MetricFlow queries) on every line; run it with --answer "
                                       f"query (`evalset check` reads either kind; see {FORMATS_DOC})",
                                       path=str(path))]
        problems.more = 0  # past the first hundred lines, more of the same


def scan_evalset(name_or_path: str | Path, catalog: Catalog | Warehouse, problems: Problems | None = None
                 ) -> tuple[EvalSet, tuple[int, ...]]:
    """The sound items of a set and the line of each; every problem of the others (and duplicate
    ids, an empty file) goes to ``problems`` -- raised together at the end when none is given."""
    path, catalog = _bound(name_or_path, catalog)
    found = problems if problems is not None else Problems(str(path))
    cases: list[EvalCase] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    digest = hashlib.sha256()
    with _gc_paused():
        for lineno, rid, case in _cases(path, catalog, digest, found):
            if rid in seen:
                found.add(_duplicate(rid, seen[rid], path, lineno))
                continue
            seen[rid] = lineno
            cases.append(case if case.id == rid else case.model_copy(update={"id": rid}))
            lines.append(lineno)
    if not cases and not found:
        found.add(EvalSetError("eval set is empty", path=str(path)))
    _all_v2(found, path, len(cases))
    if problems is None:
        found.raise_any()
    es = EvalSet(name=path.stem, path=str(path), sha256=digest.hexdigest(), cases=tuple(cases))
    return es, tuple(lines)


def load_evalset(name_or_path: str | Path, catalog: Catalog | Warehouse) -> EvalSet:
    """Load and validate a whole set; every problem of the file is raised together
    (:class:`~nlq2sql.errors.EvalSetProblems`: file, line and field each).

    Gold intents are checked against a warehouse's vocabulary; given a bound
    :class:`~nlq2sql.semantic.Warehouse`, their filter values must also occur in its data.
    A bare :class:`Catalog` checks names only (no database).  There is no default warehouse:
    the caller names one (the CLI's default is chosen at the CLI).
    """
    return scan_evalset(name_or_path, catalog)[0]


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


def _line_of(position: int, skipped: list[int]) -> int:
    """The line of the item at ``position`` (0-based) when the lines ``skipped`` (ascending) gave none."""
    line = position + 1
    for s in skipped:
        if s > line:
            break
        line += 1
    return line


def index_evalset(name_or_path: str | Path, catalog: Catalog | Warehouse) -> CaseIndex:
    """:func:`load_evalset`'s checks and errors, into a :class:`CaseIndex`."""
    path, catalog = _bound(name_or_path, catalog)
    problems = Problems(str(path))
    ids: dict[str, int] = {}
    shared: list[EvalCase] = []
    skipped: list[int] = []  # lines that gave no item (a position is its line but for those before it)
    digest = hashlib.sha256()
    with _gc_paused():
        for lineno, rid, case in _cases(path, catalog, digest, problems):
            skipped.extend(range(len(shared) + len(skipped) + 1, lineno))
            if rid in ids:
                problems.add(_duplicate(rid, _line_of(ids[rid], skipped), path, lineno))
                skipped.append(lineno)
                continue
            ids[rid] = len(shared)
            shared.append(case)
    if not shared and not problems:
        problems.add(EvalSetError("eval set is empty", path=str(path)))
    _all_v2(problems, path, len(shared))
    problems.raise_any()
    return CaseIndex(name=path.stem, path=str(path), sha256=digest.hexdigest(), ids=ids, shared=shared)
