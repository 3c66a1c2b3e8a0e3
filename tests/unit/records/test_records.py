"""Run records: append-only JSONL with torn-tail handling, resume checks, safe directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nlq2sql.errors import RecordError
from nlq2sql.records import store as records
from nlq2sql.records.results import Manifest
from nlq2sql.records.store import (
    LINE_VERSION,
    MANIFEST,
    RESUME_KEYS,
    BulkRecordWriter,
    RecordWriter,
    check_resume,
    done_ids,
    iter_records,
    prepare_dir,
    read_json,
    records_digest,
    repair_tail,
    write_json_atomic,
)


def _write(path: Path, n: int) -> None:
    with RecordWriter(path) as w:
        for i in range(n):
            w.write({"id": f"r{i}", "text": "a\nb \u2713"})


def test_writer_appends_versioned_lines(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    _write(path, 2)
    _write(path, 1)  # a second writer appends
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])
    assert list(first) == ["record_version", "id", "text"] and first["record_version"] == LINE_VERSION
    assert [r["id"] for r in iter_records(path)] == ["r0", "r1", "r0"]
    assert first["text"] == "a\nb \u2713"


RECORD: dict[str, Any] = {"id": "r\u00e9", "question": "q \u2713\n\"x\"", "gold": {"a": [1, None, 2.5e-7]},
                          "raw_text": None, "n": 10**20, "ok": True, "when": Path("x"), "last": "\udcff"}


@pytest.mark.parametrize("holes", [("id", "raw_text"), ("id",), ("raw_text",), ("id", "question"), ("last",),
                                   ("id", "question", "gold", "raw_text", "n", "ok", "when", "last"), ()])
@pytest.mark.parametrize("values", [("a-1", "t\u00e9xt\n"), (None, 5), ("", ["x", {"y": 1.5}])])
def test_template_filled_is_the_written_line(tmp_path: Path, holes: tuple[str, ...], values: tuple[Any, ...]) -> None:
    """A record encoded once around some fields, then filled in, gives write()'s bytes exactly."""
    filled = {**RECORD, **dict(zip(holes, values * 4, strict=False))}
    vals = tuple(filled[h] for h in holes)
    with RecordWriter(tmp_path / "a.jsonl") as a, RecordWriter(tmp_path / "b.jsonl") as b:
        a.write(filled)
        b.write_filled(b.template(RECORD, holes), vals)
        for k in range(len(holes) + 1):  # the last k holes filled first, the others after
            b.write_filled(b.fill_last(b.template(RECORD, holes), vals[len(holes) - k:]), vals[:len(holes) - k])
    lines = (tmp_path / "b.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == len(holes) + 2 and set(lines) == {(tmp_path / "a.jsonl").read_bytes()}
    with pytest.raises(ValueError, match="holes"):
        b.fill_last(b.template(RECORD, holes), (*vals, "one too many"))


def test_template_holes_must_be_keys_in_order(tmp_path: Path) -> None:
    with RecordWriter(tmp_path / "a.jsonl") as w:
        for holes in (("raw_text", "id"), ("nope",)):
            with pytest.raises(ValueError, match="in its order"):
                w.template(RECORD, holes)


@pytest.mark.parametrize("tail", [b'{"id": "r3", "te', b'{"id": "r3"}', b"garbage"])
def test_torn_last_line_is_skipped_and_cut(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "records.jsonl"
    _write(path, 3)
    good = path.read_bytes()
    with open(path, "ab") as fh:
        fh.write(tail)  # killed writer: no newline
    assert [r["id"] for r in iter_records(path)] == ["r0", "r1", "r2"]
    assert repair_tail(path) == len(tail)
    assert path.read_bytes() == good
    assert repair_tail(path) == 0
    _write(path, 1)
    assert [r["id"] for r in iter_records(path)] == ["r0", "r1", "r2", "r0"]


def test_unparsable_terminated_last_line_is_torn_too(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    _write(path, 2)
    good = path.read_bytes()
    with open(path, "ab") as fh:
        fh.write(b'{"id": "r2", "te\n')
    assert [r["id"] for r in iter_records(path)] == ["r0", "r1"]
    assert repair_tail(path) == len(b'{"id": "r2", "te\n')
    assert path.read_bytes() == good


def test_malformed_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text('{"id": "a"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(RecordError) as exc:
        list(iter_records(path))
    assert exc.value.line == 2 and str(path) in str(exc.value)


def test_repair_tail_of_missing_or_empty_file(tmp_path: Path) -> None:
    assert repair_tail(tmp_path / "none.jsonl") == 0
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert repair_tail(empty) == 0 and empty.read_bytes() == b""
    assert done_ids(tmp_path / "none.jsonl") == set()


def test_done_ids(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    _write(path, 3)
    path.write_bytes(path.read_bytes() + b'{"id": "r9"')
    assert done_ids(path) == {"r0", "r1", "r2"}


def _sampling(max_tokens: int) -> dict[str, Any]:
    return {"max_tokens": max_tokens, "temperature": 0.0, "seed": 0, "structured": "json"}


def _manifest(**over: Any) -> dict[str, Any]:
    base = {"kind": "eval", "harness_version": "0", "git_commit": None, "git_dirty": None, "evalset": "e",
            "evalset_path": "e.jsonl", "evalset_sha256": "abc", "n_items": 1, "guardrails": ["ranking"],
            "endpoint": "http://x/v1", "model": "m", "prompt_sha256": "p", "sampling": _sampling(96),
            "started": 1.0}
    return {**base, **over}


def _model(**over: Any) -> Manifest:
    """The run about to start, as ``run.live`` builds it."""
    return Manifest.model_validate(_manifest(**over))


def test_resume_accepts_same_inputs_and_ignores_other_keys(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / MANIFEST, _manifest())
    check_resume(tmp_path, _model(started=99.0))
    assert read_json(tmp_path / MANIFEST)["started"] == 1.0


@pytest.mark.parametrize("key, value", [
    ("model", "other"), ("evalset_sha256", "def"), ("guardrails", []), ("sampling", _sampling(64)),
    ("prompt_sha256", "q"), ("endpoint", None), ("kind", "score"),
])
def test_resume_refused_when_manifest_differs(tmp_path: Path, key: str, value: Any) -> None:
    assert key in RESUME_KEYS
    write_json_atomic(tmp_path / MANIFEST, _manifest())
    with pytest.raises(RecordError) as exc:
        check_resume(tmp_path, _model(**{key: value}))
    msg = str(exc.value)
    assert f"{key}: was {_manifest()[key]!r}, now {value!r}" in msg
    assert str(tmp_path / MANIFEST) in msg
    others = [k for k in RESUME_KEYS if k != key]
    assert not any(f"{k}: was" in msg for k in others)


def test_resume_without_manifest(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="cannot resume: not a run directory \\(no manifest.json"):
        check_resume(tmp_path, _model())


def test_read_json_malformed_names_line(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST
    path.write_text('{\n  "a": 1,\n  oops\n}\n')
    with pytest.raises(RecordError) as exc:
        read_json(path)
    assert exc.value.line == 3 and f"{path}:3" in str(exc.value)


def test_prepare_dir_refuses_existing_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "records.jsonl").write_text("{}\n")
    with pytest.raises(RecordError) as exc:
        prepare_dir(out, resume=False, force=False)
    assert "--resume" in str(exc.value) and "--force" in str(exc.value) and str(out) in str(exc.value)
    assert (out / "records.jsonl").exists()
    prepare_dir(out, resume=True, force=False)
    assert (out / "records.jsonl").exists()
    prepare_dir(out, resume=False, force=True)
    assert out.is_dir() and list(out.iterdir()) == []


def test_prepare_dir_new_and_empty(tmp_path: Path) -> None:
    prepare_dir(tmp_path / "a" / "b", resume=False, force=False)
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "empty").mkdir()
    prepare_dir(tmp_path / "empty", resume=False, force=False)
    with pytest.raises(RecordError, match="nothing to resume"):
        prepare_dir(tmp_path / "fresh", resume=True, force=False)


def test_prepare_dir_path_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(RecordError, match="not a directory"):
        prepare_dir(f, resume=False, force=True)
    assert f.read_text() == "x"


def test_unwritable_dir_is_a_record_error(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    with pytest.raises(RecordError) as exc:
        prepare_dir(blocker / "run", resume=False, force=False)
    assert "not writable" in str(exc.value) and str(blocker / "run") in str(exc.value)


def test_write_json_atomic_leaves_no_temp(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "s.json", {"a": [1, 2]})
    write_json_atomic(tmp_path / "s.json", {"a": [3]})
    assert read_json(tmp_path / "s.json") == {"a": [3]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


@pytest.mark.parametrize("block", [1, 300, 1 << 20])
def test_bulk_writer_writes_the_same_bytes_and_knows_their_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    block: int) -> None:
    """Any block size (one line per block, several lines, everything in one) gives the bytes
    the flushing writer gives, and the digest of the file as read back."""
    monkeypatch.setattr(records, "BULK_BLOCK", block)
    recs = [{"id": f"r{i}", "x": [1, {"y": None}], "raw_text": "é\n\"q\"" * (i % 3), "z": i} for i in range(50)]
    with RecordWriter(tmp_path / "flush.jsonl") as w:
        for r in recs:
            w.write(r)
    with BulkRecordWriter(tmp_path / "bulk.jsonl") as b:
        pieces = b.template(recs[0], ("id", "raw_text"))
        for r in recs:
            if r["z"] % 2:
                b.write(r)
            else:
                b.write_filled(pieces, (r["id"], r["raw_text"]))  # the same record but for its holes
                recs[recs.index(r)] = {**recs[0], "id": r["id"], "raw_text": r["raw_text"]}
    with RecordWriter(tmp_path / "expected.jsonl") as w:
        for r in recs:
            w.write(r)
    assert (tmp_path / "bulk.jsonl").read_bytes() == (tmp_path / "expected.jsonl").read_bytes()
    assert b.digest() == records_digest(tmp_path / "bulk.jsonl") and b.digest().count == 50
    assert (tmp_path / "flush.jsonl").read_text(encoding="utf-8") == "".join(
        json.dumps({"record_version": LINE_VERSION, **r}, separators=(",", ":")) + "\n" for r in
        [{"id": f"r{i}", "x": [1, {"y": None}], "raw_text": "é\n\"q\"" * (i % 3), "z": i} for i in range(50)])


def test_bulk_writer_refuses_an_existing_file_and_a_digest_before_close(tmp_path: Path) -> None:
    (tmp_path / "old.jsonl").write_text("x\n")
    with pytest.raises(FileExistsError):
        BulkRecordWriter(tmp_path / "old.jsonl")
    b = BulkRecordWriter(tmp_path / "new.jsonl")
    with pytest.raises(RuntimeError):
        b.digest()
    b.close()
    b.close()  # idempotent
    assert b.digest() == records_digest(tmp_path / "new.jsonl") and b.digest().count == 0


def test_a_failed_bulk_write_is_raised_in_the_writing_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that fails mid-run (here: every write) surfaces as the error itself, at a later
    block or at close, never a hang or a silently short file reported as complete."""
    monkeypatch.setattr(records, "BULK_BLOCK", 10)
    b = BulkRecordWriter(tmp_path / "bad.jsonl")

    class Full:
        def __init__(self, real: Any) -> None:
            self.real = real

        def write(self, _: bytes) -> int:
            raise OSError(28, "No space left on device")

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    monkeypatch.setattr(b, "_out", Full(b._out))  # the file object the thread writes to
    with pytest.raises(OSError, match="No space"), b:
        for i in range(1000):
            b.write({"id": f"r{i}"})


def test_flushing_writer_is_readable_before_close(tmp_path: Path) -> None:
    w = RecordWriter(tmp_path / "live.jsonl")
    w.write({"id": "a"})
    assert [r["id"] for r in iter_records(tmp_path / "live.jsonl")] == ["a"]
    w.close()
    w.close()  # idempotent


def test_a_local_servers_command_line_is_recorded_without_machine_paths() -> None:
    from nlq2sql.paths import PROJECT_ROOT
    from nlq2sql.run.live import recorded_args

    args = [str(PROJECT_ROOT / ".venv" / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", "/somewhere/else/models/qwen", "--port", "8000"]
    assert recorded_args(args) == [".venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
                                   "--model", "qwen", "--port", "8000"]
