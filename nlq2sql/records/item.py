"""One item's record as a type: :class:`ItemRecord`, composed of the parts every reader asks about.

A record line in ``records.jsonl`` is one flat JSON object (``record_version``, ``id``, …,
``chars``).  Its keys come from four owners -- the scorer (the answer and its judgement), the
request (timings, tokens, attempts, replica), the run's conditions (what each chose per item)
and the load (when an open-loop item was scheduled) -- so the type is composed of those parts:
:class:`AnswerPart`, :class:`Judgement`, :class:`RequestPart`, ``traces`` (the conditions'
keys, in the order they were written) and :class:`LoadStamp`.

The flat layout is the contract on disk, byte for byte: :meth:`ItemRecord.to_json_dict`
writes the parts' keys in :data:`LAYOUT` order (a part's key that was never set is absent), and
:meth:`ItemRecord.from_json` reads a line back.  Every committed record
round-trips byte-identically (``tests/test_item_record.py``); a line whose keys are in another
order (none is known) keeps that order in ``key_order`` rather than being rewritten.

Values that are JSON by nature (intent dumps, result heads, condition traces) stay JSON values:
this module is their edge.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from nlq2sql.errors import RecordError
from nlq2sql.records.run_parts import AttemptEntry
from nlq2sql.records.store import RECORD_VERSION, encode_json, iter_records

__all__ = ["LAYOUT", "UNSCORED", "AnswerPart", "ItemRecord", "Judgement", "LoadStamp", "RequestPart",
           "iter_item_records", "present"]

T = TypeVar("T")

#: A JSON value as parsed (an intent dump, a result row, a condition's trace): the JSON edge.
Json = Any
Num = int | float


def present(value: T | None | UnsetType) -> T | None:
    """A part's field as a reader wants it: None when the record does not have the key."""
    return None if value is UNSET else value  # type: ignore[return-value]


