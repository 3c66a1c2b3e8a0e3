"""Where a batch writes: a local directory, or ``s3://`` / ``gs://`` / ``file://`` through pyarrow.

Every node writes its own shards, so ``--out`` is storage all reach, through pyarrow's filesystems
(credentials and region from the environment or URI parameters like ``?region=…``). Other schemes
are refused before anything is written; so are credentials in the URI (``s3://KEY:SECRET@…``):
``--out`` is recorded and shown, keys come from the environment or the node's role.
An object store has no append or rename: a shard is written under a hidden temporary name and moved
to ``records/shard-NNNNNN.<fmt>`` when complete, so a shard file that exists is complete. Order:
``manifest.json``, shards (any order), the manifest again (``finished``), ``summary.json`` last."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from nlq2sql.errors import InputError, RecordError
from nlq2sql.inputs import parse_json

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["SCHEMES", "SHARDS", "BatchOut", "shard_name"]

#: URI schemes ``--out`` takes (a plain path is a local directory).
SCHEMES = ("file", "s3", "gs", "gcs")
SHARDS = "records"
_SHARD = re.compile(r"^shard-(\d+)\.(parquet|jsonl)$")


def shard_name(index: int, fmt: str) -> str:
    """Shard ``index``'s file name: its items are the input's ``index``-th run of ``shard_rows``."""
    return f"shard-{index:06d}.{fmt}"


@dataclass(frozen=True)
class BatchOut:
    """A batch's output directory: ``uri`` as given, and where it is (``fs``, ``root``)."""

    uri: str
    fs: Any  # pyarrow.fs.FileSystem
    root: str

    @classmethod
    def open(cls, out: str | Path) -> BatchOut:
        """``out`` (a path, or file:// s3:// gs:// URI) opened; other schemes refused, nothing written."""
        import pyarrow.fs as pafs

        text = str(out)
        if "://" not in text:
            return cls(text, pafs.LocalFileSystem(), str(Path(text).absolute()))
        scheme = text.split("://", 1)[0].lower()
        if scheme not in SCHEMES:
            raise InputError(f"{scheme}:// is not supported: give a local path, or a file://, s3:// or gs:// URI",
                             field="--out")
        _no_credentials(text)
        try:
            fs, root = pafs.FileSystem.from_uri(text)
        except (OSError, ValueError, TypeError) as exc:  # ArrowInvalid is a ValueError
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise InputError(f"cannot open {_safe(text)}: {first}", field="--out") from None
        return cls(text, fs, root.rstrip("/"))

    @property
    def local(self) -> bool:
        return type(self.fs).__name__ == "LocalFileSystem"

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _info(self, path: str) -> Any:
        try:
            return self.fs.get_file_info(path)
        except OSError as exc:
            raise InputError(f"cannot read {_safe(self.uri)}: {exc}", field="--out") from None

    def state(self) -> str:
        """absent | empty | file (not a directory) | complete (a summary) | run (a manifest) | other."""
        import pyarrow.fs as pafs

        info = self._info(self.root)
        if info.type == pafs.FileType.NotFound:
            return "absent"
        if info.type != pafs.FileType.Directory:
            return "file"
        names = {i.base_name for i in self.fs.get_file_info(pafs.FileSelector(self.root))}
        if not names:
            return "empty"
        return "complete" if "summary.json" in names else "run" if "manifest.json" in names else "other"

    def make(self, manifest: JsonValue) -> None:
        """Create the directory with ``manifest`` in it, then the shard folder: a directory of ours
        always holds its manifest (a kill in between cannot leave one ``--resume`` would refuse)."""
        try:
            self.fs.create_dir(self.root, recursive=True)
            self.write_json("manifest.json", manifest)
            self.fs.create_dir(self.path(SHARDS), recursive=True)
        except OSError as exc:
            raise InputError(f"output directory is not writable: {exc}", path=_safe(self.uri)) from None

    def clear(self) -> None:
        """``--force``: what was there goes."""
        if self.state() == "file":
            raise InputError("output path exists and is not a directory", path=_safe(self.uri))
        self.fs.delete_dir_contents(self.root, missing_dir_ok=True)

    def remove(self) -> None:
        self.fs.delete_dir_contents(self.root, missing_dir_ok=True)
        self.fs.delete_dir(self.root)

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write whole: a hidden temporary name, then moved into place (readers never see half)."""
        head, _, base = name.rpartition("/")
        tmp = self.path(*([head] if head else []), f".{base}.tmp-{uuid.uuid4().hex[:12]}")
        with self.fs.open_output_stream(tmp) as fh:
            fh.write(data)
        self.fs.move(tmp, self.path(name))

    def write_json(self, name: str, data: JsonValue) -> None:
        self.write_bytes(name, (json.dumps(data, indent=2, default=str) + "\n").encode())

    def read_json(self, name: str) -> JsonValue:
        try:
            with self.fs.open_input_stream(self.path(name)) as fh:
                text = fh.read().decode("utf-8")
            return parse_json(text, path=f"{self.uri}/{name}", cls=RecordError)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RecordError(f"cannot read: {exc}", path=f"{_safe(self.uri)}/{name}") from None

    def write_shard(self, index: int, fmt: str, ids: list[str], texts: list[str]) -> str:
        """Shard ``index`` (records' JSON texts, in item order) written whole; its file name."""
        name = shard_name(index, fmt)
        if fmt == "jsonl":
            self.write_bytes(f"{SHARDS}/{name}", "".join(t + "\n" for t in texts).encode())
            return name
        import pyarrow as pa
        import pyarrow.parquet as pq

        tmp = self.path(SHARDS, f".{name}.tmp-{uuid.uuid4().hex[:12]}")
        pq.write_table(pa.table({"id": ids, "record": texts}), tmp, filesystem=self.fs)
        self.fs.move(tmp, self.path(SHARDS, name))
        return name

    def shards(self, fmt: str) -> list[str]:
        """The finished shard files of ``fmt`` (in item order), not temporary ones."""
        import pyarrow.fs as pafs

        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path(SHARDS), allow_not_found=True))
        except OSError:
            return []
        names = [i.base_name for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith(".")
                 and i.base_name.endswith("." + fmt)]
        return sorted(names, key=lambda n: (int(m.group(1)), n) if (m := _SHARD.match(n)) else (-1, n))

    def shard_index(self, name: str) -> int | None:
        m = _SHARD.match(name)
        return int(m.group(1)) if m else None

    def sweep_temps(self) -> int:
        """Temporary files a killed run left (a shard being written when it died): removed."""
        import pyarrow.fs as pafs

        n = 0
        for folder in (self.root, self.path(SHARDS)):
            for i in self.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
                if i.type == pafs.FileType.File and i.base_name.startswith(".") and ".tmp-" in i.base_name:
                    self.fs.delete_file(i.path)
                    n += 1
        return n

    def shard_lines(self, name: str) -> Iterator[str]:
        """The records' JSON texts of one shard, in order."""
        path = self.path(SHARDS, name)
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            with self.fs.open_input_file(path) as fh:
                for b in pq.ParquetFile(fh).iter_batches(columns=["record"], batch_size=1024):
                    yield from b.column(0).to_pylist()
            return
        with self.fs.open_input_stream(path) as fh:
            data = fh.read().decode("utf-8")
        yield from data.splitlines()


#: Query parameters that would carry a credential (pyarrow takes none of them from a URI but
#: the user name and password; refused all the same, so that none is ever recorded).
_SECRET_PARAM = re.compile(r"key|secret|token|password|credential", re.IGNORECASE)


def _no_credentials(uri: str) -> None:
    """Refuse a URI that carries credentials (its user info or a query parameter), naming neither."""
    try:
        parts = urlsplit(uri)
        userinfo = "@" in parts.netloc
        params = [k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if _SECRET_PARAM.search(k)]
    except ValueError:  # e.g. an invalid port or bracket: refused without echoing it
        raise InputError("not a valid URI", field="--out") from None
    if userinfo or params:
        what = "a user info part, KEY:SECRET@" if userinfo else f"the query parameter {params[0]!r}"
        raise InputError(f"credentials are not taken from the URI (it has {what}): they come from the environment "
                         "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, GCP's default credentials) or the node's "
                         "role", field="--out")


def _safe(uri: str) -> str:
    """A URI for messages: its query string and any user info (which may carry keys) left out."""
    base = uri.split("?", 1)[0]
    scheme, sep, rest = base.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        rest = rest.split("@", 1)[1]
    return scheme + sep + rest
