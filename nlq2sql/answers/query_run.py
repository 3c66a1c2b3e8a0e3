"""Offline scoring of v2 answers (``nlq2sql score --answer query``): responses → run directory.

The same contract as v1 re-scoring (:func:`nlq2sql.stages.pipeline.score_responses`): every response
line checked as it is read, output written to a sibling temp directory and renamed into
place only at the end, so bad input leaves nothing behind; the summary is the one aggregator
(:class:`nlq2sql.stages.summary.Summary`) over the v2 parts, with abstention precision and recall and
the number of distinct MetricFlow compiles.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nlq2sql.answers.sql.gold import COLUMN_RULE
from nlq2sql.errors import InputError
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.results import Manifest as ManifestModel
from nlq2sql.records.results import Summary as SummaryModel
from nlq2sql.records.store import MANIFEST, RECORD_VERSION, RECORDS, SUMMARY, BulkRecordWriter, write_json_atomic
from nlq2sql.records.summary_parts import Missing
from nlq2sql.semantic import Warehouse, open_warehouse, warehouse
from nlq2sql.semantic.contract import PARTS
from nlq2sql.stages.goldsql import GoldSqlCase, GoldSqlSet, is_gold_sql_set, load_gold_sql_set, resolve_search_path
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
from nlq2sql.stages.query_score import ANSWER_KIND, query_record
from nlq2sql.stages.queryset import QueryCase, QuerySet, load_query_set
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.stages.summary import Summary

__all__ = ["score_query_responses"]


@contextlib.contextmanager
def _scorer(answer: str, wh: Warehouse, rulesets: list[RuleSet], *, gold_sql: bool = False,
            search_path: tuple[str, ...] = ("main",)) -> Iterator[Callable[..., ItemRecord]]:
    """The answer kind's scorer, building the record as its type; the SQL answer's shares one
    sandbox for the run.  ``gold_sql``: the set's golds are SQL (every kind scored against their
    rows, :mod:`nlq2sql.answers.sql.gold`; the golds and SQL answers run under ``search_path``)."""
    if gold_sql:
        from nlq2sql.answers.sql.gold import GoldRunner, gold_sql_record
        from nlq2sql.answers.sql.sandbox import Sandbox

        with Sandbox(wh.db_path, search_path=search_path) as box:
            golds = GoldRunner(box)

            def score(case: Any, text: str | None, ex: Any, catalog: Any, **kw: Any) -> ItemRecord:
                return gold_sql_record(case, text, answer=answer, executor=ex, catalog=catalog, golds=golds,
                                       rulesets=rulesets, **kw)

            yield score
        return
    if answer not in ("sql", "sql-grammar"):
        yield functools.partial(query_record, rulesets=rulesets)
        return
    from nlq2sql.answers.sql.sandbox import Sandbox
    from nlq2sql.answers.sql.score import sql_record

    with Sandbox(wh.db_path, search_path=search_path) as box:
        yield functools.partial(sql_record, sandbox=box, answer=answer)


def score_query_responses(cfg: ScoreConfig, answer: str = ANSWER_KIND) -> SummaryModel:
    """Score a responses file of v2 answers (``answer="query"``) or of SQL the model wrote
    (``answer="sql"`` or ``"sql-grammar"``: guarded, run in the sandbox, compared by result equivalence) into
    ``cfg.out``; returns the summary.  A gold-SQL set (:mod:`nlq2sql.stages.goldsql`) is scored here for
    every answer kind, ``intent`` included (:mod:`nlq2sql.answers.sql.gold`)."""
    wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
    gold_sql = is_gold_sql_set(cfg.evalset, wh.name)
    if cfg.guardrails and answer not in (ANSWER_KIND, *(("intent",) if gold_sql else ())):
        raise InputError(f"guardrails act on intents and queries; --answer {answer} takes none (pass --guardrails "
                         "none)", field="--guardrails")
    wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
    rulesets = load_guardrails(list(cfg.guardrails), wh.catalog, wh)  # on a v2 query: stages.query_guard
    compiles_before = wh.catalog.engine.compiles  # golds' and answers' compiles: what this run needed
    qs: QuerySet | GoldSqlSet = (load_gold_sql_set(cfg.evalset, wh.name) if gold_sql
                                 else load_query_set(cfg.evalset, wh.catalog))
    search_path = resolve_search_path(wh.catalog.manifest, cfg.search_path)
    cases: tuple[QueryCase | GoldSqlCase, ...] = qs.cases
    ids = {c.id: i for i, c in enumerate(cases)}
    tmp = staging_dir(cfg)
    started = time.time()
    try:
        summ = Summary(rulesets, fields=PARTS if answer == ANSWER_KIND and not gold_sql else ())
        answered = bytearray(len(ids))
        with make_executor(wh) as ex, BulkRecordWriter(tmp / RECORDS) as writer, \
                _scorer(answer, wh, rulesets, gold_sql=gold_sql, search_path=search_path) as scorer:
            for resp in read_responses(cfg.responses, ids, answer):
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
        write_json_atomic(tmp / SUMMARY, summary.to_json())
        from nlq2sql.semantic.catalog import display_path

        shown = display_path(Path(cfg.responses))
        manifest = ManifestModel(**manifest_base("score", qs, rulesets, wh).given(), answer=answer,
                                 responses=shown if not shown.startswith("/") else Path(cfg.responses).name,
                                 responses_sha256=warehouse.fingerprint(Path(cfg.responses)), started=started,
                                 finished=time.time())
        if gold_sql:
            manifest.gold, manifest.column_rule = "sql", COLUMN_RULE
        if gold_sql or answer != ANSWER_KIND:  # where unqualified names in gold and model SQL resolved
            manifest.search_path = list(search_path)
        write_json_atomic(tmp / MANIFEST, manifest.to_json())
        publish(tmp, cfg.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary
