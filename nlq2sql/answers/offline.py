"""Offline scoring over answer kinds: a responses file into a run directory (``nlq2sql score
--responses``), a recorded run re-scored under other guardrails (:func:`rescore_run`).

Every registered kind and gold-SQL set is scored by the kind's scorer, the one live runs and
``score --run`` use (:func:`recorded_scorer`). Response lines are checked as read and the run is
written to a sibling temporary directory renamed into place at the end, so bad input leaves nothing
behind. A v1 set is read as one case per distinct line, and each distinct v1 answer to a case is
scored once (:class:`~nlq2sql.stages.rescore.RecordMemo`): a million items take seconds."""

from __future__ import annotations

import contextlib
import gc
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql.answers.kinds import KINDS, AnswerKind, IntentKind, answer_kind, load_eval_set
from nlq2sql.answers.sql.gold import COLUMN_RULE
from nlq2sql.errors import InputError
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.results import Manifest as ManifestModel
from nlq2sql.records.results import Summary as SummaryModel
from nlq2sql.records.results import manifest_warehouse
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import (
    MANIFEST,
    RECORD_VERSION,
    RECORDS,
    SUMMARY,
    BulkRecordWriter,
    write_json_atomic,
)
from nlq2sql.records.summary_parts import Figures, Missing
from nlq2sql.semantic import Warehouse, open_warehouse, warehouse
from nlq2sql.semantic.catalog import display_path
from nlq2sql.semantic.dbt_project import DbtOptions
from nlq2sql.stages.abstention import apply_abstention, carry_evidence, decided
from nlq2sql.stages.evalset import CaseIndex, EvalCase, index_evalset
from nlq2sql.stages.goldsql import is_gold_sql_set, resolve_search_path
from nlq2sql.stages.guardrail import RuleSet
from nlq2sql.stages.origin import manifest_base
from nlq2sql.stages.pipeline import (
    ScoreConfig,
    as_missing,
    make_executor,
    publish,
    read_responses,
    refuse_missing,
    staging_dir,
)
from nlq2sql.stages.rescore import RecordMemo
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.stages.summary import Summary

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.stages.sets import AnySet, Case

__all__ = ["recorded_scorer", "rescore_run", "score_responses"]

#: What a request error is recorded as for an item a responses file does not answer.
NO_RESPONSE = "no response in file"
#: Per-item keys of a recorded request carried into a re-scored record (:func:`rescore_run`).
_REQUEST_KEYS = ("latency_s", "ttft_s", "completion_tokens", "prompt_tokens", "itl_mean_s")


@dataclass(frozen=True)
class _Items:
    """A set as scoring reads it: each id's position, a case per position, and the set the manifest
    names.  A v1 eval set is a :class:`CaseIndex`, whose case at a position is shared by every line
    equal to it but for the id (:meth:`case` gives an item's own)."""

    scored: CaseIndex | AnySet
    ids: Mapping[str, int]
    cases: Sequence[Case]

    def case(self, cid: str) -> Case:
        if isinstance(self.scored, CaseIndex):
            return self.scored.case(cid)
        return self.cases[self.ids[cid]]


def _items(name_or_path: str, kind: type[AnswerKind], wh: Warehouse, gold_sql: bool) -> _Items:
    if not gold_sql and kind.case_type is EvalCase:  # v1 eval-set cases: indexed (load_evalset's checks)
        index = index_evalset(name_or_path, wh)
        return _Items(index, index.ids, index.shared)
    es = load_eval_set(name_or_path, kind.name, wh)
    cases: Sequence[Case] = es.cases
    return _Items(es, {c.id: i for i, c in enumerate(cases)}, cases)


