"""Chains the stages: evalset → (client) → intent → guardrail → sqlbuild → execute → score.

This is the only module that knows the order of the stages.  Offline re-scoring reads a
responses file; live runs (``nlq2sql.live``) feed the same ``score_item`` from the client.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__, warehouse
from .errors import InputError
from .evalset import EvalSet, load_evalset
from .execute import Executor
from .guardrail import RuleSet, load_guardrails
from .records import MANIFEST, RECORDS, SUMMARY, RecordWriter, iter_records, prepare_dir, write_json_atomic
from .score import Summary, score_item


@dataclass(frozen=True)
class ScoreConfig:
    evalset: str
    responses: Path
    out: Path
    guardrails: tuple[str, ...] = ("ranking",)
    warehouse: Path | None = None
    force: bool = False


@dataclass
class Response:
    id: str
    text: str | None
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def read_responses(path: Path, known_ids: set[str]) -> Iterator[Response]:
    """Stream ``{"id", "text"}`` lines, naming file, line and field on any problem."""
    seen: set[str] = set()
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read responses: {exc.strerror}", path=str(path)) from None
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                raise InputError("empty line", path=str(path), line=lineno)
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"malformed JSON ({exc.msg})", path=str(path), line=lineno) from None
            if not isinstance(obj, dict):
                raise InputError("each line must be a JSON object", path=str(path), line=lineno)
            rid = obj.get("id")
            if not isinstance(rid, str) or not rid:
                raise InputError("missing or non-string id", path=str(path), line=lineno, field="id")
            if rid not in known_ids:
                raise InputError(f"unknown id {rid!r} (not in the eval set)", path=str(path),
                                 line=lineno, field="id")
            if rid in seen:
                raise InputError(f"duplicate id {rid!r}", path=str(path), line=lineno, field="id")
            seen.add(rid)
            text = obj.get("text")
            if text is not None and not isinstance(text, str):
                raise InputError("text must be a string or null", path=str(path), line=lineno,
                                 field="text")
            finish = obj.get("finish_reason")
            yield Response(rid, text, finish if isinstance(finish, str) else None)


def make_executor(path: Path | None) -> Executor:
    return Executor(warehouse.ensure(path))


def summarise_file(records_path: Path, rulesets: list[RuleSet]) -> dict[str, Any]:
    """Re-derive the summary from a records file (reports never trust a cached summary)."""
    summ = Summary(rulesets)
    for rec in iter_records(records_path):
        summ.add(rec)
    return summ.result()


def score_responses(cfg: ScoreConfig) -> dict[str, Any]:
    """Offline re-scoring of a responses file into a run directory.

    Input is validated in a first streaming pass, and output is written to a sibling
    temp directory renamed into place at the end, so bad input leaves no artifact.
    """
    evalset = load_evalset(cfg.evalset)
    rulesets = load_guardrails(list(cfg.guardrails))
    cases = evalset.by_id()
    for _ in read_responses(cfg.responses, set(cases)):
        pass
    if cfg.out.exists() and not cfg.force and (not cfg.out.is_dir() or any(cfg.out.iterdir())):
        prepare_dir(cfg.out, resume=False, force=False)  # raises the standard message
    tmp = cfg.out.with_name(f".{cfg.out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    started = time.time()
    # The eval set lives for the whole run: freezing it keeps the cyclic garbage collector
    # from re-walking every case on each collection (a large share of the time at 100k items).
    gc.freeze()
    try:
        summ = Summary(rulesets)
        answered: set[str] = set()
        with make_executor(cfg.warehouse) as ex, RecordWriter(tmp / RECORDS, flush_each=False) as writer:
            for resp in read_responses(cfg.responses, set(cases)):
                rec = score_item(cases[resp.id], resp.text, rulesets, ex,
                                 finish_reason=resp.finish_reason)
                writer.write(rec)
                summ.add(rec)
                answered.add(resp.id)
            for cid, case in cases.items():
                if cid not in answered:
                    rec = score_item(case, None, rulesets, ex, request_error="no response in file")
                    writer.write(rec)
                    summ.add(rec)
            executed = ex.executed
        summary = summ.result()
        summary["distinct_queries_executed"] = executed
        write_json_atomic(tmp / SUMMARY, summary)
        write_json_atomic(tmp / MANIFEST, manifest_base("score", evalset, rulesets) | {
            "responses": str(cfg.responses), "started": started, "finished": time.time()})
        if cfg.out.exists():
            shutil.rmtree(cfg.out)
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, cfg.out)
    finally:
        gc.unfreeze()
        shutil.rmtree(tmp, ignore_errors=True)
    return summary


def manifest_base(kind: str, evalset: EvalSet, rulesets: list[RuleSet]) -> dict[str, Any]:
    from .env_info import git_info

    return {"record_version": 1, "kind": kind, "harness_version": __version__, **git_info(),
            "evalset": evalset.name, "evalset_path": evalset.path,
            "evalset_sha256": evalset.sha256, "n_items": len(evalset.cases),
            "guardrails": [rs.name for rs in rulesets]}


def rescore_run(run_dir: Path, guardrails: tuple[str, ...], evalset: str | None = None
                ) -> tuple[dict[str, Any], dict[str, bool], dict[str, bool]]:
    """Re-score a recorded run under other guardrails, without re-querying the model.

    Returns (summary, raw correctness by id, final correctness by id) — the by-id maps are
    what paired tests (McNemar) need.
    """
    from .records import read_json

    manifest = read_json(run_dir / MANIFEST)
    es = load_evalset(evalset or manifest.get("evalset_path") or manifest["evalset"])
    cases = es.by_id()
    rulesets = load_guardrails(list(guardrails))
    summ = Summary(rulesets)
    raw_ok: dict[str, bool] = {}
    final_ok: dict[str, bool] = {}
    with make_executor(None) as ex:
        for old in iter_records(run_dir / RECORDS):
            case = cases.get(old["id"])
            if case is None:
                raise InputError(f"record id {old['id']!r} is not in eval set {es.name}",
                                 path=str(run_dir / RECORDS), field="id")
            outcome = old.get("outcome", "ok")
            rec = score_item(case, old.get("raw_text"), rulesets, ex,
                             finish_reason=old.get("finish_reason"),
                             request_error=None if outcome in (None, "ok") else outcome)
            for key in ("latency_s", "ttft_s", "completion_tokens", "prompt_tokens", "itl_mean_s"):
                rec[key] = old.get(key)
            summ.add(rec)
            raw_ok[rec["id"]] = rec["correct_raw"]
            final_ok[rec["id"]] = rec["correct_final"]
    return summ.result(), raw_ok, final_ok
