"""The versioned run record: ``manifest.json`` + ``records.jsonl`` + ``summary.json``.

Records are appended and flushed one line per item as it completes, so nothing measured
is lost when a run dies; a torn last line is cut off on resume.  Every report is
rendered from these files, so any run can be re-scored offline.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import RecordError

RECORD_VERSION = 1
MANIFEST, RECORDS, SUMMARY = "manifest.json", "records.jsonl", "summary.json"

#: Manifest keys that must match for ``--resume`` to continue a run.
RESUME_KEYS = ("kind", "evalset_sha256", "model", "prompt_sha256", "guardrails", "sampling",
               "endpoint", "context_suffix_sha256")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON via a temp file and rename, so readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RecordError("missing", path=str(path)) from None
    except json.JSONDecodeError as exc:
        raise RecordError(f"malformed JSON: {exc.msg}", path=str(path), line=exc.lineno) from None


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


def check_resume(out: Path, manifest: dict[str, Any]) -> None:
    """Refuse to resume a run whose inputs differ, saying what differs."""
    old = read_json(out / MANIFEST)
    diffs = [k for k in RESUME_KEYS if old.get(k) != manifest.get(k)]
    if diffs:
        detail = "; ".join(f"{k}: was {old.get(k)!r}, now {manifest.get(k)!r}" for k in diffs)
        raise RecordError(f"cannot resume: the run differs ({detail})", path=str(out / MANIFEST))


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Stream records; a torn (unterminated or unparsable) final line is skipped."""
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.endswith(b"\n"):
                return  # torn tail of a killed writer
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                if fh.read(1):
                    raise RecordError("malformed record", path=str(path), line=lineno) from None
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
                json.loads(data[start:keep])
        except json.JSONDecodeError:
            keep = start
    if keep != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
    return len(data) - keep


def done_ids(path: Path) -> set[str]:
    return {r["id"] for r in iter_records(path)} if path.exists() else set()


class RecordWriter:
    """Append-and-flush JSONL writer: one line per finished item.

    ``flush_each=False`` leaves flushing to the buffer (and :meth:`close`): for writers whose
    file is only published when complete (offline re-scoring into a temp directory), where a
    flush per line buys nothing and costs a system call per item.
    """

    def __init__(self, path: Path, *, flush_each: bool = True) -> None:
        self.path, self.flush_each = path, flush_each
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 — lives as long as the run
        self._dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(self._dumps({"record_version": RECORD_VERSION, **record}) + "\n")
        if self.flush_each:
            self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
