"""``nlq2sql score --run DIR``: a finished run re-derived from its own manifest and records.

Answer kind, guardrails, layer and eval set are read from the run; each record is scored again from
its raw text by the live scorer (:func:`nlq2sql.answers.offline.recorded_scorer`); what no scorer
derives (request figures, conditions' per-item choices, load stamp) is carried and abstention decided
again; summary figures are re-derived, session measurements carried, the manifest copied. With the
same inputs the three files equal the original's as parsed JSON; ``rescore.json`` says what was
checked. Refused, naming the field and both values: changed layer content (``layer_sha256``), data
(``db_sha256``), eval set (``evalset_sha256``) or learned guardrail (``artefact_sha256``)."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql import __version__
from nlq2sql.answers.kinds import summary_fields
from nlq2sql.answers.offline import recorded_scorer
from nlq2sql.env_info import git_info
from nlq2sql.errors import InputError
from nlq2sql.records.item import ItemRecord, iter_item_records
from nlq2sql.records.results import manifest_warehouse
from nlq2sql.records.store import (
    MANIFEST,
    RECORD_VERSION,
    RECORDS,
    SUMMARY,
    BulkRecordWriter,
    read_json,
    write_json_atomic,
)
from nlq2sql.records.summary_parts import Figures
from nlq2sql.semantic import Warehouse, open_warehouse
from nlq2sql.semantic.dbt_project import DbtOptions
from nlq2sql.stages.abstention import apply_abstention, decided
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.goldsql import is_gold_sql_set, load_gold_sql_set
from nlq2sql.stages.guardrail import RuleSet
from nlq2sql.stages.learned_guardrail import LearnedRuleSet
from nlq2sql.stages.pipeline import ScoreConfig, as_missing, make_executor, publish, staging_dir, summarise_file
from nlq2sql.stages.queryset import load_query_set
from nlq2sql.stages.rulesets import load_guardrails

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.stages.execute import Executor
    from nlq2sql.stages.sets import AnySet, Case

__all__ = ["RUN_KINDS", "RESCORE", "Rescored", "SUMMARY_DERIVED", "rescore_run_dir"]

#: The run kinds whose records are one scored answer per item (``batch`` keeps its own layout).
RUN_KINDS = ("eval", "score")
#: What ``score --run`` writes beside the run's files: what it checked and whether they are equal.
RESCORE = "rescore.json"
#: Summary keys re-derived from the records (the aggregator's figures and the answer kind); every
#: other key of the original summary is what its session measured, carried as it is.
SUMMARY_DERIVED = (*Figures.model_fields, "answer")
#: The status of an item a responses file did not answer (``pipeline.as_missing``).
MISSING = "missing"


@dataclass
class Rescored:
    """What :func:`rescore_run_dir` did: the files it compared, the summary keys it carried."""

    run: str
    out: str
    identical: dict[str, bool]  # file name → equal to the original's as parsed JSON (:func:`_same_json`)
    carried: list[str]  # summary keys carried from the original (not derived from the records)
    checked: list[str] = field(default_factory=list)  # what of the manifest was matched, and how
    left_out: list[str] = field(default_factory=list)  # figures derived now that the original summary lacks

    def to_json(self) -> dict[str, object]:
        return {"run": self.run, "harness_version": __version__, "git_commit": git_info().git_commit,
                "rescored_at": time.time(), "identical": self.identical, "carried_summary_keys": self.carried,
                "figures_not_in_original": self.left_out, "checked": self.checked}


def _refuse(msg: str, run: Path, fld: str) -> InputError:
    return InputError(msg, path=str(run / MANIFEST), field=fld)


def _text(m: Mapping[str, JsonValue], key: str) -> str | None:
    v = m.get(key)
    return v if isinstance(v, str) else None


def _read_manifest(run: Path) -> Mapping[str, JsonValue]:
    if not run.is_dir():
        raise InputError("not a run directory", path=str(run), field="--run")
    for name in (MANIFEST, RECORDS, SUMMARY):
        if not (run / name).is_file():
            raise InputError(f"not a finished run: no {name} (score --run re-derives a run from its manifest "
                             "and records)", path=str(run / name), field="--run")
    m = read_json(run / MANIFEST)
    s = read_json(run / SUMMARY)
    if not isinstance(m, dict) or not isinstance(s, dict):
        raise InputError("manifest and summary must be JSON objects", path=str(run), field="--run")
    kind = m.get("kind")
    if kind not in RUN_KINDS:
        raise _refuse(f"a {kind!r} run has no per-item scored records to re-derive (kinds: {', '.join(RUN_KINDS)})",
                      run, "kind")
    return m


def _open_layer(run: Path, m: Mapping[str, JsonValue], checked: list[str]) -> Warehouse:
    """The run's warehouse, opened as it recorded it, refused unless it is still the same content."""
    sm = manifest_warehouse(dict(m))
    if _text(m, "semantic_model_path") and not Path(sm).exists():
        raise _refuse(f"the run's semantic model {sm} is not there (run from the project it was made in)",
                      run, "semantic_model_path")
    db_text = _text(m, "db")
    db = Path(db_text) if db_text and Path(db_text).exists() else None  # else: the layer's shipped build
    schema = _text(m, "db_schema")
    wh = open_warehouse(sm, db, dbt=DbtOptions(db_schema=schema) if schema else None, announce=False)
    facts = wh.manifest()
    recorded_db = _text(m, "db_sha256")
    if recorded_db is None:
        raise _refuse("no db_sha256: cannot tell the run's data", run, "db_sha256")
    if recorded_db != facts.db_sha256:
        raise _refuse(f"the database changed: the run's {db_text} had sha256 {recorded_db}, "
                      f"{facts.db} now has {facts.db_sha256}", run, "db_sha256")
    checked.append(f"db_sha256 {recorded_db[:12]}… ({facts.db})")
    layer = _text(m, "layer_sha256")
    if layer is not None:
        if layer != facts.layer_sha256:
            raise _refuse(f"the semantic layer changed: the run's {sm} had content sha256 {layer}, it now has "
                          f"{facts.layer_sha256}", run, "layer_sha256")
        checked.append(f"layer_sha256 {layer[:12]}… (content)")
    else:  # a run naming no layer content: its file hash (method varies by release), else its name
        sha = _text(m, "semantic_model_sha256")
        how = ("semantic_model_sha256 (file)" if sha == facts.semantic_model_sha256 else
               "semantic_model by name on the same data (no layer_sha256 recorded; the records are the check)")
        checked.append(how)
    return wh


