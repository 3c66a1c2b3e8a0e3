"""Reading files a user names: regular files only, strict UTF-8, errors that say where.

A FIFO with no writer would block a reader forever and a device may never end, so only
regular files are read.  Text must be UTF-8: a byte that is not is refused with the file,
line and byte offset instead of being replaced (which would silently change a question
sent to the model).  A UTF-8 byte-order mark at the start of a file is allowed and dropped.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from .errors import InputError

BOM = b"\xef\xbb\xbf"
#: Upper bound for request counts (per level, warm-up, repeats of local work): a typo such as
#: ``--requests 99999999999999999999`` is refused instead of building a list that never ends.
MAX_REQUESTS = 1_000_000


def at_most(value: int, limit: int, option: str) -> int:
    """``value`` if it is at most ``limit``, else one message naming the option."""
    if value > limit:
        raise InputError(f"must be at most {limit:,}, got {value:,}", field=option)
    return value


def regular_file(path: str | Path, what: str = "", cls: type[InputError] = InputError) -> Path:
    """``path`` if it is a readable regular file (symbolic links followed), else InputError.

    ``what`` names the file in the message (``cannot read responses: …``).
    """
    p = Path(path)
    label = f" {what}" if what else ""
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if p.is_symlink():
            raise cls(f"cannot read{label}: a dangling symbolic link (to {os.readlink(p)}, "
                             "which does not exist)", path=str(p)) from None
        raise cls(f"cannot read{label}: No such file or directory", path=str(p)) from None
    except OSError as exc:
        raise cls(f"cannot read{label}: {exc.strerror or exc}", path=str(p)) from None
    if stat.S_ISDIR(st.st_mode):
        raise cls(f"cannot read{label}: a directory, not a file", path=str(p))
    if not stat.S_ISREG(st.st_mode):
        raise cls(f"cannot read{label}: not a regular file (a FIFO, socket or device is "
                         "refused: reading it could block or never end)", path=str(p))
    return p


def not_utf8(exc: UnicodeDecodeError, *, path: str, line: int, line_offset: int,
             cls: type[InputError] = InputError) -> InputError:
    """The error for a line that is not UTF-8: file, line, the byte and its offset in the file."""
    bad = exc.object[exc.start:exc.start + 1]
    return cls(f"not UTF-8: byte 0x{bytes(bad).hex()} at byte offset {line_offset + exc.start} "
                      f"of the file ({exc.reason})", path=path, line=line)


def decode_line(raw: bytes, *, path: str, line: int, offset: int) -> str:
    """One line of a file (``raw`` starts at byte ``offset``), strictly decoded."""
    if offset == 0 and raw.startswith(BOM):
        raw, offset = raw[len(BOM):], len(BOM)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(exc, path=path, line=line, line_offset=offset) from None


#: A JSON object whose first key is ``"id"`` with a plain string value (nothing escaped, so the
#: text between the quotes *is* the id), followed by the rest of the line.
_LEADING_ID = re.compile(r'\{[ \t\r\n]*"id"[ \t\r\n]*:[ \t\r\n]*"([^"\\\x00-\x1f]*)"')
#: Every way JSON can spell the key ``id`` (either letter literal or ``\u``-escaped).
_ID_KEYS = ('"id"', '"\\u0069d"', '"i\\u0064"', '"\\u0069\\u0064"')


def split_id(line: str) -> tuple[str, str] | None:
    """``(id, rest)`` of a line ``{"id": "<id>"<rest>`` whose id is a plain string, else None.

    Large eval sets and responses files repeat the same content under new ids (100k items
    are often copies of a few hundred questions and answers).  Lines with equal ``rest``
    parse to equal objects but for the id -- when :func:`reusable_rest` holds -- so what was
    parsed and checked for one can be reused for the others, instead of being done again
    per line.  Only the leading id is split off: the text is never rewritten.
    """
    m = _LEADING_ID.match(line)
    return None if m is None else (m.group(1), line[m.end():])


def reusable_rest(rest: str) -> bool:
    """Whether *every* line ``{"id": "<plain id>"<rest>`` parses to one object but for its id.

    True unless ``rest`` might hold a second ``"id"`` key, which would override the leading
    one (JSON keeps the last of duplicate keys): then the line is parsed on its own.
    """
    return not any(key in rest for key in _ID_KEYS)


def read_text(path: str | Path, what: str = "") -> str:
    """A whole (small) text file: regular, strictly UTF-8 (a leading BOM dropped)."""
    p = regular_file(path, what)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read{f' {what}' if what else ''}: {exc.strerror or exc}",
                         path=str(p)) from None
    start = len(BOM) if data.startswith(BOM) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = start + exc.start
        moved = UnicodeDecodeError(exc.encoding, data, at, at + 1, exc.reason)
        raise not_utf8(moved, path=str(p), line=data.count(b"\n", 0, at) + 1, line_offset=0) from None


__all__ = ["decode_line", "json_object", "not_utf8", "read_text", "regular_file", "reusable_rest", "split_id"]


def json_object(text: str, *, path: str, line: int, cls: type[InputError] = InputError) -> dict[str, Any]:
    """One JSONL line's object, or one ``cls`` error naming file and line (and the column where
    the JSON broke): the message every reader of a user's JSONL gives."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise cls(f"malformed JSON ({exc.msg.removesuffix(' at')} at column {exc.colno})", path=path,
                  line=line) from None
    if not isinstance(obj, dict):
        raise cls("each line must be a JSON object", path=path, line=line)
    return obj
