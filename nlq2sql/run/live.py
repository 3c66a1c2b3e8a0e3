"""Live evaluation: evalset × endpoint → records, at a fixed concurrency.

Records are appended to ``records.jsonl`` as items complete; ``resume`` finishes an interrupted run
with every item exactly once. Without an endpoint a local vLLM is started, and always stopped."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlq2sql.answers.kinds import KINDS, bind_sampling, load_eval_set
from nlq2sql.answers.sql.gold import COLUMN_RULE
from nlq2sql.conditions.registry import REGISTRY, Messages
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.manifest_parts import (
    ContextPart,
    EnginePart,
    LoadPart,
    ReplicaPart,
    RetryBudgetPart,
    ServerFacts,
    StructuredOutputs,
)
from nlq2sql.records.results import Summary
from nlq2sql.records.store import (
    MANIFEST,
    RECORDS,
    RESUME_KEYS,
    RecordWriter,
    check_resume,
    prepare_dir,
    read_json,
    repair_tail,
    write_json_atomic,
)
from nlq2sql.run.canary import require_constraints, run_modes
from nlq2sql.run.config import (
    EvalConfig,
    api_key,
    check_local_out,
    probe_endpoint,
    targets,
    validate,
)
from nlq2sql.run.context import check_against, item_messages, prompt_sizes, size_local
from nlq2sql.run.endpoint_facts import EndpointFacts
from nlq2sql.run.item import ItemRunner, Loaded, load_conditions, request_sampling
from nlq2sql.run.scheduler import closed_loop, open_loop
from nlq2sql.run.server import LocalServer, ServerConfig, free_port
from nlq2sql.run.serving import endpoint_structured_outputs
from nlq2sql.run.session import Session, finish_summary, recorded_retries, session_result
from nlq2sql.run.spec import RunSpec
from nlq2sql.run.sql_grammar import grammar_for, probe_grammar
from nlq2sql.run.workers import run_workers
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.evalset import EvalCase
from nlq2sql.stages.goldsql import GoldSqlSet, resolve_search_path
from nlq2sql.stages.origin import manifest_base
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.transport.client import RetryBudget

if TYPE_CHECKING:
    from types import FrameType

    from nlq2sql.run.server import LocalServer
    from nlq2sql.run.workers import Progress
    from nlq2sql.semantic.binding import Warehouse

# The configuration and its checks live in ``run.config``, the session's figures in ``run.session``.
__all__ = ["Interrupts", "bound_endpoint", "endpoint_context", "local_context", "recorded_args",
           "run_eval", "sized_for_run"]


class Interrupts:
    """Ctrl-C semantics of a run (installed only in the main thread).

    First SIGINT: inside the request loop, cancel it (in-flight requests are cancelled, so
    their connections close and the server aborts them; finished records are already on
    disk); anywhere else, raise ``KeyboardInterrupt`` as usual.  The run then stops a local
    server it started and the CLI exits 130.  Second SIGINT: exit 130 at once, killing a
    local server we started rather than waiting for it to stop.
    """

    def __init__(self) -> None:
        self.count = 0
        self.cancel: Callable[[], None] | None = None
        self.kill_server: Callable[[], None] | None = None
        self._previous: signal._HANDLER = None
        self._installed = False

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1:
            if self.cancel is not None:
                self.cancel()
                return
            raise KeyboardInterrupt
        if self.kill_server is not None:
            with contextlib.suppress(Exception):  # exiting anyway
                self.kill_server()
        os.write(2, b"\ninterrupted again: exiting now (records so far are kept)\n")
        os._exit(130)


async def _run(cfg: EvalConfig, base_url: str, model: str, key: str, out: Path,
               cases: list[EvalCase], progress: Progress | None,
               interrupts: Interrupts | None = None, budget: RetryBudget | None = None,
               loaded: Loaded | None = None) -> Session:
    if interrupts is not None:
        loop, main = asyncio.get_running_loop(), asyncio.current_task()
        assert main is not None

        def cancel() -> None:
            loop.call_soon_threadsafe(main.cancel)

        interrupts.cancel = cancel
    try:
        return await _run_items(cfg, base_url, model, key, out, cases, progress, budget, loaded)
    finally:
        if interrupts is not None:
            interrupts.cancel = None


async def _run_items(cfg: EvalConfig, base_url: str, model: str, key: str, out: Path,
                     cases: list[EvalCase], progress: Progress | None,
                     budget: RetryBudget | None = None, loaded: Loaded | None = None) -> Session:
    """This process answers the items (``--workers``/``--engine ray``: see ``workers``)."""
    if budget is None:  # a run of exactly these items (``_run_eval`` passes the whole run's)
        budget = RetryBudget(len(cases), cfg.retry_budget)
    counts: Counter[str] = Counter(total=len(cases))
    items = ItemRunner(cfg, base_url, model, key, budget, loaded=loaded)
    items.prepare(cases)
    t0 = time.time()
    load = cfg.load
    deadline = time.monotonic() + load.duration_s if load.duration_s else None
    items.start()
    with RecordWriter(out / RECORDS) as writer:
        async def handle(case: EvalCase, scheduled: float | None) -> None:
            counts["in_flight"] += 1
            if progress:
                progress("update", dict(counts))
            rec = await items.record(case, scheduled)
            counts["in_flight"] -= 1
            writer.write(rec)
            counts["done"] += 1
            counts["failed"] += rec.outcome != "ok"
            if progress:
                progress("update", dict(counts))

        try:
            if load.rate:
                sent = await open_loop(cases, load.rate, cfg.concurrency, handle, seed=load.arrival_seed,
                                       deadline=deadline)
            else:
                sent = await closed_loop(cases, cfg.concurrency, handle, deadline)
        finally:
            await items.close()
    return session_result(cfg, time.time() - t0, sent, len(cases), items.server_metrics(), items.fleet(),
                          budget.used, items.harness())


def recorded_args(args: list[str]) -> list[str]:
    """A command line as a manifest records it: paths relative to the project, or their name
    when outside it (the interpreter, a model folder in the cache), never a machine path."""
    out = []
    for a in args:
        if a.startswith("/"):
            try:
                a = str(Path(a).relative_to(PROJECT_ROOT))  # as given: .venv/bin/python stays itself
            except ValueError:
                a = Path(a).name
        out.append(a)
    return out


def run_eval(cfg: EvalConfig, progress: Progress | None = None) -> Summary:
    """Run (or resume) a live evaluation; returns the summary written to ``summary.json``.

    Ctrl-C (SIGINT) cancels in-flight requests, keeps every finished record, stops a local
    server we started and raises ``KeyboardInterrupt``; a second one exits at once.
    """
    with Interrupts() as interrupts:
        return _run_eval(cfg, progress, interrupts)


def _eval_set(cfg: EvalConfig, wh: Warehouse) -> tuple[bool, Any]:
    """(whether its golds are SQL, the set): a gold-SQL set scores every answer kind by its rows;
    otherwise the kind's own cases (v2 golds for the query and SQL answers, v1 golds for the intent)."""
    evalset = load_eval_set(cfg.evalset, cfg.answer, wh)
    return isinstance(evalset, GoldSqlSet), evalset


