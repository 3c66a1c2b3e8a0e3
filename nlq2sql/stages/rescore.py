"""Offline re-scoring at scale: each distinct answer to each distinct question is scored once.

A record depends on the raw text only through what it parses to, except fields copied as they are
(``id``, ``raw_text``, a parse failure's reason). So :class:`RecordMemo` scores each distinct (case,
finish reason, parsed answer) once and keeps the encoding with those fields open
(:meth:`RecordWriter.template`): a later item with the same meaning is a lookup and a few joins."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from nlq2sql.errors import IntentError
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.store import RecordWriter
from nlq2sql.semantic.catalog import Catalog
from nlq2sql.stages.evalset import EvalCase
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.guardrail import RuleSet
from nlq2sql.stages.intent import Intent, parse_intent
from nlq2sql.stages.score import case_record

__all__ = ["MEMO_SIZE", "OPEN_FIELDS", "Entry", "RecordMemo", "meaning"]

#: Fields of a record that vary between items scored alike: left open in a remembered record,
#: filled in per item (the reasons only vary for a text that does not parse: see meaning).
OPEN_FIELDS = ("id", "raw_text", "status_reason", "final_status_reason")
#: Entries each of the two memos keeps (bounded: novel texts do not grow memory).
MEMO_SIZE = 4096
#: A memo's key: the parts of an item its record depends on (hashable values).
_Key = tuple[object, ...]
_V = TypeVar("_V")

#: A remembered record: the gold intent it was keyed by (kept alive, see RecordMemo), the
#: record (its OPEN_FIELDS are the first item's), and its encoding around OPEN_FIELDS.
Entry = tuple[Intent, ItemRecord, tuple[str, ...]]


def meaning(raw_text: str | None, catalog: Catalog) -> tuple[Hashable, str | None]:
    """(what a raw answer parses to, the reason it does not parse or None).

    The first is hashable, and equal for two texts exactly when :func:`case_record` scores them
    alike but for :data:`OPEN_FIELDS`: an intent's fields (plain str, int or None once
    validated), or the failure's status -- its reason (a JSON error's position, say) is only
    copied into ``status_reason`` and ``final_status_reason``.
    """
    try:
        i = parse_intent(raw_text or "", catalog)  # cached per text: case_record's call is free
    except IntentError as exc:
        return ("error", exc.status), exc.reason
    return ("intent", i.intent, i.metric, i.dimension, i.time_grain,
            tuple((f.field, f.op, f.value) for f in i.filters), i.limit, i.order), None


class RecordMemo:
    """:func:`case_record` for offline re-scoring, remembered per distinct answer to a case,
    writing each item's record line (:meth:`write`).

    Two bounded memos: by raw text (a repeated text costs one lookup, not even a parse), and
    by meaning (:func:`meaning`: a new text that parses like an earlier one costs a parse).
    Cases are keyed by the identity of their gold intent -- cases read from one file share it
    when their lines are equal but for the id (``evalset.CaseIndex``) -- plus question,
    category and pair; an entry holds that intent, so its ``id()`` is not reused while the
    entry lives.  A record whose query failed to execute is not kept: a timeout need not recur.

    ``score``: the per-item scorer, ``(case, raw_text, executor, catalog, *, finish_reason=…)`` (the
    intent kind's, ``answers.kinds``); default: :func:`case_record` under ``rulesets``.
    """

    def __init__(self, rulesets: list[RuleSet], executor: Executor, catalog: Catalog,
                 writer: RecordWriter, score: Callable[..., ItemRecord] | None = None) -> None:
        self.rulesets, self.executor, self.catalog, self.writer = rulesets, executor, catalog, writer
        self.score = score
        self._by_text: dict[_Key, Entry] = {}
        self._by_meaning: dict[_Key, Entry] = {}

    def write(self, rid: str, case: EvalCase, raw_text: str | None, finish_reason: str | None
              ) -> ItemRecord:
        """Write the record of item ``rid`` (case ``case``, whose own id may be another item's)
        and return it for the summary -- shared with items scored alike, so its
        :data:`OPEN_FIELDS` may be another item's (a summary reads none of them)."""
        gold = case.gold
        text_key = (id(gold), case.question, case.category, case.pair_id, finish_reason, raw_text)
        hit = self._by_text.get(text_key)
        if hit is None:
            kind, reason = meaning(raw_text, self.catalog)
            meaning_key = text_key[:-1] + (kind,)
            entry = self._by_meaning.get(meaning_key)
            keep = True
            if entry is None:
                rec = (self.score(case, raw_text, self.executor, self.catalog, finish_reason=finish_reason)
                       if self.score is not None else
                       case_record(case, raw_text, self.rulesets, self.executor, finish_reason=finish_reason,
                                   catalog=self.catalog))
                # (the line's encoding is cut from the flat record, once: the writer's edge)
                entry = (gold, rec, self.writer.template(rec.to_json(version=False), OPEN_FIELDS))
                keep = rec.answer.exec_error is None
                if keep:
                    _keep(self._by_meaning, meaning_key, entry)
            rec = entry[1]  # a text that does not parse brings its own reason
            reasons = ((reason, reason) if reason is not None
                       else (rec.answer.status_reason, rec.answer.final_status_reason))
            # The line but for its id, encoded once per distinct text.
            hit = (gold, rec, self.writer.fill_last(entry[2], (raw_text, *reasons)))
            if keep:
                _keep(self._by_text, text_key, hit)
        _, rec, pieces = hit
        self.writer.write_filled(pieces, (rid,))
        return rec


def _keep(memo: dict[_Key, _V], key: _Key, value: _V) -> None:
    if len(memo) >= MEMO_SIZE:
        memo.clear()
    memo[key] = value
