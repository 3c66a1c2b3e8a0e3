"""The versioned run record: ``manifest.json`` + ``records.jsonl`` + ``summary.json``.

Records are appended and flushed one line per item as it completes, so nothing measured is lost
when a run dies; a torn last line is cut off on resume. Every report is rendered from these files."""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import threading
from collections.abc import Iterator, Mapping
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, Protocol, Self

from nlq2sql.errors import InputError, RecordError
from nlq2sql.inputs import not_utf8, parse_json, regular_file
from nlq2sql.records.summary_parts import Digest
from nlq2sql.records.typed import JsonValue

__all__ = ["BULK_BLOCK", "LINE_VERSION", "MANIFEST", "RECORDS", "RECORD_VERSION", "RESUME_KEYS", "SUMMARY",
           "BulkRecordWriter", "FlatRecord", "RecordWriter", "WrittenManifest", "check_resume", "done_ids",
           "encode_json", "iter_records", "output_dir", "prepare_dir", "read_json",
           "records_digest", "repair_tail", "require_run", "write_json_atomic", "write_text_atomic"]

#: The layout version of a run's JSON files (manifest, summary, load results).
RECORD_VERSION = 1
#: The version of a ``records.jsonl`` line (its ``record_version``): 2 since key order stopped being
#: written in a fixed layout; a version-1 line has the same keys and reads the same
#: (``records.item.ItemRecord.from_json``).  A line of a later version is refused.
LINE_VERSION = 2
MANIFEST, RECORDS, SUMMARY = "manifest.json", "records.jsonl", "summary.json"

#: Manifest keys that must match for ``--resume`` to continue a run (with every condition's
#: keys: the caller adds ``conditions.registry.REGISTRY.manifest_keys()``).
RESUME_KEYS = ("kind", "evalset_sha256", "model", "prompt_sha256", "guardrails", "sampling", "endpoint",
               "context_suffix_sha256")


def write_text_atomic(path: Path, text: str) -> None:
    """Write a file via a temp file and rename, so readers never see half of it and a failed
    write leaves neither half a file nor the temp file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: Path, data: JsonValue) -> None:
    """Write JSON via a temp file and rename, so readers never see half a file."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: Path) -> JsonValue:
    """A run's JSON file (manifest, summary, level): a regular file of UTF-8 JSON nested at most
    :data:`~nlq2sql.inputs.MAX_JSON_DEPTH` levels, or one RecordError naming file and line."""
    try:
        data = regular_file(path, cls=RecordError).read_bytes()
    except RecordError:
        if not os.path.lexists(path):
            raise RecordError("missing", path=str(path)) from None
        raise
    except OSError as exc:
        raise RecordError(f"cannot read: {exc.strerror or exc}", path=str(path)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(exc, path=str(path), line=data.count(b"\n", 0, exc.start) + 1, line_offset=0,
                       cls=RecordError) from None
    try:
        return parse_json(text, path=str(path), cls=RecordError)
    except json.JSONDecodeError as exc:
        raise RecordError(f"malformed JSON: {exc.msg}", path=str(path), line=exc.lineno) from None


def output_dir(out: Path, *, create: bool = True, option: str = "--out") -> Path:
    """``out`` as a directory to write into: refused (one message) when it is a file or cannot
    be created; ``create=False`` only checks, so a command can refuse before it measures."""
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory", field=option)
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"cannot create {out}: {parent} is not a directory", field=option)
            break
    if create:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create {out}: {exc.strerror}", field=option) from None
    return out


def require_run(run_dir: Path) -> Path:
    """``run_dir`` if it is a run directory (it has a manifest), else one message saying so."""
    if not run_dir.exists():
        raise RecordError("no such run directory", path=str(run_dir))
    if not run_dir.is_dir():
        raise RecordError(f"not a run directory: a file, not a directory (a run holds {MANIFEST}, "
                          f"{RECORDS} and {SUMMARY})", path=str(run_dir))
    if not (run_dir / MANIFEST).is_file():
        raise RecordError(f"not a run directory: no {MANIFEST} (a run writes one when it starts)",
                          path=str(run_dir))
    return run_dir


def records_digest(path: Path) -> Digest:
    """What a summary keeps of the records it was computed from: line count and SHA-256."""
    digest, count = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
            count += block.count(b"\n")
    return Digest(count=count, sha256=digest.hexdigest())


