"""Reading files a user names: regular files only, strict UTF-8, errors that say where.

Only regular files (a FIFO or device may never end). A byte that is not UTF-8 is refused with file,
line and byte offset, never replaced (that would silently change a question); a leading BOM is dropped."""

from __future__ import annotations

import json
import os
import re
import stat
from itertools import accumulate
from pathlib import Path
from typing import Any

from nlq2sql.errors import InputError

BOM = b"\xef\xbb\xbf"
#: Upper bound for request counts (per level, warm-up, repeats of local work): a typo such as
#: ``--requests 99999999999999999999`` is refused instead of building a list that never ends.
MAX_REQUESTS = 1_000_000
#: vLLM --max-num-seqs: any positive count is taken, but no engine batches more sequences than
#: this (a typo such as 1000000 would only fail later, inside vLLM, after the model was resolved).
MAX_NUM_SEQS = 65_536


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


__all__ = ["BOM", "MAX_JSON_DEPTH", "MAX_NUM_SEQS", "MAX_REQUESTS", "at_most", "check_json_depth", "decode_line",
           "json_depth", "json_object", "not_a_boolean", "not_utf8", "option_text", "parse_json", "read_text",
           "regular_file", "reusable_rest", "split_id", "strip_whitespace_outside_strings"]


def json_object(text: str, *, path: str, line: int, cls: type[InputError] = InputError) -> dict[str, Any]:
    """One JSONL line's object, or one ``cls`` error naming file and line (and the column where
    the JSON broke): the message every reader of a user's JSONL gives."""
    try:
        obj = parse_json(text, path=path, line=line, cls=cls)
    except json.JSONDecodeError as exc:
        raise cls(f"malformed JSON ({exc.msg.removesuffix(' at')} at column {exc.colno})", path=path,
                  line=line) from None
    if not isinstance(obj, dict):
        raise cls("each line must be a JSON object", path=path, line=line)
    return obj


#: Deepest nesting of arrays and objects accepted in a user's JSON.  Python's ``json`` (and
#: msgspec) recurse once per level and raise ``RecursionError`` near 1,000 levels -- a 2 KB line
#: of ``[[[[…`` -- and anything that walks a parsed value later (validation, ``json.dumps`` of a
#: record) would recurse as deep; no file this harness reads needs more than a handful of levels.
MAX_JSON_DEPTH = 64

_ESCAPE = re.compile(r"\\.", re.S)  # a backslash and the character it escapes
_STRING = re.compile(r'"[^"]*"')  # a string, once its escapes are gone
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text`` (brackets inside strings not counted;
    0 for a scalar), computed without parsing it: C-speed passes over the text, no recursion."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    return max(accumulate(map(_DELTA.__getitem__, brackets)), default=0)


def _too_deep_at(text: str) -> int:
    """Index in ``text`` of the bracket that first nests deeper than :data:`MAX_JSON_DEPTH`
    (an error path only: a plain scan), or -1."""
    depth, in_string, escaped = 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return i
        elif ch in "]}":
            depth -= 1
    return -1


def _too_deep(where: str = "") -> str:
    return f"JSON nested more than {MAX_JSON_DEPTH} levels deep{where} (arrays and objects; refused unparsed)"


def check_json_depth(text: str, *, path: str | None, line: int | None = None,
                     cls: type[InputError] = InputError, field: str | None = None) -> None:
    """Refuse JSON ``text`` nested more than :data:`MAX_JSON_DEPTH` levels, before it is parsed:
    one ``cls`` error naming the file and line (``line``: the JSONL line ``text`` is; None: a
    whole file, whose line is found) and the column.  Costs two ``str.count`` calls for any text
    with at most that many brackets, which is nearly every line a harness reads."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH or json_depth(text) <= MAX_JSON_DEPTH:
        return
    at = max(_too_deep_at(text), 0)
    start = text.rfind("\n", 0, at) + 1
    if line is None:
        line = text.count("\n", 0, at) + 1
    raise cls(_too_deep(f" at column {at - start + 1}"), path=path, line=line, field=field)


def parse_json(text: str, *, path: str | None, line: int | None = None, cls: type[InputError] = InputError,
               field: str | None = None) -> Any:
    """``json.loads(text)`` for text a user gave: nested at most :data:`MAX_JSON_DEPTH` levels
    (checked first, see :func:`check_json_depth`), and what ``json`` raises besides a
    ``JSONDecodeError`` -- an integer of more than 4,300 digits, a ``RecursionError`` -- is one
    ``cls`` error naming the file and line.  A ``JSONDecodeError`` is raised as it is: each
    reader words it (its column, or the line of a whole file)."""
    check_json_depth(text, path=path, line=line, cls=cls, field=field)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # "Exceeds the limit (4300 digits) for integer string conversion: …"
        raise cls(f"malformed JSON ({str(exc).split(':')[0]})", path=path, line=line, field=field) from None
    except RecursionError:  # not reached after the depth check; kept so no reader ever shows one
        raise cls(_too_deep(), path=path, line=line, field=field) from None


def strip_whitespace_outside_strings(text: str) -> str:
    """``text`` without the whitespace between JSON tokens (what a compact serialiser would not have
    written); whitespace inside string literals is kept.  One scanner for the compact-output count
    and the structured-output canary."""
    out, in_str, esc = [], False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in " \t\r\n":
            continue
        out.append(ch)
    return "".join(out)


def option_text(value: str, option: str) -> str:
    """An option's text, or with ``@PATH`` the text of that file: a regular file only (a FIFO
    would block the command forever), strictly UTF-8; a problem names the file and the option."""
    if not value.startswith("@"):
        return value
    path = value[1:]
    if not path:
        raise InputError("'@' must be followed by a file name", field=option)
    return read_text(path, f"{option} file")


def not_a_boolean(value: object) -> object:
    """A pydantic before-validator for integer fields read from JSON: ``true`` is not the integer 1
    (pydantic's lax int would take it; the JSON Schema does not, and an integral 5.0 stays 5)."""
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    return value