def _run_eval(cfg: EvalConfig, progress: Progress | None, interrupts: Interrupts) -> Summary:
    check_local_out(cfg.out)
    validate(cfg)
    wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
    compiles_before, shapes_before = wh.catalog.engine.compiles, wh.catalog.engine.shapes()
    gold_sql, evalset = _eval_set(cfg, wh)
    rulesets = load_guardrails(cfg.conditions.guardrails(cfg.guardrails), wh.catalog, wh)
    prompt = load_prompt(cfg.prompt, cfg.style, wh)
    conditions = load_conditions(cfg, wh)
    for cond in conditions:
        cond.check_against(evalset)
    key = api_key(cfg)
    cases = list(evalset.cases[: cfg.limit] if cfg.limit else evalset.cases)
    if cfg.load.order_seed is not None:  # a repeat's own order (the same items; batching differs)
        random.Random(cfg.load.order_seed).shuffle(cases)
    # Every prompt of the run, as sent: a local server's context is sized from them (or a given one
    # checked) before it starts; an endpoint's is checked once its max_model_len is known.
    items = [(c.id, item_messages(prompt, conditions, c.question, cfg.load.context_suffix)) for c in cases]
    context: ContextPart | None = None
    if cfg.endpoint is None:
        context = local_context(cfg, items)
        cfg = replace(cfg, server=replace(cfg.server, max_model_len=context.max_model_len))

    started: list[LocalServer] = []  # the local server, when there is no endpoint

    def hold(server: LocalServer) -> None:  # before it starts: a second Ctrl-C kills its process group
        started.append(server)
        interrupts.kill_server = functools.partial(_kill_group, server)

    with bound_endpoint(cfg, on_server=hold) as (bound, _):
        assert bound.endpoint is not None
        server = started[0] if started else None
        base_url, model = bound.endpoint, bound.model
        if server is not None:
            key = "EMPTY"
        fleet = targets(cfg, base_url, model, key)
        load = cfg.load
        facts = asyncio.run(probe_endpoint(base_url, model, key))
        grammar = grammar_for(cfg.answer, wh)
        if grammar is not None:  # a grammar the server refuses fails every request: one clear error first
            for url, mdl, k in fleet:
                probe_grammar(url, mdl, k, grammar, timeout_s=cfg.timeout_s)
        more_facts = [asyncio.run(probe_endpoint(u, m, k)) for u, m, k in fleet[1:]]
        if server is None:  # before any request: the endpoint's context (the smallest replica's) must fit
            context = endpoint_context(cfg, items, base_url, model, key, [facts, *more_facts])
        manifest = REGISTRY.manifest_model()(
            **manifest_base("eval", evalset, rulesets, wh).given(),
            endpoint=base_url if server is None else "local",
            model=model, prompt=prompt.name, prompt_style=prompt.style, prompt_sha256=prompt.sha256,
            sampling=bind_sampling(request_sampling(cfg), wh, cfg.answer,
                                   grammar=grammar.text if grammar is not None else None).recorded(),
            # Which client engine sent the requests: worker processes or Ray actors, and where.
            engine=(EnginePart(name=cfg.engine, workers=cfg.workers, ray_address=cfg.ray_address)
                    if cfg.workers > 1 or cfg.engine != "local" else None),
            concurrency=cfg.concurrency, limit=cfg.limit, server=facts, client=cfg.client,
            **dict(cfg.conditions.manifest(conditions)),  # every registered condition's keys (None when off)
            timeout_s=cfg.timeout_s,
            load=LoadPart(rate=load.rate, duration_s=load.duration_s,
                          arrival_seed=load.arrival_seed if load.rate else None,
                          **({"order_seed": load.order_seed} if load.order_seed is not None else {})),
            context_suffix_chars=len(load.context_suffix),
            context_suffix_sha256=(hashlib.sha256(load.context_suffix.encode()).hexdigest()
                                   if load.context_suffix else None),
            server_started_by_us=server is not None,
            server_args=recorded_args(server.args) if server is not None else None,
            server_startup_s=getattr(server, "startup_s", None),
            # The backend the engine reported at start-up (its log), beside the one asked for; an
            # endpoint's: what it reports (vLLM's /server_info), else "unknown (external endpoint)".
            structured_outputs=server_structured(cfg, server) or endpoint_structured_outputs(base_url, key),
            batch_invariant=cfg.server.batch_invariant if server is not None else None,
            api_key_env=cfg.api_key_env,
            # Fixed for the whole run (all its items), so a resumed item gets the budget it
            # would have had uninterrupted: what the recorded items did not use.
            retry_budget=RetryBudgetPart(fraction=cfg.retry_budget,
                                         total=RetryBudget.allowed(len(cases), cfg.retry_budget)),
        )
        if not KINDS[cfg.answer].implicit:  # (older runs: absent, v1 intents)
            manifest.answer = cfg.answer
        if context is not None:
            manifest.context = context
        manifest.spec = RunSpec.of(cfg).recorded()  # what `eval --like` repeats
        if gold_sql:
            manifest.gold, manifest.column_rule = "sql", COLUMN_RULE
        if gold_sql or KINDS[cfg.answer].writes_sql:  # where unqualified names in gold and model SQL resolved
            manifest.search_path = list(resolve_search_path(wh.catalog.manifest, cfg.search_path))
        if len(fleet) > 1:
            manifest.routing = cfg.routing
            manifest.replicas = [ReplicaPart(label=f"r{i}", url=u, model=m, server=f)
                                 for i, ((u, m, _), f) in enumerate(zip(fleet, [facts, *more_facts], strict=True))]
        # A server that ignores the schema would make every figure below meaningless: checked
        # with one short request before anything is written (resumed runs too).
        assert manifest.sampling is not None and manifest.retry_budget is not None
        modes = run_modes(manifest.sampling.structured, cfg.answer,
                          [m for c in cfg.conditions.active() for m in c.constraint_modes])
        canary = require_constraints(base_url, model, key, modes,
                                     compact=bool(manifest.structured_outputs
                                                  and manifest.structured_outputs.disable_any_whitespace),
                                     client=cfg.client)
        manifest.structured_canary = canary
        prepare_dir(cfg.out, resume=cfg.resume, force=cfg.force)
        records_path = cfg.out / RECORDS
        used = 0
        if cfg.resume:
            check_resume(cfg.out, manifest, RESUME_KEYS + REGISTRY.manifest_keys())
            repair_tail(records_path)
            done, used = recorded_retries(records_path)
            cases = [c for c in cases if c.id not in done]
            kept = read_json(cfg.out / MANIFEST).get("retry_budget")  # none recorded: the budget as configured
            if kept:
                manifest.retry_budget = RetryBudgetPart.model_validate(kept)
            manifest.resumed_at = time.time()
        budget = RetryBudget(0, 0.0, used=used, total=manifest.retry_budget.total)
        manifest.started = time.time()
        write_json_atomic(cfg.out / MANIFEST, manifest.to_json())
        try:
            if cfg.workers > 1 or cfg.engine != "local":
                session = run_workers(cfg, base_url, model, key, cfg.out, cases, progress, budget)
            else:
                session = asyncio.run(_run(cfg, base_url, model, key, cfg.out, cases, progress,
                                           interrupts, budget, Loaded(wh, rulesets, prompt, conditions)))
        except asyncio.CancelledError:
            if interrupts.count:
                raise KeyboardInterrupt from None
            raise
    if cfg.workers == 1 and cfg.engine == "local":
        session.compiles = wh.catalog.engine.compiles - compiles_before
    else:  # each worker compiled in its own catalog: the distinct shapes of all, beyond what this process had
        session.compiles = len((wh.catalog.engine.shapes() | session.worker_shapes) - shapes_before)
    return finish_summary(cfg.out, rulesets, session, manifest)