def score_responses(cfg: ScoreConfig, answer: str = IntentKind.name) -> SummaryModel:
    """Score a responses file of answers of kind ``answer`` against ``cfg.evalset`` into ``cfg.out``
    (see the module); returns the summary.  The summary and manifest name the kind unless it is the
    implicit one (v1 intents) on its own eval set; a gold-SQL set adds its column rule, and a set
    where SQL runs (gold SQL, or a kind that writes SQL) the search path names resolved in."""
    kind = KINDS[answer]
    wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
    gold_sql = is_gold_sql_set(cfg.evalset, wh.name)
    if cfg.guardrails and not kind.takes_guardrails:
        raise InputError(f"guardrails act on intents and queries; --answer {answer} takes none (pass --guardrails "
                         "none)", field="--guardrails")
    rulesets = load_guardrails(list(cfg.guardrails), wh.catalog, wh)  # on a v2 query: stages.query_guard
    compiles_before = wh.catalog.engine.compiles  # golds' and answers' compiles: what this run needed
    items = _items(cfg.evalset, kind, wh, gold_sql)
    search_path = resolve_search_path(wh.catalog.manifest, cfg.search_path)
    named = gold_sql or not kind.implicit  # the run names its answer kind
    ids = items.ids
    tmp = staging_dir(cfg)
    started = time.time()
    gc.freeze()  # the set lives for the whole run: the cyclic collector need not re-walk it
    try:
        summ = Summary(rulesets, fields=kind.fields(gold_sql))
        answered = bytearray(len(ids))
        with make_executor(wh) as ex, BulkRecordWriter(tmp / RECORDS) as writer, \
                kind.scorer(wh, rulesets, gold_sql=gold_sql, search_path=search_path) as score:
            # V1 intents on indexed cases: each distinct (case, answer) scored and encoded once; the
            # summary, which reads no per-item field, counts each distinct record once.
            memo = (RecordMemo(rulesets, ex, wh.catalog, writer, score=score)
                    if isinstance(items.scored, CaseIndex) and kind.form == IntentKind.form else None)
            for resp in read_responses(cfg.responses, ids, answer, form=kind.form):
                pos = ids[resp.id]
                if memo is not None:
                    case = items.cases[pos]
                    assert isinstance(case, EvalCase)  # a memo reads indexed v1 cases only
                    summ.add_shared(memo.write(resp.id, case, resp.text, resp.finish_reason))
                else:
                    rec = score(items.case(resp.id), resp.text, ex, wh.catalog, finish_reason=resp.finish_reason)
                    writer.write(rec)
                    summ.add(rec)
                answered[pos] = 1
            missing = [cid for cid, pos in ids.items() if not answered[pos]]
            refuse_missing(missing, len(ids), cfg)
            for cid in missing:
                rec = as_missing(score(items.case(cid), None, ex, wh.catalog, request_error=NO_RESPONSE))
                writer.write(rec)
                summ.add(rec)
            executed = ex.executed
        added: dict[str, object] = {"distinct_queries_executed": executed}
        if named:
            added.update(answer=answer, compiles=wh.catalog.engine.compiles - compiles_before)
        added["missing"] = Missing(n=len(missing), allowed=cfg.allow_missing, first_ids=missing[:5])
        if gold_sql:
            added["column_rule"] = COLUMN_RULE
        summary = SummaryModel.of(summ.figures(), **added, records=writer.digest(), record_version=RECORD_VERSION)
        write_json_atomic(tmp / SUMMARY, summary.to_json())
        # The responses file as recorded: relative to the project, else its name; and its hash.
        shown = display_path(Path(cfg.responses))
        manifest = ManifestModel(**manifest_base("score", items.scored, rulesets, wh).given(),
                                 responses=shown if not shown.startswith("/") else Path(cfg.responses).name,
                                 responses_sha256=warehouse.fingerprint(Path(cfg.responses)), started=started,
                                 finished=time.time())
        if named:
            manifest.answer = answer
        if gold_sql:
            manifest.gold, manifest.column_rule = "sql", COLUMN_RULE
        if gold_sql or kind.writes_sql:  # where unqualified names in gold and model SQL resolved
            manifest.search_path = list(search_path)
        write_json_atomic(tmp / MANIFEST, manifest.to_json())
        publish(tmp, cfg.out)
    finally:
        gc.unfreeze()
        shutil.rmtree(tmp, ignore_errors=True)
    return summary


@contextlib.contextmanager
def recorded_scorer(manifest: Mapping[str, JsonValue], wh: Warehouse, rulesets: Sequence[RuleSet], gold_sql: bool
                    ) -> Iterator[Callable[..., ItemRecord]]:
    """The per-item scorer of a recorded run: its answer kind's (absent: the implicit kind), on the
    search path it recorded (else the layer's)."""
    recorded = manifest.get("search_path")
    path = resolve_search_path(wh.catalog.manifest, tuple(recorded) if isinstance(recorded, list) else None)
    answer = manifest.get("answer")
    with answer_kind(answer if isinstance(answer, str) and answer else None).scorer(wh, rulesets, gold_sql=gold_sql,
                                                                         search_path=path) as score:
        yield score


def rescore_run(run_dir: Path, guardrails: tuple[str, ...], evalset: str | None = None
                ) -> tuple[Figures, dict[str, bool], dict[str, bool]]:
    """Re-score a recorded run under other guardrails, without re-querying the model.

    Returns (summary, raw correctness by id, final correctness by id) — the by-id maps are
    what paired tests (McNemar) need.  Each item is scored again from its recorded raw text by
    :func:`recorded_scorer`; its request's timings and tokens are carried, and abstention is
    decided again from its recorded evidence under these guardrails.
    """
    run = RunDir(run_dir)
    manifest = run.manifest_json()
    recorded = manifest.get("db_schema")  # --db-schema of the run: the relations are read there again
    wh = open_warehouse(manifest_warehouse(manifest), dbt=DbtOptions(db_schema=recorded) if recorded else None)
    kind = answer_kind(manifest.get("answer"))
    name = evalset or manifest.get("evalset_path") or manifest["evalset"]
    gold_sql = is_gold_sql_set(name, wh.name)
    es = load_eval_set(name, kind.name, wh)
    cases = {c.id: c for c in es.cases}
    rulesets = load_guardrails(list(guardrails), wh.catalog, wh)
    summ = Summary(rulesets, fields=kind.fields(gold_sql))
    raw_ok: dict[str, bool] = {}
    final_ok: dict[str, bool] = {}
    with make_executor(wh) as ex, recorded_scorer(manifest, wh, rulesets, gold_sql) as score:
        for old in run.records():
            case = cases.get(old.id)
            if case is None:
                raise InputError(f"record id {old.id!r} is not in eval set {es.name}",
                                 path=str(run_dir / RECORDS), field="id")
            outcome = old.outcome
            rec = score(case, old.answer.raw_text, ex, wh.catalog,
                        finish_reason=old.answer.finish_reason,
                        request_error=None if outcome in (None, "ok") else outcome)
            rec.merge({key: old.get(key) for key in _REQUEST_KEYS})
            if decided(old):  # decided again from the recorded evidence, under these guardrails
                carry_evidence(old, rec)
                apply_abstention(rec)
            summ.add(rec)
            assert rec.judgement is not None  # every re-scored item has its gold
            raw_ok[rec.id] = bool(rec.judgement.correct_raw)
            final_ok[rec.id] = bool(rec.judgement.correct_final)
    return summ.figures(), raw_ok, final_ok
