"""Offline batch at scale: an eval set or a question file through Ray Data (or this process), records as shards.

A batch of 10⁵–10⁶ questions is a data job: actors answer items and Ray Data's write tasks store the
records as shards under ``out/records/``, none funnelled through the driver (``eval`` has one writer).
Each actor answers with one ``item.ItemRunner``, so a record is ``eval``'s ``ItemRecord``; eval set,
preflight and the single retry budget are ``eval``'s too; ``--engine local`` is the same job in-process.
Shard *k* holds the input's *k*-th run of ``shard_rows`` items, in item order: a fixed cut, so
``--resume`` keeps finished shards and ends equal to an uninterrupted run. A record is stored as its
exact ``records.jsonl`` line (Arrow cannot type its mixed values): JSONL shards are those lines,
Parquet shards have columns ``id`` and ``record``; ``summary.records.sha256`` hashes the lines in
shard order, so it is the same for both formats."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nlq2sql.answers.kinds import load_eval_set
from nlq2sql.answers.unscored import Question, read_questions
from nlq2sql.errors import InputError, Nlq2SqlError, RecordError
from nlq2sql.records.batch_parts import BatchLoad, BatchSummary, Resumed
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.run_parts import ServerMetrics
from nlq2sql.records.store import MANIFEST, SUMMARY
from nlq2sql.run.batch_config import BatchConfig, check, item_config
from nlq2sql.run.batch_manifest import build_manifest, resumed_manifest
from nlq2sql.run.batch_out import SHARDS, BatchOut
from nlq2sql.run.batch_shards import BatchSession, encode_record, parse_item, summarise_shards
from nlq2sql.run.batch_vllm import answer_with_vllm
from nlq2sql.run.config import EvalConfig, preflight, targets, validate
from nlq2sql.run.item import ItemRunner, Loaded, load_conditions
from nlq2sql.run.ray_engine import BudgetCounter, RayEngine, start_local_ray
from nlq2sql.run.sql_grammar import grammar_for, probe_grammar
from nlq2sql.run.worker import SharedBudget
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.goldsql import GoldSqlSet
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.stages.sets import AnySet, Case
from nlq2sql.transport.client import RetryBudget

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from nlq2sql.semantic.binding import Warehouse

__all__ = ["answer_shard", "item_text", "load_items", "run_batch"]

#: An item a batch answers: a case of an eval set (of any kind), or a question without gold.
Item = Case | Question
_T = TypeVar("_T")


def load_items(cfg: BatchConfig, wh: Warehouse) -> tuple[list[Item], AnySet | None, str]:
    """The items (first ``limit``), the eval set (None for a question file) and the input's SHA-256.
    An eval set is loaded as ``eval`` loads it (``answers.kinds.load_eval_set``: v1, v2 or gold-SQL)."""
    limit = cfg.base.limit
    if cfg.questions:
        qs = list(read_questions(Path(cfg.input)))
        sha = hashlib.sha256(Path(cfg.input).read_bytes()).hexdigest()
        return list(qs[:limit] if limit else qs), None, sha
    es = load_eval_set(cfg.input, cfg.base.answer, wh)
    cases: Sequence[Case] = es.cases
    return list(cases[:limit] if limit else cases), es, es.sha256


def run_batch(cfg: BatchConfig) -> BatchSummary:
    """Answer every item (in this process, or with Ray Data), write the shards, ``summary.json`` and
    ``manifest.json``.

    With ``resume``, a batch interrupted at any point continues: its finished shards are kept
    (each checked to hold its items), the others are answered; the result equals an
    uninterrupted run's.  Nothing there yet: a fresh start."""
    check(cfg)
    store = BatchOut.open(cfg.out)
    wcfg = item_config(cfg)
    validate(wcfg)
    # Local input first (cheap, and what a typo most often is), then the endpoints.
    wh = open_warehouse(wcfg.semantic_model, wcfg.warehouse, dbt=wcfg.dbt)
    rulesets = load_guardrails(wcfg.conditions.guardrails(wcfg.guardrails), wh.catalog, wh)
    prompt = load_prompt(wcfg.prompt, wcfg.style, wh)
    items, evalset, sha = load_items(cfg, wh)
    gold_sql = isinstance(evalset, GoldSqlSet)
    if gold_sql and cfg.engine == "ray-vllm":
        raise InputError("--engine ray-vllm scores v1 gold intents: a gold-SQL set needs --engine local or ray",
                         field="--evalset")
    conditions = load_conditions(wcfg, wh)  # the driver's copies: the manifest, the overlap check, a local run
    for cond in conditions:
        if evalset is not None:
            cond.check_against(evalset)
    key = preflight(wcfg) if cfg.engine != "ray-vllm" else ""  # the API key, every endpoint probed
    state = _out_state(cfg, store)
    grammar = grammar_for(wcfg.answer, wh)
    if grammar is not None and state != "complete":  # a grammar the server refuses: one error, no request
        for url, mdl, k in targets(wcfg, wcfg.endpoint or "", wcfg.model, key):
            probe_grammar(url, mdl, k, grammar, timeout_s=wcfg.timeout_s)
    if state == "complete":
        return BatchSummary.from_json_dict(store.read_json(SUMMARY))
    total = RetryBudget.allowed(len(items), wcfg.retry_budget)
    manifest = build_manifest(cfg, wcfg, evalset, rulesets, wh, sha, len(items), prompt, conditions, key, total,
                              grammar.text if grammar is not None else None)
    resuming = state == "run"
    if resuming:
        manifest = resumed_manifest(store.read_json(MANIFEST), manifest, str(cfg.out))
    ray: Any = None
    started_ray = False
    if cfg.engine != "local":
        ray, started_ray = _start_ray(cfg)
    plan = [items[i:i + cfg.shard_rows] for i in range(0, len(items), cfg.shard_rows)]
    ok = False
    try:
        if resuming:
            store.sweep_temps()
            done, used = _finished(store, cfg.format, plan)
        else:
            if cfg.force:
                store.clear()
            store.make(manifest.to_json())
            done, used = set(), 0
        if cfg.engine == "local":
            loaded = Loaded(wh, rulesets, prompt, conditions)
            session = asyncio.run(_answer_locally(cfg, wcfg, key, plan, done, store, total, used, loaded))
        else:
            with _quiet_data(ray):
                if cfg.engine == "ray":
                    session = _answer_over_http(ray, cfg, wcfg, key, plan, done, store, total, used)
                else:
                    rows = [{"id": c.id, "item": item_text(c)} for c in items]
                    session = answer_with_vllm(ray, cfg, wcfg, rows, store, manifest)
        mode = "batch (this process)" if cfg.engine == "local" else "batch (Ray Data)"
        summary = summarise_shards(store, cfg.format, rulesets, evalset is not None, [c.id for c in items], session,
                                   load=BatchLoad(mode=mode, engine=manifest.engine, actors=manifest.actors,
                                                  concurrency_per_actor=manifest.concurrency_per_actor),
                                   retry_budget=manifest.retry_budget.to_json(), answer=manifest.answer or "intent",
                                   column_rule=manifest.column_rule)
        summary.tail.resumed = Resumed(sessions=1 + len(manifest.sessions or ()), shards_kept=len(done))
        manifest.finished = time.time()
        store.write_json(MANIFEST, manifest.to_json())
        store.write_json(SUMMARY, summary.to_json())  # last: a summary says the batch is complete
        ok = True
    finally:
        if not ok and cfg.engine == "ray-vllm" and not resuming:
            with contextlib.suppress(OSError):
                store.remove()  # Ray Data's own shards cannot be resumed: all or nothing
        if started_ray:
            ray.shutdown()
    return summary