def local_context(cfg: EvalConfig, items: list[tuple[str, Messages]]) -> ContextPart:
    """The context of the server started for the run: sized from its prompts, or the given one
    checked against them (refused, exit 2, before the server starts, where one cannot fit)."""
    sizes, limit = prompt_sizes(cfg.model, items)
    context = size_local(sizes, cfg.sampling.max_tokens, cfg.server.max_model_len, limit)
    if context.note:
        sys.stderr.write(f"note: {context.note}\n")
    return context


def endpoint_context(cfg: EvalConfig, items: list[tuple[str, Messages]], base_url: str, model: str, key: str,
                     facts: list[ServerFacts]) -> ContextPart:
    """The run's prompts against a given endpoint's ``max_model_len``: refused before any request
    where one cannot fit; where it could not be checked, said on stderr and recorded."""
    lens = [f.max_model_len for f in facts if f.max_model_len is not None]
    sizes, _ = prompt_sizes(model, items, base_url=base_url, key=key)
    context = check_against(sizes, cfg.sampling.max_tokens, min(lens) if lens else None, base_url)
    if not context.checked:
        sys.stderr.write(f"note: {context.note}\n")
    return context


def sized_for_run(cfg: EvalConfig) -> EvalConfig:
    """``cfg`` with its local server's context sized from the run's prompts where none is given
    (``max_model_len`` None): for a command that starts the server before ``run_eval`` binds it."""
    if cfg.endpoint is not None or cfg.server.max_model_len is not None:
        return cfg
    wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
    _, evalset = _eval_set(cfg, wh)
    prompt = load_prompt(cfg.prompt, cfg.style, wh)
    conditions = load_conditions(cfg, wh)
    cases = list(evalset.cases[: cfg.limit] if cfg.limit else evalset.cases)
    items = [(c.id, item_messages(prompt, conditions, c.question, cfg.load.context_suffix)) for c in cases]
    return replace(cfg, server=replace(cfg.server, max_model_len=local_context(cfg, items).max_model_len))


