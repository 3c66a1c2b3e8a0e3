"""Answering questions that have no gold intent (``nlq2sql batch --questions FILE``).

An eval set is scored; a plain question file (JSONL lines ``{"id", "question"}``) can only be
*answered*: the model's raw text is parsed, guardrailed, built into SQL and executed, exactly
as an eval item is (``score.intent_record``, with no ``gold``), but nothing is compared with a gold.

One record schema.  An unscored record has every key an ``eval`` record has, so readers,
the viewer and the Parquet/JSONL shards need no second layout.  What needs a gold is
``null``: ``gold_intent``, ``gold_result_head``, ``gold_result_hash``, ``correct_raw``,
``correct_final``, ``correct_exec``, ``error_raw``, ``error_final``, ``wrong_fields_raw``,
``category``, ``pair_id`` and each intervention's ``correct``; ``guardrail_scope`` is ``[]``.
``gold_intent is None`` is the test for "not scored" (an eval record always has one).  The
answer itself is fully recorded: ``raw_text``, ``status`` / ``final_status`` (with reasons),
``raw_intent`` / ``final_intent``, ``interventions``, ``sql`` / ``params``, ``result_rows``,
``result_head`` and ``result_hash`` (or ``exec_error``).  Their summary is
``stages.summary.Summary(..., scored=False)``: the one aggregator, reporting no accuracy.
"""

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