def _check_rulesets(run: Path, m: Mapping[str, JsonValue], rulesets: list[RuleSet], checked: list[str]) -> None:
    recorded = m.get("guardrail_artefacts") or {}
    for rs in rulesets:
        if not isinstance(rs, LearnedRuleSet):
            continue
        now = rs.provenance().artefact_sha256
        was = recorded.get(rs.name, {}).get("artefact_sha256") if isinstance(recorded, dict) else None
        if was != now:
            raise _refuse(f"the learned guardrail {rs.name} changed: the run's artefact had sha256 {was}, "
                          f"it now has {now}", run, f"guardrail_artefacts.{rs.name}.artefact_sha256")
        checked.append(f"guardrail_artefacts.{rs.name}.artefact_sha256 {now[:12]}…")


def _bank_note(m: Mapping[str, JsonValue]) -> str:
    """What became of the run's example bank: never read in scoring (each item's choice, its
    ``example_ids``, is carried from its record), so a changed bank is said, not refused."""
    ex = m.get("examples")
    if not isinstance(ex, dict) or not isinstance(ex.get("bank_path"), str):
        return "examples: none recorded"
    path, was = Path(ex["bank_path"]), ex.get("bank_sha256")
    now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    state = ("unchanged" if now == was else "not found here" if now is None else f"changed (now {now[:12]}…)")
    return (f"examples.bank_sha256 {str(was)[:12]}… ({path}): {state}; not read in scoring, the example_ids "
            "are carried")


def _rescore_line(old: ItemRecord, case: Case, score: Callable[..., ItemRecord], ex: Executor, wh: Warehouse
                  ) -> ItemRecord:
    """One record scored again from its raw text; the request, the conditions' choices and the load
    stamp carried from the recorded line (with its ``record_version``), abstention decided again.  What the
    scoring measured rather than derived is carried too: ``sql_exec_s`` (a timing), and a result
    head whose rows are the recorded head's in another order (an unordered result's order is the
    database's choice; the result's hash does not depend on it)."""
    if old.answer.status == MISSING:  # an item a responses file left unanswered (--allow-missing)
        return as_missing(score(case, None, ex, wh.catalog, request_error="no response in file"))
    outcome = old.outcome
    rec = score(case, old.answer.raw_text, ex, wh.catalog, finish_reason=old.answer.finish_reason,
                request_error=None if outcome in (None, "ok") else outcome)
    rec.request, rec.load, rec.record_version = old.request, old.load, old.record_version
    rec.merge({k: v for k, v in old.traces.items() if k not in rec.traces})
    if decided(old) and rec.scored:  # decided again from the recorded evidence
        apply_abstention(rec)
    if rec.answer.sql_exec_s is not None and old.answer.sql_exec_s is not None:
        rec.answer.sql_exec_s = old.answer.sql_exec_s
    if _same_rows(rec.answer.result_head, old.answer.result_head):
        rec.answer.result_head = old.answer.result_head
    if rec.judgement is not None and old.judgement is not None and \
            _same_rows(rec.judgement.gold_result_head, old.judgement.gold_result_head):
        rec.judgement.gold_result_head = old.judgement.gold_result_head
    return rec