def prepare_dir(out: Path, *, resume: bool, force: bool) -> None:
    """Refuse to overwrite an existing run silently; ``--force`` clears, ``--resume`` keeps."""
    if out.exists() and not out.is_dir():
        raise RecordError("output path exists and is not a directory", path=str(out))
    if out.exists() and any(out.iterdir()):
        if force and not resume:
            shutil.rmtree(out)
        elif not resume:
            raise RecordError("output directory exists; pass --resume to continue it or --force "
                              "to replace it", path=str(out))
    elif resume:
        raise RecordError("nothing to resume: no run here", path=str(out))
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise RecordError(f"output directory is not writable: {exc.strerror}", path=str(out)) from None


class WrittenManifest(Protocol):
    """A run's manifest about to be written (:class:`nlq2sql.records.results.Manifest`): what
    :func:`check_resume` compares is its JSON as ``manifest.json`` will hold it.  Declared here, by
    what the store needs of it, so the store stays below the contracts that import it."""

    def to_json(self) -> Mapping[str, object]: ...


def check_resume(out: Path, manifest: WrittenManifest, keys: tuple[str, ...] = RESUME_KEYS) -> None:
    """Refuse to resume a run whose ``keys`` differ from ``manifest``'s as written, saying what differs."""
    if not (out / MANIFEST).exists():
        raise RecordError(f"cannot resume: not a run directory (no {MANIFEST}; a run writes one when "
                          "it starts), and it is not empty", path=str(out))
    old, now = read_json(out / MANIFEST), manifest.to_json()
    diffs = [k for k in keys if old.get(k) != now.get(k)]
    if diffs:
        detail = "; ".join(f"{k}: was {old.get(k)!r}, now {now.get(k)!r}" for k in diffs)
        raise RecordError(f"cannot resume: the run differs ({detail})", path=str(out / MANIFEST))


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Stream records; a torn (unterminated or unparsable) final line is skipped.  A line that
    is not UTF-8 or nests deeper than :data:`~nlq2sql.inputs.MAX_JSON_DEPTH` levels (no writer
    makes either, torn or not) is refused naming the file and line."""
    where, offset = str(path), 0
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                return  # torn tail of a killed writer
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise not_utf8(exc, path=where, line=lineno, line_offset=offset, cls=RecordError) from None
            offset += len(raw)
            try:
                yield parse_json(line, path=where, line=lineno, cls=RecordError)
            except json.JSONDecodeError:
                if fh.read(1):
                    raise RecordError("malformed record", path=where, line=lineno) from None
                return


def repair_tail(path: Path) -> int:
    """Cut a torn last line so appends start on a clean line; returns bytes removed."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    keep = len(data)
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    else:
        # A complete-looking but unparsable last line is torn as well.
        start = data.rfind(b"\n", 0, max(0, keep - 1)) + 1
        try:
            if data[start:keep].strip():
                last = data[start:keep].decode("utf-8")
                parse_json(last, path=str(path), line=data.count(b"\n", 0, start) + 1, cls=RecordError)
        except (json.JSONDecodeError, UnicodeDecodeError):
            keep = start
    if keep != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
    return len(data) - keep


def done_ids(path: Path) -> set[str]:
    return {r["id"] for r in iter_records(path)} if path.exists() else set()


class FlatRecord(Protocol):
    """A typed record (:class:`nlq2sql.records.item.ItemRecord`): written as its flat JSON object."""

    def to_json(self) -> dict[str, Any]: ...


#: The one encoding of a record line, for every writer of records (and Ray Data's shards).  Its
#: output is ASCII (``ensure_ascii``, the default): :func:`_encode_value` relies on it.
encode_json = json.JSONEncoder(separators=(",", ":"), default=str).encode


def _encode_value(value: str | None) -> str:
    """What the writer's encoder gives for a string or None, without its per-call overhead
    (for None, its slow path): the same ASCII escaping (``ensure_ascii``, the default)."""
    return "null" if value is None else encode_basestring_ascii(value)


