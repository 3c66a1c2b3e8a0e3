"""Find, read and check run directories for the viewer; paired statistics between runs.

A run named directly that cannot be read is one :class:`~nlq2sql.errors.InputError` naming path (and
line); one found below a folder is skipped with a note, so one broken run hides no other. A run is
read in one pass and kept compact (each record's JSON text verbatim, plus a few columns per item),
so 100k items stay cheap. Lines are checked against :class:`~nlq2sql.records.item.ItemRecord`; a
line that is JSON with an id but not a record is still shown, with a note naming the first such
line and field. Columns are declared once (:func:`_row`) over the flat keys of the parsed object."""

from __future__ import annotations

import gc
import hashlib
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlq2sql.errors import InputError, RecordError
from nlq2sql.inputs import check_json_depth
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import RECORDS, SUMMARY
from nlq2sql.view.discover import discover, unique_names
from nlq2sql.view.headline import headline

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["COLUMNS", "TEXTS", "Pair", "Run", "RunFacts", "Runs", "find_run_dirs", "load_run", "load_runs",
           "mcnemar_exact", "paired", "text_hash"]

#: Per-item columns kept for the page (the Items table, plots, comparison).
COLUMNS = ("id", "question", "category", "status", "final_status", "error_raw", "error_final", "correct_raw",
           "correct_final", "correct_exec", "schema_valid", "latency_s", "ttft_s", "completion_tokens",
           "interventions", "interventions_ok", "outcome", "raw_hash", "prompt_tokens", "gold_kind", "pred_kind",
           "rules")
#: Per-item text searched on request (raw model output, SQL), sent to the page only when asked for.
TEXTS = ("raw_text", "sql")


def _text(v: object) -> str | None:
    return None if v is None else str(v)