def server_structured(cfg: EvalConfig, server: LocalServer | None) -> StructuredOutputs | None:
    """The structured-output setting of a server this run started: asked (``cfg.server``) and
    effective (what its engine logged; None where the log did not say).  None for an endpoint."""
    if server is None:
        return None
    effective: StructuredOutputs | None = getattr(server, "structured", None)
    return StructuredOutputs(requested_backend=cfg.server.structured_backend, requested_compact=cfg.server.compact,
                             backend=effective.backend if effective else None,
                             disable_any_whitespace=effective.disable_any_whitespace if effective else None,
                             source="server log" if effective else None)


def _kill_group(server: LocalServer) -> None:
    """SIGKILL a local server's process group (it runs in its own session)."""
    pid = getattr(server, "pid", None)
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def bound_endpoint(cfg: EvalConfig, on_server: Callable[[LocalServer], None] | None = None
                   ) -> Iterator[tuple[EvalConfig, EndpointFacts]]:
    """``cfg`` bound to its endpoint, or to one local vLLM started (and always stopped) here
    with ``cfg.server``'s settings: the one way a run starts a local server.

    ``on_server`` is given the ``LocalServer`` before it starts (``run_eval`` keeps it to
    record its arguments and to kill its process group on a second Ctrl-C)."""
    if cfg.endpoint is not None:
        yield cfg, EndpointFacts(started_by_us=False, endpoint=cfg.endpoint)
        return

    local = sized_for_run(cfg).server
    assert local.max_model_len is not None  # sized above where none was given
    server = LocalServer(ServerConfig(model=cfg.model, port=local.port or free_port(),
                                      compact=local.compact, max_num_seqs=local.max_num_seqs,
                                      structured_backend=local.structured_backend,
                                      batch_invariant=local.batch_invariant, max_model_len=local.max_model_len,
                                      startup_timeout_s=local.startup_timeout_s))
    if on_server is not None:
        on_server(server)
    server.start()
    try:
        yield (replace(cfg, endpoint=server.url, model=server.model_name),
               EndpointFacts(started_by_us=True, endpoint="local", args=server.args[1:],
                             startup_s=server.startup_s, max_num_seqs=local.max_num_seqs, cpu=True,
                             structured_outputs=server_structured(cfg, server),
                             batch_invariant=local.batch_invariant))
    finally:
        server.stop()