class RecordWriter:
    """Append-and-flush JSONL writer: one line per finished item, flushed as it is written, so
    nothing measured is lost when a run dies (live runs; see :class:`BulkRecordWriter` for
    files published only when complete)."""

    _dumps = staticmethod(encode_json)

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 — lives as long as the run

    def _emit(self, line: str) -> None:
        self._fh.write(line)
        self._fh.flush()

    def write(self, record: dict[str, Any] | FlatRecord) -> None:
        """One record's line: a typed record as its flat object (it carries its ``record_version``),
        a dict (the bulk re-scorers' records) with the current one first."""
        if not isinstance(record, dict):
            self._emit(self._dumps(record.to_json()) + "\n")
            return
        self._emit(self._dumps({"record_version": LINE_VERSION, **record}) + "\n")

    def template(self, record: dict[str, Any], holes: tuple[str, ...]) -> tuple[str, ...]:
        """The line :meth:`write` writes for ``record``, in pieces around the values of ``holes``
        (keys of ``record``, in its order): ``pieces[0] + v0 + pieces[1] + v1 + … + pieces[-1]``,
        each ``v`` encoded, is that line for the record with those values (:meth:`write_filled`).

        Re-scoring writes the same record again and again but for its id and raw text: encoded
        once, each line is then a few string joins.  The pieces are exact: a JSON object's
        encoding is its members' encodings, comma-separated, in braces.
        """
        if [k for k in record if k in holes] != list(holes):
            raise ValueError(f"holes {holes} must be keys of the record, in its order")
        pieces: list[str] = []
        text, run = "{", {}
        for key, value in {"record_version": LINE_VERSION, **record}.items():
            if key not in holes:
                run[key] = value
                continue
            if run:
                text += self._dumps(run)[1:-1] + ","
                run = {}
            pieces.append(text + self._dumps(key) + ":")
            text = ","  # before the next member, if any
        pieces.append((text + self._dumps(run)[1:-1] if run else text.lstrip(",")) + "}")
        return tuple(pieces)

    def fill_last(self, pieces: tuple[str, ...], values: tuple[JsonValue, ...]
) -> tuple[str, ...]:
        """A :meth:`template` with its last ``len(values)`` holes filled: the pieces of the same
        line around the holes left (re-scoring fills the raw text and reasons once per distinct
        text, so a repeated text costs one join around its id)."""
        keep = len(pieces) - 1 - len(values)
        if keep < 0:
            raise ValueError(f"{len(values)} values for {len(pieces) - 1} holes")
        return (*pieces[:keep], self._fill(pieces[keep:], values, ""))

    def write_filled(self, pieces: tuple[str, ...], values: tuple[JsonValue, ...]
) -> None:
        """Write a :meth:`template`'s line with ``values`` for its holes."""
        self._emit(self._fill(pieces, values, "\n"))

    def _fill(self, pieces: tuple[str, ...], values: tuple[JsonValue, ...]
, end: str) -> str:
        """``pieces`` joined around ``values`` (one per hole, each encoded), then ``end``."""
        parts = [pieces[0]]
        for value, piece in zip(values, pieces[1:], strict=True):
            parts += (_encode_value(value) if type(value) is str or value is None else self._dumps(value), piece)
        parts.append(end)
        return "".join(parts)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BulkRecordWriter(RecordWriter):
    """A :class:`RecordWriter` for a new file published only when complete (offline
    re-scoring writes into a temp directory renamed at the end): nothing is flushed per line.

    Lines are gathered into blocks of about :data:`BULK_BLOCK` characters, and a second thread
    writes each block and hashes it, so the file's :func:`records_digest` (:meth:`digest`) is
    known without reading it back, and the disk and the hash -- the largest costs of scoring a
    million items, whose records are ~8x the responses in bytes -- overlap the scoring instead
    of adding to it (both release the GIL).  The queue is bounded: memory stays flat.  A write
    that fails is raised in the scoring thread, at the next block or at :meth:`close`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._out = open(path, "xb")  # noqa: SIM115 — a new file: the digest covers all of it
        self._parts: list[str] = []
        self._size = self._lines = 0
        self._hash = hashlib.sha256()
        self._blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="records-writer", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while (block := self._blocks.get()) is not None:
            if self._error is None:
                try:
                    self._out.write(block)
                    self._hash.update(block)
                except BaseException as exc:  # noqa: BLE001 — re-raised in the scoring thread
                    self._error = exc

    def _emit(self, line: str) -> None:
        self._parts.append(line)
        self._lines += 1
        self._size += len(line)
        if self._size >= BULK_BLOCK:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._error is not None:
            raise self._error
        if self._parts:
            self._blocks.put("".join(self._parts).encode("utf-8"))
            self._parts, self._size = [], 0

    def digest(self) -> Digest:
        """:func:`records_digest` of the file as closed (call after :meth:`close`)."""
        if not self._out.closed:
            raise RuntimeError("digest of a records file still being written")
        return Digest(count=self._lines, sha256=self._hash.hexdigest())

    def close(self) -> None:
        if self._out.closed:
            return
        try:
            if self._error is None:
                self._hand_over()
        finally:
            self._blocks.put(None)
            self._thread.join()
            try:
                if self._error is None:
                    self._out.flush()
                    os.fsync(self._out.fileno())
            finally:
                self._out.close()
        if self._error is not None:
            raise self._error


#: Characters of record lines :class:`BulkRecordWriter` hands to its thread at a time.
BULK_BLOCK = 1 << 20