def _str_or_none(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _count(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class RunFacts:
    """What the viewer itself reads of a manifest, read once where the file is read and tolerantly
    (a file from anywhere: a key missing or of another type is None, never an error).  The
    manifest is still handed to the page as read; these are the facts the viewer acts on."""

    model: str | None  # the label's parts: any value as text, as the label always showed it
    prompt: str | None
    concurrency: str | None
    evalset: str | None
    semantic_model: str | None  # None: a run from before it was recorded (retail)
    evalset_key: str
    guardrails: list[str]  # the names (strings only): the cue explanations' rule sets
    guardrails_shown: list[str]  # every entry as text: the label's
    n_items: int | None
    limit: int | None
    server_version: str | None  # (from ``server``)
    max_model_len: int | None

    @classmethod
    def of(cls, m: dict[str, Any]) -> RunFacts:  # (the manifest just read: the read edge)
        g = m.get("guardrails")
        server = m.get("server")
        server = server if isinstance(server, dict) else {}
        return cls(model=_text(m.get("model")), prompt=_text(m.get("prompt")),
                   concurrency=_text(m.get("concurrency")), evalset=_text(m.get("evalset")),
                   semantic_model=str(m["semantic_model"]) if m.get("semantic_model") else None,
                   evalset_key=str(m.get("evalset_sha256") or m.get("evalset") or "?"),
                   guardrails=[x for x in g if isinstance(x, str)] if isinstance(g, list) else [],
                   guardrails_shown=[str(x) for x in g] if isinstance(g, list) else [],
                   n_items=_count(m.get("n_items")), limit=_count(m.get("limit")),
                   server_version=_str_or_none(server.get("server_version")),
                   max_model_len=_count(server.get("max_model_len")))


@dataclass
class Run:
    """One run directory as the viewer sees it: the manifest and summary as read (the page's
    data, JSON from an untrusted directory), the facts the viewer uses, the items' columns."""

    key: int
    path: Path
    manifest: dict[str, Any]
    summary: dict[str, Any] | None
    facts: RunFacts
    cols: dict[str, list[JsonValue]]
    lines: list[str]  # each record's JSON text
    texts: dict[str, list[str | None]] = field(default_factory=dict)  # TEXTS per item
    notes: list[str] = field(default_factory=list)
    shown: str = ""  # the folder as the page shows it: relative, never a machine path
    name: str = ""  # the shortest tail of ``shown`` no other loaded run shares
    with_warehouse: bool = False  # the label names the warehouse (when the runs span several)

    @property
    def n(self) -> int:
        return len(self.lines)

    @property
    def warehouse(self) -> str:
        """The semantic model the run used; runs from before it was recorded used retail."""
        return self.facts.semantic_model or "retail"

    @property
    def label(self) -> str:
        """Folder, model, prompt (+ guardrails), warehouse when it tells runs apart, concurrency and
        eval set; a fact the manifest lacks is left out, never shown as "?"."""
        f = self.facts
        guard_s = " + " + "+".join(f.guardrails_shown) if f.guardrails_shown else ""
        prompt = f"{f.prompt}{guard_s}" if f.prompt is not None else guard_s.lstrip(" +") or None
        parts = [self.name or self.path.name, f.model, prompt, self.warehouse if self.with_warehouse else None,
                 f"c={f.concurrency}" if f.concurrency is not None else None, f.evalset]
        return " · ".join(p for p in parts if p is not None and p != "")

    @property
    def evalset_key(self) -> str:
        """Runs with equal keys are runs of the same eval set (compared item by item)."""
        return self.facts.evalset_key

    @property
    def guardrails(self) -> list[str]:
        return self.facts.guardrails


def find_run_dirs(paths: list[Path]) -> list[Path]:
    """The run directories the arguments name (at any depth below a folder), in order, each once."""
    return [f.path for f in discover(paths).found]


def _str(v: object) -> str | None:
    return None if v is None else v if isinstance(v, str) else json.dumps(v)


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def text_hash(text: object) -> str | None:
    """A short SHA-256 of the raw output's UTF-8 bytes (None when there is no text)."""
    if not isinstance(text, str):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _clean(obj: JsonValue) -> JsonValue:
    """NaN and infinities (which Python's json may have written) become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


class _Reader:
    """Reads records.jsonl like :func:`nlq2sql.records.store.iter_records` (a torn last line is
    skipped, a malformed line before it is an error), keeping each line's text and columns."""

    def __init__(self) -> None:
        self.cols: dict[str, list[JsonValue]] = {k: [] for k in COLUMNS}
        self.texts: dict[str, list[str | None]] = {k: [] for k in TEXTS}
        self.lines: list[str] = []
        self._appends = [self.cols[k].append for k in COLUMNS] + [self.texts[k].append for k in TEXTS]
        self.untyped = 0  # lines shown that are not records (read tolerantly)
        self.first_untyped: str | None = None
        self._special = False

    def _constant(self, name: str) -> float:
        self._special = True
        return float(name)

    def read(self, path: Path) -> None:
        if not path.is_file():
            raise RecordError("missing (a run directory holds manifest.json and records.jsonl)", path=str(path))
        with open(path, "rb") as fh:
            data = fh.read()
        pos, lineno, end = 0, 0, len(data)
        while pos < end:
            nl = data.find(b"\n", pos)
            lineno += 1
            if nl < 0:
                return  # torn tail of a killed writer
            raw = data[pos:nl]
            pos = nl + 1
            try:
                text = raw.decode("utf-8")
                # nested too deep for json: refused naming the run's file and line, as gate and compare do
                check_json_depth(text, path=str(path), line=lineno, cls=RecordError)
                self._special = False
                rec = json.loads(text, parse_constant=self._constant)
            except (UnicodeDecodeError, json.JSONDecodeError):
                if pos < end:
                    raise RecordError("malformed record", path=str(path), line=lineno) from None
                return  # an unparsable last line is torn as well
            if not isinstance(rec, dict):
                raise RecordError("record is not a JSON object", path=str(path), line=lineno)
            rid = rec.get("id")
            if not isinstance(rid, str | int) or isinstance(rid, bool):
                raise RecordError("missing or not a string", path=str(path), line=lineno, field="id")
            if self._special:
                text = json.dumps(_clean(rec))
            try:
                ItemRecord.from_json(rec, path=RECORDS, line=lineno)
            except RecordError as exc:
                self.untyped += 1
                if self.first_untyped is None:
                    self.first_untyped = str(exc)
            self.add(rec.get, text.strip())

    def add(self, get: Callable[[str], JsonValue], text: str) -> None:
        """Append one item's columns and texts (:data:`COLUMNS`, :data:`TEXTS`) read with ``get``."""
        row = _row(get)
        for append, value in zip(self._appends, row, strict=True):
            append(value)
        self.lines.append(text)


def _kinds(gold: JsonValue, raw: JsonValue) -> tuple[str | None, str | None]:
    """The kinds the summary's confusion matrix counts: gold's intent, the raw answer's (or invalid)."""
    return (_str(gold.get("intent")) if isinstance(gold, dict) else None,
            (_str(raw.get("intent")) or "invalid") if isinstance(raw, dict) else "invalid")


def _row(get: Callable[[str], JsonValue]) -> tuple[JsonValue, ...]:
    """An item's :data:`COLUMNS` and :data:`TEXTS`, declared once over an accessor of its flat keys:
    a record's :meth:`~nlq2sql.records.item.ItemRecord.get` (read through its parts), or the parsed
    object's ``get`` for a line that is JSON with an id but not a record.  Each value is checked for
    its type, which a record's always passes, so both readings give the same columns."""
    ivs = get("interventions")
    ivs = ivs if isinstance(ivs, list) else []
    question, raw_intent, raw_text, sql = get("question"), get("raw_intent"), get("raw_text"), get("sql")
    return (str(get("id")), question if isinstance(question, str) else _str(question) or "",
            _str(get("category")) or "", _str(get("status")), _str(get("final_status")),
            _str(get("error_raw")), _str(get("error_final")), int(get("correct_raw") is True),
            int(get("correct_final") is True), int(get("correct_exec") is True), int(raw_intent is not None),
            _num(get("latency_s")), _num(get("ttft_s")), _num(get("completion_tokens")), len(ivs),
            int(bool(ivs) and all(isinstance(iv, dict) and iv.get("correct") is True for iv in ivs)),
            _str(get("outcome")), text_hash(raw_text), _num(get("prompt_tokens")),
            *_kinds(get("gold_intent"), raw_intent),
            [str(iv.get("rule")) for iv in ivs if isinstance(iv, dict)] or None,
            raw_text if isinstance(raw_text, str) else None, sql if isinstance(sql, str) else None)


def load_run(key: int, path: Path, shown: str | None = None) -> Run:
    run = RunDir(path)
    manifest = run.manifest_json()
    reader = _Reader()
    enabled = gc.isenabled()
    gc.disable()  # many small objects, none cyclic: the collector would only rescan them
    try:
        reader.read(path / RECORDS)
    finally:
        if enabled:
            gc.enable()
    notes: list[str] = []
    summary: dict[str, Any] | None = None
    if (path / SUMMARY).exists():
        summary = run.summary_json()
    else:
        notes.append("summary.json missing (an unfinished run?): headline figures computed from records.jsonl")
        summary = headline(reader.cols).to_json()  # (the page's data: JSON, as a summary read)
    if reader.untyped:
        notes.append(f"{reader.untyped} line(s) of records.jsonl are not records, shown as read "
                     f"(first: {reader.first_untyped})")
    ids = reader.cols["id"]
    if len(set(ids)) != len(ids):
        notes.append(f"{len(ids) - len(set(ids))} duplicate item ids in records.jsonl")
    facts = RunFacts.of(manifest)
    if facts.n_items is not None:
        expected = facts.n_items if facts.limit is None else min(facts.n_items, facts.limit)
        if expected != len(ids):
            notes.append(f"{len(ids)} of {expected} items recorded")
    return Run(key, path, manifest, summary, facts, reader.cols, reader.lines, reader.texts, notes,
               shown=shown or path.name)


class Runs(list[Run]):
    """The runs to show, and what was skipped on the way (``shown path: why``)."""

    skipped: list[str]


def _to_stderr(note: str) -> None:
    sys.stderr.write(f"note: skipped {note}\n")


def load_runs(paths: list[Path], *, note: Callable[[str], None] | None = _to_stderr) -> Runs:
    """Every run the arguments name; one found by walking that cannot be read is skipped, and
    told to ``note`` (stderr by default: the CLI's caller should hear of it) and the page."""
    found = discover(paths)
    runs = Runs()
    runs.skipped = list(found.skipped)
    for f in found.found:
        try:
            runs.append(load_run(len(runs), f.path, f.shown))
        except (InputError, OSError) as exc:
            if f.direct:
                raise
            runs.skipped.append(f"{f.shown}: {str(exc).replace(str(f.path), f.shown)}")
    if not runs:
        raise RecordError("no run could be read: " + "; ".join(runs.skipped), path=str(paths[0]))
    if note is not None:
        for skipped in runs.skipped:
            note(skipped)
    several = len({r.warehouse for r in runs}) > 1
    for run, name in zip(runs, unique_names([r.shown for r in runs]), strict=True):
        run.name, run.with_warehouse = name, several
    return runs


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value (binomial, p = 1/2), as ``score.mcnemar_exact``.

    Summed in log space so that it stays finite for 100k discordant pairs.
    """
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    if 2 * k == n:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)
            for i in range(k + 1)]
    top = max(logs)
    tail = math.exp(top) * sum(math.exp(x - top) for x in logs)
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Pair:
    """Two runs of one eval set compared item by item (the page's ``pairs``, in this key order)."""

    a: int  # the runs' keys
    b: int
    n: int  # items in both
    b_count: int
    c_count: int
    p: float  # exact McNemar


def paired(runs: list[Run]) -> list[Pair]:
    """For each pair of runs of the same eval set: items in both, b, c and the exact McNemar p.

    b: right in the first run and wrong in the second (final correctness); c: the reverse.
    """
    out: list[Pair] = []
    for a, b in combinations(runs, 2):
        if a.evalset_key != b.evalset_key:
            continue
        # the first record of a (duplicated) id counts, as on the page
        right_a = dict(zip(reversed(a.cols["id"]), reversed(a.cols["correct_final"]), strict=True))
        right_b = dict(zip(reversed(b.cols["id"]), reversed(b.cols["correct_final"]), strict=True))
        common = right_a.keys() & right_b.keys()
        n_b = sum(1 for i in common if right_a[i] and not right_b[i])
        n_c = sum(1 for i in common if right_b[i] and not right_a[i])
        out.append(Pair(a.key, b.key, len(common), n_b, n_c, mcnemar_exact(n_b, n_c)))
    return out
