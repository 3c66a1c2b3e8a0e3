"""Offline scoring of an answer kind's responses (``nlq2sql score --answer query|sql|…``) → run directory.

The same contract as v1 re-scoring (:func:`nlq2sql.stages.pipeline.score_responses`): every response
line checked as it is read, output written to a sibling temp directory and renamed into
place only at the end, so bad input leaves nothing behind; the summary is the one aggregator
(:class:`nlq2sql.stages.summary.Summary`) over the kind's fields (``answers.kinds``: the v2 parts, none
for SQL), with abstention precision and recall and the number of distinct MetricFlow compiles.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from nlq2sql.answers.kinds import KINDS, QueryKind
from nlq2sql.answers.sql.gold import COLUMN_RULE
from nlq2sql.errors import InputError
from nlq2sql.records.results import Manifest as ManifestModel
from nlq2sql.records.results import Summary as SummaryModel
from nlq2sql.records.store import MANIFEST, RECORD_VERSION, RECORDS, SUMMARY, BulkRecordWriter, write_json_atomic
from nlq2sql.records.summary_parts import Missing
from nlq2sql.semantic import open_warehouse, warehouse
from nlq2sql.stages.evalset import EvalCase, EvalSet
from nlq2sql.stages.goldsql import GoldSqlSet, is_gold_sql_set, load_gold_sql_set, resolve_search_path
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
from nlq2sql.stages.queryset import QuerySet
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.stages.summary import Summary

__all__ = ["score_query_responses", "scored_here"]


def scored_here(answer: str) -> bool:
    """Whether ``score --answer`` of this kind scores here on any set (its cases are not v1 eval-set
    cases), rather than by v1 re-scoring (:func:`nlq2sql.stages.pipeline.score_responses`) unless
    the set's golds are SQL."""
    return KINDS[answer].case_type is not EvalCase


def score_query_responses(cfg: ScoreConfig, answer: str = QueryKind.name) -> SummaryModel:
    """Score a responses file of v2 answers (``answer="query"``) or of SQL the model wrote
    (``answer="sql"`` or ``"sql-grammar"``: guarded, run in the sandbox, compared by result equivalence) into
    ``cfg.out``; returns the summary.  A gold-SQL set (:mod:`nlq2sql.stages.goldsql`) is scored here for
    every answer kind, ``intent`` included (:mod:`nlq2sql.answers.sql.gold`)."""
    kind = KINDS[answer]
    wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
    gold_sql = is_gold_sql_set(cfg.evalset, wh.name)
    if cfg.guardrails and not kind.takes_guardrails:
        raise InputError(f"guardrails act on intents and queries; --answer {answer} takes none (pass --guardrails "
                         "none)", field="--guardrails")
    wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
    rulesets = load_guardrails(list(cfg.guardrails), wh.catalog, wh)  # on a v2 query: stages.query_guard
    compiles_before = wh.catalog.engine.compiles  # golds' and answers' compiles: what this run needed
    qs: EvalSet | QuerySet | GoldSqlSet = (load_gold_sql_set(cfg.evalset, wh.name) if gold_sql
                                 else kind.load_cases(cfg.evalset, wh))
    search_path = resolve_search_path(wh.catalog.manifest, cfg.search_path)
    cases: tuple[Any, ...] = qs.cases
    ids = {c.id: i for i, c in enumerate(cases)}
    tmp = staging_dir(cfg)
    started = time.time()
    try:
        summ = Summary(rulesets, fields=kind.fields(gold_sql))
        answered = bytearray(len(ids))
        with make_executor(wh) as ex, BulkRecordWriter(tmp / RECORDS) as writer, \
                kind.scorer(wh, rulesets, gold_sql=gold_sql, search_path=search_path) as scorer:
            for resp in read_responses(cfg.responses, ids, answer, form=kind.form):
                pos = ids[resp.id]
                rec = scorer(cases[pos], resp.text, ex, wh.catalog, finish_reason=resp.finish_reason)
                writer.write(rec)
                summ.add(rec)
                answered[pos] = 1
            missing = [cid for cid, pos in ids.items() if not answered[pos]]
            refuse_missing(missing, len(ids), cfg)
            for cid in missing:
                rec = as_missing(scorer(cases[ids[cid]], None, ex, wh.catalog,
                                        request_error="no response in file"))
                writer.write(rec)
                summ.add(rec)
            executed = ex.executed
        summary = SummaryModel.of(
            summ.figures(), distinct_queries_executed=executed, answer=answer,
            compiles=wh.catalog.engine.compiles - compiles_before,
            missing=Missing(n=len(missing), allowed=cfg.allow_missing, first_ids=missing[:5]),
            **({"column_rule": COLUMN_RULE} if gold_sql else {}),
            records=writer.digest(), record_version=RECORD_VERSION)
        write_json_atomic(tmp / SUMMARY, summary.to_json_dict())
        from nlq2sql.semantic.catalog import display_path

        shown = display_path(Path(cfg.responses))
        manifest = ManifestModel(**manifest_base("score", qs, rulesets, wh).given(), answer=answer,
                                 responses=shown if not shown.startswith("/") else Path(cfg.responses).name,
                                 responses_sha256=warehouse.fingerprint(Path(cfg.responses)), started=started,
                                 finished=time.time())
        if gold_sql:
            manifest.gold, manifest.column_rule = "sql", COLUMN_RULE
        if gold_sql or kind.writes_sql:  # where unqualified names in gold and model SQL resolved
            manifest.search_path = list(search_path)
        write_json_atomic(tmp / MANIFEST, manifest.written())
        publish(tmp, cfg.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary
