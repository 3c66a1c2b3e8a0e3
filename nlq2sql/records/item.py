"""One item's record as a type: :class:`ItemRecord`, composed of the parts every reader asks about.

A ``records.jsonl`` line is one flat JSON object whose keys have four owners, hence the parts:
:class:`AnswerPart` and :class:`Judgement` (the scorer), :class:`RequestPart` (timings, tokens,
attempts, replica), ``traces`` (the conditions) and :class:`LoadStamp`. A field a record lacks is
unset (absent on disk, ``None`` to a reader); one set to ``None`` is written as null.
:meth:`ItemRecord.from_json` reads every record version (version 1 differs only in key order, not a
contract: compare as parsed JSON); a line keeps its version, a new one is
:data:`~nlq2sql.records.store.LINE_VERSION`. Values JSON by nature (intent dumps, result heads,
traces) stay JSON values: this module is their edge."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from pydantic import ConfigDict, Field, ValidationError

from nlq2sql.errors import RecordError
from nlq2sql.records.run_parts import AttemptEntry
from nlq2sql.records.store import LINE_VERSION, encode_json, iter_records
from nlq2sql.records.typed import JsonValue, Num, Typed

__all__ = ["UNSCORED", "AnswerPart", "ItemRecord", "Judgement", "LoadStamp", "RequestPart", "iter_item_records"]


class _Part(Typed):
    """A part's fields are its record keys; an unset field is absent from the record (not null).
    Strict: a value of another JSON type is refused, not converted (``"yes"`` is not a bool)."""

    model_config = ConfigDict(strict=True)

    def keys_set(self) -> dict[str, JsonValue]:
        """The fields given, as the flat record holds them (values are JSON already)."""
        return self.model_dump(exclude_unset=True)


class AnswerPart(_Part):
    """What the model answered and what became of it: text, parse status, intents (raw and after
    guardrails), the SQL it compiled to and its result (scored or not, the same keys)."""

    answer: str | None = None  # the answer kind; absent for a v1 intent
    raw_text: str | None = None
    finish_reason: str | None = None
    status: str | None = None
    status_reason: str | None = None
    final_status: str | None = None
    final_status_reason: str | None = None
    raw_intent: dict[str, JsonValue] | None = None
    final_intent: dict[str, JsonValue] | None = None
    unanswerable: str | None = None  # v2: the model's reason for not answering
    interventions: list[dict[str, JsonValue]] | None = None
    sql: str | None = None
    params: list[JsonValue] | None = None
    exec_error: str | None = None
    result_hash: str | None = None
    result_rows: int | None = None
    result_head: list[list[JsonValue]] | None = None
    result_columns: list[str] | None = None  # the SQL arm
    result_truncated: bool | None = None
    sql_exec_s: Num | None = None


class Judgement(_Part):
    """The answer against its gold: the gold itself, correctness (per part, per criterion) and
    the error class.  An unscored item (no gold) carries :data:`UNSCORED`: the same keys, null."""

    answerable: bool | None = None  # v2 sets: whether the gold is a query or "unanswerable"
    gold_intent: dict[str, JsonValue] | None = None
    guardrail_scope: list[str] | None = None
    gold_result_head: list[list[JsonValue]] | None = None
    gold_result_hash: str | None = None
    gold_sql: str | None = None
    gold_params: list[JsonValue] | None = None
    parts: dict[str, bool] | None = None
    correct_raw: bool | None = None
    correct_final: bool | None = None
    correct_exec: bool | None = None
    correct_lenient: bool | None = None
    error_raw: str | None = None
    error_final: str | None = None
    error_lenient: str | None = None
    wrong_fields_raw: list[str] | None = None
    column_rule: str | None = None  # gold-SQL sets: how the answer's columns were matched to the gold's
    gold_alternative: int | None = None  # gold-SQL sets: the gold alternative matched (0-based)

    @property
    def scored(self) -> bool:
        return self.gold_intent is not None


#: The judgement keys of an item without a gold (``batch --questions``): every key a scored v1
#: record has, null (``guardrail_scope`` empty), so readers need no second layout.
_UNSCORED_KEYS: Final[dict[str, JsonValue]] = {
    "gold_intent": None, "guardrail_scope": [], "gold_result_head": None, "gold_result_hash": None,
    "correct_raw": None, "correct_final": None, "correct_exec": None, "error_raw": None, "error_final": None,
    "wrong_fields_raw": None}
#: The judgement of an item without a gold (a reader's fallback; never mutate it).
UNSCORED: Final = Judgement(**_UNSCORED_KEYS)


class RequestPart(_Part):
    """How the request went (a ``transport.stream.Completion``, by ``run.item.request_part``, plus the runner's):
    outcome, timings, tokens, attempts and retries, the replica that answered, the output's size."""

    outcome: str | None = None
    http_status: int | None = None
    error: str | None = None
    attempts: int | None = None
    latency_s: Num | None = None
    ttft_s: Num | None = None
    itl_mean_s: Num | None = None
    itl_max_s: Num | None = None
    chunks: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    retry_waits_s: list[Num] | None = None
    unsent_retries: int | None = None
    started: Num | None = None
    replica: str | None = None
    failed_over_from: list[str] | None = None
    attempt_log: list[AttemptEntry] | None = None
    latency_e2e_s: Num | None = None
    concurrency: int | None = None
    whitespace_chars: int | None = None
    chars: int | None = None


class LoadStamp(_Part):
    """An open-loop item's arrival: when it was scheduled, how long it waited for a slot."""

    scheduled: Num | None = None
    queued_s: Num | None = None
    latency_from_arrival_s: Num | None = None


_ID_KEYS: Final = ("id", "question", "category", "pair_id")
_PARTS: Final[dict[str, type[_Part]]] = {"answer": AnswerPart, "judgement": Judgement, "request": RequestPart,
                                         "load": LoadStamp}
#: Each flat key's owner: ``id`` for the identity keys, else the part's name (a condition's key has none).
_PART_OF: Final = {**dict.fromkeys(_ID_KEYS, "id"),
                   **{key: name for name, typ in _PARTS.items() for key in typ.model_fields}}


class ItemRecord(Typed):
    """One item's record: who (id, question, category, pair), the answer, its judgement, the
    request, the conditions' traces and the load stamp.  ``judgement`` is None for an item
    without a gold; ``request`` and ``load`` are empty for records scored offline."""

    model_config = ConfigDict(strict=True)

    id: str
    question: str
    category: str | None = None
    pair_id: str | None = None
    answer: AnswerPart = Field(default_factory=AnswerPart)
    judgement: Judgement | None = None
    request: RequestPart = Field(default_factory=RequestPart)
    #: The conditions' per-item keys (examples chosen, values linked, votes, the planner's stage,
    #: abstention): JSON values, each condition's own.
    traces: dict[str, JsonValue] = Field(default_factory=dict)
    load: LoadStamp = Field(default_factory=LoadStamp)
    record_version: int = LINE_VERSION

    @property
    def scored(self) -> bool:
        return self.judgement is not None and self.judgement.scored

    def to_json(self, *, version: bool = True) -> dict[str, JsonValue]:  # type: ignore[override]
        """The flat record as written (``version=False``: without ``record_version``, as the scorers
        return a record -- the writer adds it).  ``category`` and ``pair_id`` are always written."""
        out: dict[str, JsonValue] = {"record_version": self.record_version} if version else {}
        out.update(id=self.id, question=self.question, category=self.category, pair_id=self.pair_id)
        out.update(self.answer.keys_set())
        out.update(self.judgement.keys_set() if self.judgement is not None else _unscored())
        out.update(self.request.keys_set())
        out.update(self.traces)
        out.update(self.load.keys_set())
        return out

    def to_line(self) -> str:
        """The ``records.jsonl`` line (with its newline), in the one record encoding."""
        return encode_json(self.to_json()) + "\n"

    @classmethod
    def from_json(cls, data: JsonValue, path: str | None = None, *, line: int | None = None) -> ItemRecord:
        """A record line (any record version) as parsed back into its parts; a line that is not a
        record (a missing id, a value of the wrong type) is one RecordError naming file, line and key."""
        if not isinstance(data, Mapping):
            raise RecordError("a record is a JSON object", path=path, line=line)
        split: dict[str, dict[str, JsonValue]] = {"id": {}, "answer": {}, "judgement": {}, "request": {}, "load": {}}
        traces: dict[str, JsonValue] = {}
        for key, value in data.items():
            if key == "record_version":
                if not isinstance(value, int) or isinstance(value, bool):
                    raise RecordError("record_version is not an integer", path=path, line=line, field=key)
                if value > LINE_VERSION:
                    raise RecordError(f"record_version {value} is newer than this harness reads ({LINE_VERSION}): "
                                      "upgrade nlq2sql", path=path, line=line, field=key)
                continue
            owner = _PART_OF.get(key)
            if owner is None:
                traces[key] = value
            else:
                split[owner][key] = value
        judgement = split["judgement"]
        obj = {**split["id"], "answer": split["answer"], "request": split["request"], "load": split["load"],
               "judgement": None if judgement == _UNSCORED_KEYS else judgement, "traces": traces}
        if "record_version" in data:
            obj["record_version"] = data["record_version"]
        try:
            return cls.model_validate(obj)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = [str(x) for x in first["loc"]]
            field = loc[1] if len(loc) > 1 and loc[0] in _PARTS else (loc[0] if loc else None)
            raise RecordError(f"not a valid record: {first['msg']}", path=path, line=line, field=field) from None

    def merge(self, fields: Mapping[str, JsonValue] | Typed) -> None:
        """Add keys a condition chose (its trace, or a replacing request's fields): each to the part
        that owns it, any other to ``traces``.  A condition's typed trace (``conditions.trace.Trace``)
        becomes JSON values here (:meth:`~nlq2sql.records.typed.Typed.to_json`)."""
        keys: Mapping[str, JsonValue] = fields.to_json() if isinstance(fields, Typed) else fields
        for key, value in keys.items():
            owner = _PART_OF.get(key)
            if owner is None:
                self.traces[key] = value
            elif owner == "id":
                setattr(self, key, value)
            else:
                if owner == "judgement" and self.judgement is None:
                    self.judgement = Judgement(**_unscored())
                setattr(self.judgement if owner == "judgement" else getattr(self, owner), key, value)

    # -- what readers ask most, through the parts --------------------------------------------
    @property
    def outcome(self) -> str | None:
        return self.request.outcome

    def get(self, key: str) -> JsonValue:
        """A flat key's value wherever it lives (a part, or a condition's trace), None when absent:
        for figures whose keys span owners (the summary's timings: the request's, and the costs a
        planner or self-consistency records)."""
        owner = _PART_OF.get(key)
        if owner is None:
            return self.traces.get(key)
        if owner == "id":
            return getattr(self, key)
        part = (self.judgement or UNSCORED) if owner == "judgement" else getattr(self, owner)
        return getattr(part, key)

    def retries(self) -> int:
        """Retries the item's request took (one wait recorded per retry)."""
        return len(self.request.retry_waits_s or ())


def _unscored() -> dict[str, JsonValue]:
    """:data:`_UNSCORED_KEYS`, its list fresh (a record never shares a nested object with another)."""
    return {**_UNSCORED_KEYS, "guardrail_scope": []}


def iter_item_records(path: Path) -> Iterator[ItemRecord]:
    """:func:`~nlq2sql.records.store.iter_records`, each line read through :class:`ItemRecord`
    (a torn last line skipped as there; a line that is not a record refused naming its line)."""
    for lineno, data in enumerate(iter_records(path), start=1):
        yield ItemRecord.from_json(data, path=str(path), line=lineno)