def _same_json(a: Path, b: Path, *, lines: bool = False, skip: tuple[str, ...] = ()) -> bool:
    """Whether two JSON files (``lines``: JSON lines, line by line) are equal as parsed: key order
    aside, each value with its JSON type (``1`` is not ``1.0``), a top-level key of ``skip`` left out."""
    def canonical(path: Path) -> list[str]:
        text = path.read_text(encoding="utf-8")
        out = []
        for part in text.splitlines() if lines else [text]:
            obj = json.loads(part)
            if skip and isinstance(obj, dict):
                obj = {k: v for k, v in obj.items() if k not in skip}
            out.append(json.dumps(obj, sort_keys=True))
        return out

    return canonical(a) == canonical(b)


def _same_rows(new: list[list[JsonValue]] | None, old: list[list[JsonValue]] | None) -> bool:
    """Two result heads with the same rows, in any order."""
    if not isinstance(new, list) or not isinstance(old, list) or len(new) != len(old):
        return False
    return sorted(map(repr, new)) == sorted(map(repr, old))


def _summary(original: Mapping[str, JsonValue], derived: Mapping[str, JsonValue], digest: object
             ) -> tuple[dict[str, object], list[str]]:
    """The original summary with its figures re-derived, the records' digest new, the rest carried,
    in the original's key order.  A figure this harness derives that the original's did not (an
    older run) is left out, so that the summary is the run's: :func:`rescore_run_dir` names it."""
    out: dict[str, object] = {}
    carried: list[str] = []
    for key, value in original.items():
        if key in SUMMARY_DERIVED:
            if key in derived:
                out[key] = derived[key]
        elif key == "records":
            out[key] = digest
        elif key == "record_version":
            out[key] = RECORD_VERSION
        else:
            out[key] = value
            carried.append(key)
    return out, carried


def rescore_run_dir(run: Path, out: Path, *, force: bool = False) -> Rescored:
    """Re-derive run ``run`` into ``out`` (see the module); bad input is one InputError, nothing written."""
    if out.resolve() == run.resolve():
        raise InputError("is the run itself: write the re-derived run elsewhere", path=str(out), field="--out")
    m = _read_manifest(run)
    checked: list[str] = []
    wh = _open_layer(run, m, checked)
    names = m.get("guardrails") or []
    rulesets = load_guardrails([str(n) for n in names], wh.catalog, wh)
    _check_rulesets(run, m, rulesets, checked)
    set_name = _text(m, "evalset_path") or _text(m, "evalset")
    if set_name is None:
        raise _refuse("no eval set recorded: nothing to score against", run, "evalset_path")
    gold_sql = is_gold_sql_set(set_name, wh.name)
    answer = _text(m, "answer") or "intent"
    es: AnySet = (load_gold_sql_set(set_name, wh.name) if gold_sql else
               load_query_set(set_name, wh.catalog) if answer != "intent" else load_evalset(set_name, wh))
    if es.sha256 != _text(m, "evalset_sha256"):
        raise _refuse(f"the eval set changed: the run's {set_name} had sha256 {m.get('evalset_sha256')}, "
                      f"it now has {es.sha256}", run, "evalset_sha256")
    checked.append(f"evalset_sha256 {es.sha256[:12]}… ({set_name})")
    checked.append(_bank_note(m))
    cases = {c.id: c for c in es.cases}
    tmp = staging_dir(ScoreConfig(set_name, Path(), out, force=force))
    try:
        with make_executor(wh) as ex, BulkRecordWriter(tmp / RECORDS) as writer, \
                recorded_scorer(m, wh, rulesets, gold_sql) as score:
            records = run / RECORDS
            for lineno, old in enumerate(iter_item_records(records), start=1):
                case = cases.get(old.id)
                if case is None:
                    raise InputError(f"record id {old.id!r} is not in eval set {es.name}", path=str(records),
                                     line=lineno, field="id")
                writer.write(_rescore_line(old, case, score, ex, wh))
        derived = summarise_file(tmp / RECORDS, rulesets, summary_fields).to_json()
        summary, carried = _summary(read_json(run / SUMMARY), derived, writer.digest().to_json())
        write_json_atomic(tmp / SUMMARY, summary)
        shutil.copyfile(run / MANIFEST, tmp / MANIFEST)
        same = {RECORDS: _same_json(run / RECORDS, tmp / RECORDS, lines=True),
                SUMMARY: _same_json(run / SUMMARY, tmp / SUMMARY, skip=("records",)),
                MANIFEST: _same_json(run / MANIFEST, tmp / MANIFEST)}
        original = read_json(run / SUMMARY)
        result = Rescored(run=str(run), out=str(out), identical=same, carried=carried, checked=checked,
                          left_out=[k for k in derived if k in SUMMARY_DERIVED and k not in original])
        write_json_atomic(tmp / RESCORE, result.to_json())
        publish(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result