class _Part(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A part's fields are its record keys; UNSET means "not in this record" (absent, not null)."""

    def set_keys(self) -> Iterator[tuple[str, Json]]:
        for key in self.__struct_fields__:
            value = getattr(self, key)
            if value is not UNSET:
                yield key, value


class AnswerPart(_Part):
    """What the model answered and what became of it: text, parse status, intents (raw and after
    guardrails), the SQL it compiled to and its result (scored or not, the same keys)."""

    answer: str | UnsetType = UNSET  # the answer kind; absent for a v1 intent
    raw_text: str | None | UnsetType = UNSET
    finish_reason: str | None | UnsetType = UNSET
    status: str | UnsetType = UNSET
    status_reason: str | None | UnsetType = UNSET
    final_status: str | UnsetType = UNSET
    final_status_reason: str | None | UnsetType = UNSET
    raw_intent: dict[str, Json] | None | UnsetType = UNSET
    final_intent: dict[str, Json] | None | UnsetType = UNSET
    unanswerable: str | None | UnsetType = UNSET  # v2: the model's reason for not answering
    interventions: list[dict[str, Json]] | UnsetType = UNSET
    sql: str | None | UnsetType = UNSET
    params: list[Json] | None | UnsetType = UNSET
    exec_error: str | None | UnsetType = UNSET
    result_hash: str | None | UnsetType = UNSET
    result_rows: int | None | UnsetType = UNSET
    result_head: list[list[Json]] | None | UnsetType = UNSET
    result_columns: list[str] | None | UnsetType = UNSET  # the SQL arm
    result_truncated: bool | UnsetType = UNSET
    sql_exec_s: Num | None | UnsetType = UNSET


class Judgement(_Part):
    """The answer against its gold: the gold itself, correctness (per part, per criterion) and
    the error class.  An unscored item (no gold) carries :data:`UNSCORED`: the same keys, null."""

    answerable: bool | UnsetType = UNSET  # v2 sets: whether the gold is a query or "unanswerable"
    gold_intent: dict[str, Json] | None | UnsetType = UNSET
    guardrail_scope: list[str] | UnsetType = UNSET
    gold_result_head: list[list[Json]] | None | UnsetType = UNSET
    gold_result_hash: str | None | UnsetType = UNSET
    gold_sql: str | None | UnsetType = UNSET
    gold_params: list[Json] | None | UnsetType = UNSET
    parts: dict[str, bool] | None | UnsetType = UNSET
    correct_raw: bool | None | UnsetType = UNSET
    correct_final: bool | None | UnsetType = UNSET
    correct_exec: bool | None | UnsetType = UNSET
    correct_lenient: bool | None | UnsetType = UNSET
    error_raw: str | None | UnsetType = UNSET
    error_final: str | None | UnsetType = UNSET
    error_lenient: str | None | UnsetType = UNSET
    wrong_fields_raw: list[str] | None | UnsetType = UNSET
    column_rule: str | UnsetType = UNSET  # gold-SQL sets: how the answer's columns were matched to the gold's
    gold_alternative: int | None | UnsetType = UNSET  # gold-SQL sets: the gold alternative matched (0-based)

    @property
    def scored(self) -> bool:
        return self.gold_intent is not None and self.gold_intent is not UNSET


#: The judgement of an item without a gold (``batch --questions``): every key a scored v1 record
#: has, null (``guardrail_scope`` empty), so readers need no second layout.
UNSCORED: Final = Judgement(gold_intent=None, guardrail_scope=[], gold_result_head=None, gold_result_hash=None,
                            correct_raw=None, correct_final=None, correct_exec=None, error_raw=None,
                            error_final=None, wrong_fields_raw=None)


class RequestPart(_Part):
    """How the request went (a ``transport.stream.Completion``, by ``run.item.request_part``, plus the runner's):
    outcome, timings, tokens, attempts and retries, the replica that answered, the output's size."""

    outcome: str | UnsetType = UNSET
    http_status: int | None | UnsetType = UNSET
    error: str | None | UnsetType = UNSET
    attempts: int | UnsetType = UNSET
    latency_s: Num | None | UnsetType = UNSET
    ttft_s: Num | None | UnsetType = UNSET
    itl_mean_s: Num | None | UnsetType = UNSET
    itl_max_s: Num | None | UnsetType = UNSET
    chunks: int | None | UnsetType = UNSET
    prompt_tokens: int | None | UnsetType = UNSET
    completion_tokens: int | None | UnsetType = UNSET
    cached_tokens: int | None | UnsetType = UNSET
    retry_waits_s: list[Num] | UnsetType = UNSET
    unsent_retries: int | UnsetType = UNSET
    started: Num | None | UnsetType = UNSET
    # (after the conditions' traces on disk)
    replica: str | None | UnsetType = UNSET
    failed_over_from: list[str] | UnsetType = UNSET
    attempt_log: list[AttemptEntry] | UnsetType = UNSET
    latency_e2e_s: Num | None | UnsetType = UNSET
    concurrency: int | UnsetType = UNSET
    whitespace_chars: int | None | UnsetType = UNSET
    chars: int | None | UnsetType = UNSET


class LoadStamp(_Part):
    """An open-loop item's arrival: when it was scheduled, how long it waited for a slot."""

    scheduled: Num | UnsetType = UNSET
    queued_s: Num | UnsetType = UNSET
    latency_from_arrival_s: Num | None | UnsetType = UNSET


_ID_KEYS = ("id", "question", "category", "pair_id")
_A, _J, _R, _L, _I = "answer", "judgement", "request", "load", "id"
#: The flat key order on disk, (key, part), with ``None`` where the conditions' traces go.
LAYOUT: Final[tuple[tuple[str, str] | None, ...]] = (
    ("id", _I), ("question", _I), ("category", _I), ("pair_id", _I), ("answer", _A), ("answerable", _J),
    ("gold_intent", _J), ("raw_text", _A), ("finish_reason", _A), ("status", _A), ("status_reason", _A),
    ("final_status", _A), ("final_status_reason", _A), ("raw_intent", _A), ("final_intent", _A),
    ("unanswerable", _A), ("interventions", _A), ("guardrail_scope", _J), ("sql", _A), ("params", _A),
    ("exec_error", _A), ("result_hash", _A), ("result_rows", _A), ("result_head", _A), ("result_columns", _A),
    ("result_truncated", _A), ("sql_exec_s", _A), ("gold_result_head", _J), ("gold_result_hash", _J),
    ("gold_sql", _J), ("gold_params", _J), ("parts", _J), ("correct_raw", _J), ("correct_final", _J),
    ("correct_exec", _J), ("correct_lenient", _J), ("error_raw", _J), ("error_final", _J),
    ("error_lenient", _J), ("wrong_fields_raw", _J), ("column_rule", _J), ("gold_alternative", _J),
    *((k, _R) for k in ("outcome", "http_status", "error", "attempts", "latency_s", "ttft_s", "itl_mean_s",
                        "itl_max_s", "chunks", "prompt_tokens", "completion_tokens", "cached_tokens",
                        "retry_waits_s", "unsent_retries", "started")),
    None,
    *((k, _R) for k in ("replica", "failed_over_from", "attempt_log", "latency_e2e_s", "concurrency")),
    *((k, _L) for k in LoadStamp.__struct_fields__),
    ("whitespace_chars", _R), ("chars", _R),
)
_PART_OF: Final = {entry[0]: entry[1] for entry in LAYOUT if entry is not None}
#: Each key's place in :data:`LAYOUT` (``record_version`` first): a line's keys in this order are written back in it.
_RANK: Final = {"record_version": -1, **{entry[0]: i for i, entry in enumerate(LAYOUT) if entry is not None}}
_TRACE_RANK: Final = LAYOUT.index(None)
_PART_TYPES: Final = {_A: AnswerPart, _J: Judgement, _R: RequestPart, _L: LoadStamp}


class _Identity(msgspec.Struct, kw_only=True):
    id: str
    question: str
    category: str | None = None
    pair_id: str | None = None


class ItemRecord(msgspec.Struct, kw_only=True):
    """One item's record: who (id, question, category, pair), the answer, its judgement, the
    request, the conditions' traces and the load stamp.  ``judgement`` is None for an item
    without a gold; ``request`` and ``load`` are empty for records scored offline."""

    id: str
    question: str
    category: str | None = None
    pair_id: str | None = None
    answer: AnswerPart = msgspec.field(default_factory=AnswerPart)
    judgement: Judgement | None = None
    request: RequestPart = msgspec.field(default_factory=RequestPart)
    #: The conditions' per-item keys (examples chosen, values linked, votes, the planner's stage,
    #: abstention), in the order they were written: JSON values, each condition's own.
    traces: dict[str, Json] = msgspec.field(default_factory=dict)
    load: LoadStamp = msgspec.field(default_factory=LoadStamp)
    record_version: int = RECORD_VERSION
    #: Only for a line whose keys were not in :data:`LAYOUT` order (none is known): that order.
    key_order: tuple[str, ...] | None = None

    @property
    def scored(self) -> bool:
        return self.judgement is not None and self.judgement.scored

    def _part(self, name: str) -> _Part:
        if name == _J:  # (a record never shares a nested object with another: UNSCORED's list is copied)
            if self.judgement is not None:
                return self.judgement
            return msgspec.structs.replace(UNSCORED, guardrail_scope=[])
        part: _Part = getattr(self, name)
        return part

    def to_json_dict(self, *, version: bool = True) -> dict[str, Json]:
        """The flat record as written: ``record_version`` first, then :data:`LAYOUT` (``version=False``:
        without it, as the scorers return a record -- the writer puts it first)."""
        out: dict[str, Json] = {"record_version": self.record_version} if version else {}
        parts = {name: self._part(name) for name in _PART_TYPES}
        for entry in LAYOUT:
            if entry is None:
                out.update(self.traces)
                continue
            key, owner = entry
            value = getattr(self, key) if owner == _I else getattr(parts[owner], key)
            if value is not UNSET:
                out[key] = value
        if self.key_order is not None:  # that line's order; a key set since then follows, as dict.update adds it
            return {**{k: out[k] for k in self.key_order if k in out}, **out}
        return out

    def to_line(self) -> str:
        """The ``records.jsonl`` line (with its newline), in the one record encoding."""
        return encode_json(self.to_json_dict()) + "\n"

    @classmethod
    def from_json(cls, data: Mapping[str, Json], *, path: str | None = None, line: int | None = None
                  ) -> ItemRecord:
        """A record line as parsed back into its parts; a line that is not a record (a missing id,
        a value of the wrong type) is one RecordError naming file, line and key."""
        if not isinstance(data, Mapping):
            raise RecordError("a record is a JSON object", path=path, line=line)
        split: dict[str, dict[str, Json]] = {name: {} for name in (_I, *_PART_TYPES)}
        traces: dict[str, Json] = {}
        version = data.get("record_version", RECORD_VERSION)
        for key, value in data.items():
            if key == "record_version":
                continue
            owner = _PART_OF.get(key)
            if owner is None:
                traces[key] = value
            else:
                split[owner][key] = value
        try:
            ident = msgspec.convert(split[_I], _Identity)
            parts = {name: msgspec.convert(split[name], typ) for name, typ in _PART_TYPES.items()}
        except msgspec.ValidationError as exc:
            found = re.search(r"`\$\.(\w+)|required field `(\w+)`", str(exc))
            field = (found.group(1) or found.group(2)) if found else None
            raise RecordError(f"not a valid record: {exc}", path=path, line=line, field=field) from None
        if not isinstance(version, int):
            raise RecordError("record_version is not an integer", path=path, line=line, field="record_version")
        judgement = parts[_J]
        assert isinstance(judgement, Judgement)
        rec = cls(id=ident.id, question=ident.question, category=ident.category, pair_id=ident.pair_id,
                  answer=parts[_A], judgement=None if judgement == UNSCORED else judgement,  # type: ignore[arg-type]
                  request=parts[_R], traces=traces, load=parts[_L], record_version=version)  # type: ignore[arg-type]
        if not _in_layout(data) and tuple(rec.to_json_dict(version="record_version" in data)) != tuple(data):
            rec.key_order = tuple(data)
        return rec

    def merge(self, fields: Mapping[str, Json] | msgspec.Struct) -> None:
        """Add keys a condition chose (its trace, or a replacing request's fields): each to the part
        that owns it (:data:`LAYOUT`), any other to ``traces`` -- where ``dict.update`` put them.
        A condition's typed trace (``conditions.trace.Trace``) becomes JSON values here, its fields
        in declared order, UNSET ones absent: the one place a trace is turned into the record's keys."""
        keys: Mapping[str, Json] = (msgspec.to_builtins(fields, enc_hook=_json_value)
                                    if isinstance(fields, msgspec.Struct) else fields)
        for key, value in keys.items():
            owner = _PART_OF.get(key)
            if owner is None:
                self.traces[key] = value
            elif owner == _I:
                setattr(self, key, value)
            else:
                if owner == _J and self.judgement is None:
                    self.judgement = msgspec.structs.replace(UNSCORED, guardrail_scope=[])
                setattr(self._part(owner), key, value)

    # -- what readers ask most, through the parts --------------------------------------------
    @property
    def outcome(self) -> str | None:
        o = self.request.outcome
        return None if o is UNSET else o

    def get(self, key: str) -> Json:
        """A flat key's value wherever it lives (a part, or a condition's trace), None when absent:
        for figures whose keys span owners (``stages.score.TIMING_KEYS``: the request's timings and a
        planner's or self-consistency's)."""
        owner = _PART_OF.get(key)
        if owner is None:
            return self.traces.get(key)
        return getattr(self, key) if owner == _I else present(getattr(self._part(owner), key))

    def retries(self) -> int:
        """Retries the item's request took (one wait recorded per retry)."""
        waits = self.request.retry_waits_s
        return 0 if waits is UNSET else len(waits)


def _json_value(obj: object) -> Json:
    """A pydantic model inside a trace (a v2 ``where`` item) as its JSON dump, as it was recorded."""
    dump = getattr(obj, "model_dump", None)
    if dump is None:
        raise NotImplementedError(f"not a record value: {type(obj).__name__}")
    return dump(mode="json")


def _in_layout(data: Mapping[str, Json]) -> bool:
    """Whether the line's keys are certainly those :meth:`ItemRecord.to_json_dict` writes, in its
    order (a cheap check; when it is not certain, the caller compares with what is written)."""
    if "category" not in data or "pair_id" not in data:  # written even when absent
        return False
    last = -2
    for key in data:
        rank = _RANK.get(key, _TRACE_RANK)
        if rank < last:
            return False
        last = rank
    return True


def iter_item_records(path: Path) -> Iterator[ItemRecord]:
    """:func:`~nlq2sql.records.store.iter_records`, each line read through :class:`ItemRecord`
    (a torn last line skipped as there; a line that is not a record refused naming its line)."""
    for lineno, data in enumerate(iter_records(path), start=1):
        yield ItemRecord.from_json(data, path=str(path), line=lineno)
