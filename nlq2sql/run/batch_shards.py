"""A batch's output: record shards (Parquet or JSONL) and the summary streamed back from them.

Every batch engine writes and reads shards here, so no engine imports another. A record is an
``ItemRecord`` until written; in a shard it is its flat JSON line (``encode_record``), read back as a
JSON value (``iter_shard_records``): a JSON edge by choice, ``records.jsonl``'s lines byte for byte."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlq2sql.answers.kinds import KINDS
from nlq2sql.answers.unscored import Question
from nlq2sql.errors import Nlq2SqlError
from nlq2sql.records.batch_parts import BatchLoad, BatchRecords, BatchSummary, BatchTail, Shard
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.run_parts import ServerMetrics
from nlq2sql.records.store import encode_json
from nlq2sql.records.summary_parts import Compactness, Throughput
from nlq2sql.run.batch_out import SHARDS, BatchOut
from nlq2sql.stages.evalset import EvalCase
from nlq2sql.stages.goldsql import GOLD_SQL_KEY, GoldSqlCase
from nlq2sql.stages.queryset import QueryCase
from nlq2sql.stages.score import spread
from nlq2sql.stages.summary import Summary

if TYPE_CHECKING:
    from nlq2sql.stages.guardrail import RuleSet

__all__ = ["FORMATS", "BatchSession", "encode_record", "iter_shard_records", "parse_item", "summarise_shards",
           "write_shards"]

FORMATS = ("parquet", "jsonl")


@dataclass(frozen=True)
class BatchSession:
    """What an engine reports of the session it ran (the summary's throughput and server metrics)."""

    wall_s: float
    items_this_session: int
    server_metrics: ServerMetrics
    not_sent: int = 0


def parse_item(text: str, answer: str = "intent") -> EvalCase | QueryCase | GoldSqlCase | Question:
    """A row's item: a case of an eval set (gold SQL; else a v2 gold for the query and SQL answers, a
    v1 gold for the intent) or a question without gold."""
    obj = json.loads(text)
    if GOLD_SQL_KEY in obj:
        return GoldSqlCase.model_validate(obj)
    if "gold" not in obj:
        return Question(obj["id"], obj["question"])
    return KINDS[answer].case_type.model_validate(obj)


def encode_record(rec: ItemRecord) -> str:
    """A record's JSON text: the line ``RecordWriter`` writes, without its newline."""
    return encode_json(rec.to_json())  # type: ignore[no-any-return]


def write_shards(ds: Any, fmt: str, shard_rows: int, out: BatchOut) -> None:
    """``ds`` (rows ``id``, ``record``) as ``fmt`` shards of at most ``shard_rows`` rows, written by
    Ray Data's own write tasks into ``out`` (``--engine ray-vllm``; the HTTP engine writes whole
    shards itself, ``BatchOut.write_shard``)."""
    remote = {"num_cpus": 0.25}
    dest = out.path(SHARDS)
    if fmt == "parquet":
        ds.write_parquet(dest, filesystem=out.fs, min_rows_per_file=shard_rows, max_rows_per_file=shard_rows,
                         ray_remote_args=remote)
    else:
        ds.write_datasink(_jsonl_sink(dest, out.fs, shard_rows), ray_remote_args=remote)


def _jsonl_sink(path: str, fs: Any, rows: int) -> Any:
    """A Ray Data datasink writing the ``record`` column as lines: shards that are records files."""
    from ray.data.datasource import BlockBasedFileDatasink

    class JsonlRecords(BlockBasedFileDatasink):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(path, file_format="jsonl", min_rows_per_file=rows, filesystem=fs)

        def write_block_to_file(self, block: Any, file: Any) -> None:
            for text in block.to_arrow().column("record").to_pylist():
                file.write(text.encode() + b"\n")

    return JsonlRecords()


def iter_shard_records(out: Path | str) -> Iterator[dict[str, Any]]:
    """Every record of a batch's output directory (a path or URI), in shard order (either format),
    as the JSON line holds it (the edge: read through ``ItemRecord.from_json`` where typed)."""
    store = BatchOut.open(out)
    fmt = "parquet" if store.shards("parquet") else "jsonl"
    for name in store.shards(fmt):
        for text in store.shard_lines(name):
            yield json.loads(text)


def summarise_shards(out: BatchOut, fmt: str, rulesets: list[RuleSet], scored: bool, ids: list[str],
                     session: BatchSession, *, load: BatchLoad, retry_budget: Mapping[str, int | float] | None,
                     answer: str = "intent", column_rule: str | None = None) -> BatchSummary:
    """The usual summary, streamed from the shards (``session.finish_summary``'s figures), after
    checking that they hold each item exactly once.  ``load``: how the batch offered its items;
    ``retry_budget``: the manifest's (its keys as recorded; the retries the records took are added);
    ``column_rule``: a gold-SQL set's (its answers are judged by rows only)."""
    # As ``pipeline.summarise_file``: the kind's own fields; every answer to a gold-SQL set is judged by rows only.
    fields = KINDS[answer].fields(gold_sql=column_rule is not None)
    summ = Summary(rulesets, fields=fields, scored=scored)
    digest, seen, shards = hashlib.sha256(), Counter[str](), list[Shard]()
    outcomes: Counter[str] = Counter()
    replicas: Counter[str] = Counter()
    ws, chars, starts, ends, retries = [], [], [], [], 0
    for name in out.shards(fmt):
        n = 0
        for text in out.shard_lines(name):
            digest.update(text.encode() + b"\n")
            rec = ItemRecord.from_json(json.loads(text), f"{SHARDS}/{name}", line=n + 1)
            req = rec.request
            n += 1
            seen[rec.id] += 1
            summ.add(rec)
            outcomes[req.outcome or "n/a"] += 1
            if req.replica is not None:
                replicas[req.replica] += 1
            if req.whitespace_chars is not None:
                ws.append(float(req.whitespace_chars))
                chars.append(float(req.chars or 0))
            retries += rec.retries()
            if req.started and req.latency_s is not None:
                starts.append(req.started)
                ends.append(req.started + req.latency_s)
        shards.append(Shard(file=f"{SHARDS}/{name}", rows=n))
    missing = [i for i in ids if i not in seen]
    doubled = [i for i, k in seen.items() if k > 1]
    if missing or doubled or len(seen) != len(ids):
        raise Nlq2SqlError(f"the shards do not hold each item once: {len(missing)} missing (first: "
                           f"{missing[:3]}), {len(doubled)} twice (first: {doubled[:3]})")
    wall, n_items = session.wall_s, session.items_this_session
    tail = BatchTail(
        scored=scored, outcomes=dict(outcomes), errors_by_class={k: v for k, v in outcomes.items() if k != "ok"},
        compactness=Compactness(n=len(ws), outputs_without_whitespace=sum(1 for w in ws if w == 0),
                                whitespace_chars=spread(ws), chars=spread(chars)),
        throughput=Throughput(items_this_session=n_items, wall_s=wall, req_per_s=n_items / wall if wall else None,
                              span_s_all_records=(max(ends) - min(starts)) if starts else None,
                              completed_ok=outcomes.get("ok", 0), not_sent=session.not_sent),
        load=load, server_metrics=session.server_metrics, retries_used=retries,
        retry_budget=dict(retry_budget or {}, used=retries),
        records=BatchRecords(count=sum(seen.values()), sha256=digest.hexdigest(), format=fmt, shards=shards))
    if not KINDS[answer].implicit:  # set only when so: a key never set stays absent
        tail.answer = answer
    if column_rule is not None:
        tail.column_rule = column_rule
    if replicas:
        tail.replicas_answered = dict(sorted(replicas.items()))
    return BatchSummary(figures=summ.result(), tail=tail)
