"""A run directory, read one way (:class:`RunDir`): its manifest, summary and records as types or
as the JSON read, and the check every report rests on, that the records still match the summary
computed from them.  Every problem is one :class:`~nlq2sql.errors.RecordError` naming file, line
and field; a run directory is untrusted input (a regular file each, bounded JSON depth)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from nlq2sql.errors import RecordError
from nlq2sql.records.item import ItemRecord, iter_item_records
from nlq2sql.records.results import Manifest, Summary
from nlq2sql.records.store import MANIFEST, RECORDS, SUMMARY, iter_records, read_json, records_digest, require_run
from nlq2sql.records.typed import JsonValue, Typed

__all__ = ["RunDir"]

T = TypeVar("T", bound=Typed)


class RunDir:
    """A run directory: ``manifest.json`` (written when it starts), ``records.jsonl`` (one line an
    item) and ``summary.json`` (written when it ends).  Opening one checks it has a manifest."""

    def __init__(self, path: Path) -> None:
        self.path = require_run(path)
        self._read: dict[str, dict[str, JsonValue]] = {}  # each file parsed once (the check, then the reader)

    @classmethod
    def finished(cls, path: Path) -> RunDir:
        """A finished run whose records still match its summary (:meth:`check_records`)."""
        run = cls(path)
        run.check_records()
        return run

    def manifest_json(self) -> dict[str, JsonValue]:
        """The manifest as read (a JSON object)."""
        return self._object(MANIFEST)

    def summary_json(self) -> dict[str, JsonValue]:
        """The summary as read (a JSON object)."""
        return self._object(SUMMARY)

    def manifest(self, model: type[T] = Manifest) -> T:  # type: ignore[assignment]
        """The manifest through ``model`` (the condition registry's for a run's conditions)."""
        return self._typed(model, MANIFEST)

    def summary(self) -> Summary:
        return self._typed(Summary, SUMMARY)

    def records(self) -> Iterator[ItemRecord]:
        """The item records in file order (a line that is no record: refused, naming it)."""
        return iter_item_records(self.path / RECORDS)

    def check_records(self) -> None:
        """Refuse records missing, malformed or changed since the summary was computed from them.

        The summary keeps its records' count and SHA-256 (runs before that: the count ``n``), so
        no report rests on records that no longer support it."""
        summary, path = self.summary_json(), self.path / RECORDS
        if not path.is_file():
            raise RecordError("missing (the summary has no records behind it)", path=str(path))
        parsed = sum(1 for _ in iter_records(path))  # a malformed middle line raises here
        kept = summary.get("records")
        if isinstance(kept, dict) and "sha256" in kept:
            now = records_digest(path)
            if now.count != kept.get("count") or parsed != kept.get("count"):
                raise RecordError(f"{parsed} readable records, but the summary was computed from "
                                  f"{kept.get('count')}", path=str(path))
            if now.sha256 != kept["sha256"]:
                raise RecordError("changed after its summary was written (SHA-256 differs); re-score or "
                                  "re-run it", path=str(path))
        elif summary.get("n") is not None and parsed != summary["n"]:
            raise RecordError(f"{parsed} readable records, but the summary counts {summary['n']}", path=str(path))

    def _object(self, name: str) -> dict[str, JsonValue]:
        if name not in self._read:
            data = read_json(self.path / name)
            if not isinstance(data, dict):
                raise RecordError("not a JSON object", path=str(self.path / name))
            self._read[name] = data
        return self._read[name]

    def _typed(self, model: type[T], name: str) -> T:
        try:
            return model.model_validate(self._object(name))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise RecordError(first["msg"], path=str(self.path / name),
                              field=".".join(str(x) for x in first["loc"])) from None
