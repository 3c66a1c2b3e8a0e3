"""Answering questions that have no gold (``nlq2sql batch --questions FILE``).

A question file (JSONL ``{"id", "question"}``) is answered as an eval item is (parsed, guardrailed,
built, executed), compared with nothing. An unscored record has every key of an ``eval`` record, so
readers and shards need one layout: what needs a gold (``gold_*``, ``correct_*``, ``error_raw``,
``error_final``, ``wrong_fields_raw``, ``category``, ``pair_id``, interventions' ``correct``) is
``null``, ``guardrail_scope`` is ``[]``; ``gold_intent is None`` means "not scored". Its summary is
``Summary(..., scored=False)``: no accuracy."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nlq2sql.errors import InputError
from nlq2sql.inputs import decode_line, json_object, regular_file

__all__ = ["Question", "read_questions"]

#: Keys a question line may have (a line with ``gold`` belongs to an eval set: ``--evalset``).
QUESTION_KEYS = ("id", "question")


@dataclass(frozen=True)
class Question:
    """A question without a gold intent: what ``ItemRunner.run`` needs of an item."""

    id: str
    question: str


def read_questions(path: Path) -> Iterator[Question]:
    """Stream a question file, naming file, line and field on any problem (ids unique)."""
    seen: set[str] = set()
    try:
        fh = open(regular_file(path, "questions"), "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read questions: {exc.strerror}", path=str(path)) from None
    offset = 0
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            line = decode_line(raw, path=str(path), line=lineno, offset=offset)
            offset += len(raw)
            if not line.strip():
                raise InputError("empty line", path=str(path), line=lineno)
            obj = json_object(line, path=str(path), line=lineno)
            extra = sorted(set(obj) - set(QUESTION_KEYS))
            if extra:
                key = "gold" if "gold" in extra else extra[0]
                hint = " (a line with a gold intent belongs to an eval set: use --evalset)" if key == "gold" else ""
                raise InputError(f"unknown key {key!r}; a question line has only id and question{hint}",
                                 path=str(path), line=lineno, field=key)
            qid, text = obj.get("id"), obj.get("question")
            if not isinstance(qid, str) or not qid.strip() or len(qid) > 128:
                raise InputError("missing, empty or non-string id (at most 128 characters)", path=str(path),
                                 line=lineno, field="id")
            if qid in seen:
                raise InputError(f"duplicate id {qid!r}", path=str(path), line=lineno, field="id")
            if not isinstance(text, str) or not text.strip() or len(text) > 2000:
                raise InputError("missing, empty or non-string question (at most 2000 characters)",
                                 path=str(path), line=lineno, field="question")
            seen.add(qid)
            yield Question(qid, text)
    if not seen:
        raise InputError("no questions in the file", path=str(path))