def item_text(case: Item) -> str:
    """An item as the actors get it (``batch_shards.parse_item`` reads it back)."""
    if isinstance(case, Question):
        return json.dumps({"id": case.id, "question": case.question})
    return case.model_dump_json()


async def answer_shard(items: ItemRunner, cases: Sequence[Item], concurrency: int) -> list[ItemRecord]:
    """A shard's records, in item order, each made by ``items`` (``eval``'s item runner), with
    ``concurrency`` in flight; the shard's gold answers are run first (as ``eval`` does before its clock)."""
    items.prepare([c for c in cases if not isinstance(c, Question)])
    gate = asyncio.Semaphore(concurrency)

    async def one(case: Item) -> ItemRecord:
        async with gate:
            return await items.record(case)

    return list(await asyncio.gather(*(one(c) for c in cases)))


def _out_state(cfg: BatchConfig, store: BatchOut) -> str:
    """What is at ``--out``, checked against ``--resume`` / ``--force`` before anything is started."""
    state = store.state()
    if state == "file":
        raise InputError("output path exists and is not a directory", path=str(cfg.out))
    if cfg.resume:
        if state == "other":
            raise RecordError("cannot resume: not a batch directory (no manifest.json), and it is not empty",
                              path=str(cfg.out))
        return state if state in ("run", "complete") else "fresh"
    if state in ("absent", "empty") or cfg.force:
        return "fresh"
    raise RecordError("output directory exists; pass --resume to continue it or --force to replace it",
                      path=str(cfg.out))


def _finished(store: BatchOut, fmt: str, plan: list[list[Item]]) -> tuple[set[int], int]:
    """The shards a killed run finished (each must hold exactly its items), and the retries they used."""
    done, used = set(), 0
    for name in store.shards(fmt):
        k = store.shard_index(name)
        ids = []
        for line, text in enumerate(store.shard_lines(name), start=1):
            rec = ItemRecord.from_json(json.loads(text), f"{store.uri}/{SHARDS}/{name}", line=line)
            ids.append(rec.id)
            used += rec.retries()
        if k is None or k >= len(plan) or ids != [c.id for c in plan[k]]:
            raise RecordError("cannot resume: this shard does not hold the items the batch puts there "
                              "(another input or --shard-rows?)", path=f"{store.uri}/{SHARDS}/{name}")
        done.add(k)
    return done, used


