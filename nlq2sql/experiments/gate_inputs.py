"""What the gate reads from its two runs, and the refusals of runs it cannot compare: a manifest of
any age is read as written and checked fact by fact with the gate's messages; records through ItemRecord."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nlq2sql.errors import InputError, RecordError
from nlq2sql.experiments.identity import RunIdentity, difference
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import RECORDS, SUMMARY

__all__ = ["RunFacts", "check_same_inputs", "read_run"]


@dataclass(frozen=True)
class RunFacts:
    """What the gate reads from a run's manifest, taken as written: the gate checks each fact
    itself (a manifest of any age, with its own refusals) rather than through the manifest model."""

    kind: str | None
    model: str | None
    prompt: str | None
    guardrails: list[str]
    evalset: str | None
    evalset_sha256: str | None  # None: not recorded (refused in check_same_inputs)
    semantic_model: str | None
    semantic_model_sha256: str | None
    layer_sha256: str | None = None  # the layer by content (recorded since runs name it)
    db_sha256: str | None = None

    @classmethod
    def of(cls, m: dict[str, Any]) -> RunFacts:  # (the manifest just read: a JSON edge)
        g, ev, sha = m.get("guardrails"), m.get("evalset_sha256"), m.get("semantic_model_sha256")

        def text(key: str) -> str | None:
            v = m.get(key)
            return v if isinstance(v, str) else None

        return cls(kind=m.get("kind"), model=m.get("model"), prompt=m.get("prompt"),
                   guardrails=[str(x) for x in g] if isinstance(g, list) else [], evalset=m.get("evalset"),
                   evalset_sha256=ev if isinstance(ev, str) else None, semantic_model=m.get("semantic_model"),
                   semantic_model_sha256=sha if isinstance(sha, str) else None,
                   layer_sha256=text("layer_sha256"), db_sha256=text("db_sha256"))


def read_run(run_dir: Path) -> tuple[RunFacts, dict[str, ItemRecord]]:
    """(manifest facts, records by id), refused unless the records match the summary."""
    run = RunDir.finished(run_dir)  # missing files, changed records, count vs n
    manifest, summary = run.manifest_json(), run.summary_json()
    path = run_dir / RECORDS
    if not isinstance(summary.get("n"), int):
        raise RecordError("no item count 'n': cannot check the records against it",
                          path=str(run_dir / SUMMARY))
    records: dict[str, ItemRecord] = {}
    for lineno, rec in enumerate(run.records(), start=1):  # (a line that is no record: refused)
        if rec.judgement is None or not isinstance(rec.judgement.correct_final, bool):
            raise RecordError("missing or non-boolean correct_final", path=str(path), line=lineno,
                              field="correct_final")
        if rec.id in records:
            raise RecordError(f"duplicate id {rec.id!r}", path=str(path), line=lineno, field="id")
        records[rec.id] = rec
    if len(records) != summary["n"]:
        raise RecordError(f"{len(records)} readable records, but the summary counts {summary['n']}",
                          path=str(path))
    return RunFacts.of(manifest), records


def check_same_inputs(base_dir: Path, base: RunFacts, cand_dir: Path, cand: RunFacts) -> None:
    for d, m in ((base_dir, base), (cand_dir, cand)):
        if m.evalset_sha256 is None:
            raise RecordError("manifest has no evalset_sha256: cannot tell which eval set it ran",
                              path=str(d / "manifest.json"), field="evalset_sha256")
    b_ev, c_ev = str(base.evalset_sha256), str(cand.evalset_sha256)
    if b_ev != c_ev:
        raise InputError(f"different eval sets: the baseline ran {base.evalset!r} "
                         f"(sha256 {b_ev[:12]}…), the candidate "
                         f"{cand.evalset!r} (sha256 {c_ev[:12]}…); "
                         "a gate compares runs of the same eval set", field="--candidate")
    diff = difference(RunIdentity.of(base), RunIdentity.of(cand))  # by content: data, then layer
    if diff is not None:
        raise InputError(diff.text() + f"; a gate compares runs on the same {diff.noun}", field="--candidate")
