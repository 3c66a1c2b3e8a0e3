"""The summaries snapshotted per case (``tests/snapshots/test_summary_golden/``): every run committed
at ``COMMIT`` summarised as scored and as unscored items, through each way the code summarises
records.

Each case is the summary's JSON text as ``records.store.write_json_atomic`` writes it; the test
compares it as parsed.  The records are read as they were at ``COMMIT`` (``git cat-file``), so a
report re-run or added later does not move the snapshots.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nlq2sql.records.batch_parts import BatchLoad
from nlq2sql.records.item import ItemRecord, iter_item_records
from nlq2sql.records.run_parts import ServerMetrics
from nlq2sql.run.batch_out import BatchOut
from nlq2sql.run.batch_shards import BatchSession, summarise_shards
from nlq2sql.semantic.contract import PARTS
from nlq2sql.stages.guardrail import Rule, RuleSet
from nlq2sql.stages.summary import Summary

__all__ = ["COMMIT", "ROOT", "SHARD_RUNS", "at_commit", "cases", "committed_runs", "rulesets_for", "runs_at", "text"]

ROOT = Path(__file__).resolve().parents[1]
#: The commit whose runs the snapshots summarise.
COMMIT = "b3049e0a7dedfc5c02fc94dfcb3a4c5d8f09305f"
#: Runs whose shard summaries are pinned too (small: the viewer's fixtures).
SHARD_RUNS = ("tests/fixtures/view-runs/heldout-smollm2-135m",
              "tests/fixtures/view-runs/qwen2.5-coder-0.5b/matrix-adversarial/adversarial-baseline")
SESSION = BatchSession(wall_s=2.0, items_this_session=3, server_metrics=ServerMetrics(observed=False))
#: What a batch's manifest gives the shard summary: its load shape and retry budget.
LOAD = BatchLoad(mode="batch (Ray Data)", engine="ray-data", actors=2, concurrency_per_actor=4)
RETRY_BUDGET = {"max": 5}


def text(data: Any) -> str:
    """As ``write_json_atomic`` writes it."""
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


def committed_runs() -> list[str]:
    """Every committed records file, relative to the repository."""
    out = subprocess.run(["git", "ls-files", "*records.jsonl"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return sorted(out)


def runs_at(commit: str) -> list[str]:
    """Every records file committed at ``commit``, relative to the repository."""
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    return sorted(f for f in out if f.endswith("records.jsonl"))


def rulesets_for(recs: list[ItemRecord]) -> list[RuleSet]:
    """Rules named by the records (fired or in scope), and one that never fires."""
    ids: set[str] = set()
    for rec in recs:
        ids.update(iv["rule"] for iv in rec.answer.interventions or [])
        if rec.judgement is not None:
            ids.update(rec.judgement.guardrail_scope or [])
    rules = tuple(Rule(id=rid, field="intent", from_values=(), to=None) for rid in [*sorted(ids), "never-fired"])
    return [RuleSet(name="golden", rules=rules)]


def _fields(answer: str | None) -> tuple[str, ...] | None:
    """As ``pipeline.summarise_file``: the v2 query's parts, none for SQL, else the default."""
    return PARTS if answer == "query" else () if answer in ("sql", "sql-grammar") else None


def scored_summary(recs: list[ItemRecord], rulesets: list[RuleSet], answer: str | None) -> dict[str, Any]:
    fields = _fields(answer)
    summ = Summary(rulesets) if fields is None else Summary(rulesets, fields=fields)
    for rec in recs:
        summ.add(rec)
    return summ.result().to_json()


def shared_summary(flat: list[ItemRecord], rulesets: list[RuleSet], answer: str | None) -> dict[str, Any]:
    """Re-scoring's way: the same objects passed twice (``add_shared``)."""
    fields = _fields(answer)
    summ = Summary(rulesets) if fields is None else Summary(rulesets, fields=fields)
    for rec in flat + flat:
        summ.add_shared(rec)
    return summ.result().to_json()


def unscored_summary(recs: list[ItemRecord], rulesets: list[RuleSet]) -> dict[str, Any]:
    summ = Summary(rulesets, scored=False)
    for rec in recs:
        summ.add(rec)
    return summ.result().to_json()


def shard_summary(tmp: Path, lines: list[str], rulesets: list[RuleSet], scored: bool, answer: str | None
                  ) -> dict[str, Any]:
    """``batch``'s summary of its shards (two shards of the lines)."""
    store = BatchOut.open(tmp)
    store.make({"kind": "batch"})
    half = max(1, len(lines) // 2)
    for index, chunk in enumerate((lines[:half], lines[half:])):
        if chunk:
            store.write_shard(index, "jsonl", [json.loads(t)["id"] for t in chunk], chunk)
    ids = [json.loads(t)["id"] for t in lines]
    return summarise_shards(store, "jsonl", rulesets, scored, ids, SESSION, load=LOAD, retry_budget=RETRY_BUDGET,
                            answer=answer or "intent").to_json()


def at_commit(commit: str, paths: list[str], tmp: Path) -> dict[str, Path]:
    """Each committed file as it was at ``commit`` (a report re-run later does not move the golden),
    copied under ``tmp``: one ``git cat-file --batch``."""
    out = subprocess.run(["git", "cat-file", "--batch"], cwd=ROOT, capture_output=True, check=True,
                         input="".join(f"{commit}:{p}\n" for p in paths).encode()).stdout
    files, pos = {}, 0
    for rel in paths:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        assert len(header) == 3 and header[1] == b"blob", f"{commit}:{rel}: {header!r}"
        size = int(header[2])
        dest = tmp / "at" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(out[header_end + 1:header_end + 1 + size])
        files[rel] = dest
        pos = header_end + 1 + size + 1
    return files


def cases(tmp: Path, runs: list[str] | None = None, commit: str | None = None) -> Iterator[tuple[str, str]]:
    """(name, summary JSON text) for each run (default: every committed one) and every way of
    summarising it; ``commit``: the records as they were at that commit (default: the working tree)."""
    rels = committed_runs() if runs is None else runs
    paths = {rel: ROOT / rel for rel in rels} if commit is None else at_commit(commit, rels, tmp)
    for rel in rels:
        recs = list(iter_item_records(paths[rel]))
        if not recs:
            continue
        answer = recs[0].answer.answer
        rulesets = rulesets_for(recs)
        bare = [rec.model_copy(update={"judgement": None}) for rec in recs]  # the same answers, no gold
        yield f"{rel}:scored", text(scored_summary(recs, rulesets, answer))
        yield f"{rel}:shared", text(shared_summary(recs, rulesets, answer))
        yield f"{rel}:unscored", text(unscored_summary(recs, rulesets))
        yield f"{rel}:unscored-bare", text(unscored_summary(bare, rulesets))
        yield f"{rel}:scored-bare", text(scored_summary(bare, rulesets, answer))
        run = rel.rsplit("/", 1)[0]
        if run in SHARD_RUNS:
            for scored, these in ((True, recs), (False, bare)):
                lines = [r.to_line().rstrip("\n") for r in these]
                out = tmp / f"{run.replace('/', '_')}-{scored}"
                yield f"{rel}:shards-{'scored' if scored else 'unscored'}", text(
                    shard_summary(out, lines, rulesets, scored, answer))