def _start_ray(cfg: BatchConfig) -> tuple[Any, bool]:
    """Ray (joined or started as ``eval --engine ray`` does); True when this call started it."""
    try:
        import pyarrow  # noqa: F401
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise InputError(f"Ray Data is not installed ({exc.name} is missing): pip install 'nlq2sql[ray]'",
                         field="--engine") from None
    started = not ray.is_initialized()
    if started and cfg.engine == "ray-vllm" and cfg.ray_address is None:
        start_local_ray()
    else:
        RayEngine(cfg.ray_address)
    return ray, started


@contextlib.contextmanager
def _quiet_data(ray: Any) -> Iterator[None]:
    """Ray Data in order (deterministic shards), without progress bars or per-run INFO lines."""
    ctx = ray.data.DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars, ctx.print_on_execution_start)
    log = logging.getLogger("ray.data")
    level = log.level
    ctx.execution_options.preserve_order, ctx.enable_progress_bars, ctx.print_on_execution_start = True, False, False
    log.setLevel(logging.WARNING)
    try:
        yield
    except Exception as exc:
        if isinstance(exc, Nlq2SqlError):
            raise
        first = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise Nlq2SqlError(f"the Ray Data job failed: {type(exc).__name__}: {first}") from exc
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars, ctx.print_on_execution_start = saved
        log.setLevel(level)


async def _answer_locally(cfg: BatchConfig, wcfg: EvalConfig, key: str, plan: list[list[Item]], done: set[int],
                          store: BatchOut, total: int, used: int, loaded: Loaded) -> BatchSession:
    """``--engine local``: this process answers the shards still to do, one after another, with one
    ``ItemRunner`` (the driver's warehouse, guardrails, prompt and conditions), and writes each whole."""
    budget = RetryBudget(0, 0.0, used=used, total=total)
    assert wcfg.endpoint is not None  # check(): --engine local needs an endpoint
    items = ItemRunner(wcfg, wcfg.endpoint, wcfg.model, key, budget, concurrency=cfg.concurrency, loaded=loaded)
    t0 = time.time()
    items.start()
    n = 0
    try:
        for k, cases in enumerate(plan):
            if k in done:
                continue
            recs = await answer_shard(items, cases, cfg.concurrency)
            store.write_shard(k, cfg.format, [r.id for r in recs], [encode_record(r) for r in recs])
            n += len(cases)
    finally:
        await items.close()
    return BatchSession(wall_s=time.time() - t0, items_this_session=n, server_metrics=items.server_metrics())


def _answer_over_http(ray: Any, cfg: BatchConfig, wcfg: EvalConfig, key: str, plan: list[list[Item]],
                      done: set[int], store: BatchOut, total: int, used: int) -> BatchSession:
    """Each row of the Ray dataset is one shard still to do: an actor answers its items and
    writes it whole (``BatchOut.write_shard``), so a kill at any point loses at most the shards
    in flight, and none is ever half there."""
    from ray.data import ActorPoolStrategy

    rows = [{"shard": k, "items": json.dumps([item_text(c) for c in cases])}
            for k, cases in enumerate(plan) if k not in done]
    budget = SharedBudget(ray.remote(num_cpus=0)(BudgetCounter).remote(used, total), total)
    t0 = time.time()
    if rows:
        ds = ray.data.from_items(rows).map_batches(
            _Answerer, fn_constructor_args=(wcfg, (wcfg.endpoint, wcfg.model, key), budget, store.uri, cfg.format),
            batch_size=1, batch_format="pyarrow", compute=ActorPoolStrategy(size=min(cfg.actors, len(rows))),
            num_cpus=0.5)
        for _ in ds.iter_batches(batch_size=None):
            pass  # the shards are written by the actors; this drives the job
    n = sum(len(cases) for k, cases in enumerate(plan) if k not in done)
    return BatchSession(wall_s=time.time() - t0, items_this_session=n,
                        server_metrics=ServerMetrics(observed=False, note="not sampled by a batch"))


class _Answerer:
    """One per Ray Data actor: an ``ItemRunner`` on an event loop of its own (a thread), so its
    connections live across batches; each batch is answered with ``concurrency`` in flight."""

    def __init__(self, cfg: EvalConfig, endpoint: tuple[str, str, str], budget: RetryBudget, out: str,
                 fmt: str) -> None:
        self.cfg, self.store, self.fmt = cfg, BatchOut.open(out), fmt
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.items: ItemRunner = self._call(self._start(endpoint, budget))

    def _call(self, coro: Coroutine[object, None, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def _start(self, endpoint: tuple[str, str, str], budget: RetryBudget) -> ItemRunner:
        items = ItemRunner(self.cfg, *endpoint, budget, concurrency=self.cfg.concurrency, sample_metrics=False)
        items.start()
        return items

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        written = []
        for k, items in zip(batch.column("shard").to_pylist(), batch.column("items").to_pylist(), strict=True):
            cases = [parse_item(text, self.cfg.answer) for text in json.loads(items)]
            recs: list[ItemRecord] = self._call(answer_shard(self.items, cases, self.cfg.concurrency))
            written.append(self.store.write_shard(k, self.fmt, [r.id for r in recs],
                                                  [encode_record(r) for r in recs]))
        return pa.table({"shard": written})

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.items.close(), self.loop).result(timeout=5)
