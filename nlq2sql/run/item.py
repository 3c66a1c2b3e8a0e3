"""One item's live path: prompt → request (over the replica pool) → score → record.

``ItemRunner`` turns a case into its record; every engine uses it unchanged, so a record does not
depend on where it was made. An item without a gold is answered, not scored."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from nlq2sql.answers.kinds import KINDS, bind_sampling
from nlq2sql.answers.sql.gold import GoldRunner
from nlq2sql.answers.sql.sandbox import Sandbox
from nlq2sql.answers.unscored import Question
from nlq2sql.conditions.registry import Condition, Request, Settings
from nlq2sql.conditions.trace import Trace
from nlq2sql.errors import ExecutionError, SqlBuildError
from nlq2sql.inputs import strip_whitespace_outside_strings
from nlq2sql.records.item import ItemRecord, LoadStamp, RequestPart
from nlq2sql.records.run_parts import FleetSession, Harness, ServerMetrics
from nlq2sql.run.config import targets
from nlq2sql.run.harness_load import HarnessMonitor
from nlq2sql.run.pool import FAIL_FAST, Pool
from nlq2sql.run.sql_grammar import grammar_for
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.evalset import EvalCase
from nlq2sql.stages.goldsql import GoldSqlCase, is_gold_sql_set, resolve_search_path
from nlq2sql.stages.intent import canonicalise
from nlq2sql.stages.pipeline import make_executor
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.stages.queryset import QueryCase
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.stages.sqlbuild import build_sql
from nlq2sql.transport.client import EndpointConfig, RetryBudget, Sampling, complete
from nlq2sql.transport.server_metrics import MetricsSampler
from nlq2sql.transport.stream import Completion

if TYPE_CHECKING:
    from nlq2sql.run.config import EvalConfig
    from nlq2sql.semantic.binding import Warehouse
    from nlq2sql.stages.guardrail import RuleSet
    from nlq2sql.stages.prompt import Prompt

__all__ = ["ItemRunner", "Loaded", "load_conditions", "request_part", "request_sampling", "targets",
           "whitespace_outside_strings"]


def request_sampling(cfg: EvalConfig) -> Sampling:
    """What every request of the run asks for: the run's sampling as its conditions change it
    (token logprobs when abstention reads the intent-token confidence, ``--abstain-below``)."""
    return cfg.conditions.sampling(cfg.sampling)


def load_conditions(cfg: EvalConfig, wh: Warehouse) -> list[Condition[Settings]]:
    """The run's conditions, each bound to its settings and loaded for this process (a bank
    fitted, an index built), in the registry's order."""
    active = cfg.conditions.active()
    for c in active:
        c.load(wh, cfg.answer)
    return active


def whitespace_outside_strings(text: str) -> int:
    """Whitespace characters a compact serialiser would not have written."""
    return len(text) - len(strip_whitespace_outside_strings(text))


def request_part(comp: Completion) -> RequestPart:
    """How the item's request went, as its record keeps it (its ``finish_reason`` is the answer's)."""
    return RequestPart(outcome=comp.outcome, http_status=comp.http_status, error=comp.error, attempts=comp.attempts,
                       latency_s=comp.latency_s, ttft_s=comp.ttft_s, itl_mean_s=comp.itl_mean_s,
                       itl_max_s=comp.itl_max_s, chunks=comp.chunks, prompt_tokens=comp.prompt_tokens,
                       completion_tokens=comp.completion_tokens, cached_tokens=comp.cached_tokens,
                       retry_waits_s=comp.retry_waits_s, unsent_retries=comp.unsent_retries, started=comp.started)


@dataclasses.dataclass(frozen=True)
class Loaded:
    """What a run has already loaded for its manifest (warehouse, guardrails, prompt, loaded
    conditions): handed to the in-process runner so none is loaded, nor a bank's index fitted,
    twice.  Worker processes and Ray actors load their own."""

    wh: Warehouse
    rulesets: list[RuleSet]
    prompt: Prompt
    conditions: list[Condition[Settings]]


class ItemRunner:
    """A process's means to answer items; ``start`` inside its event loop, ``close`` after."""

    def __init__(self, cfg: EvalConfig, base_url: str, model: str, key: str, budget: RetryBudget,
                 *, concurrency: int | None = None, sample_metrics: bool = True,
                 loaded: Loaded | None = None) -> None:
        self.cfg = cfg
        if loaded is not None:
            self.wh, self.rulesets, self.prompt = loaded.wh, loaded.rulesets, loaded.prompt
            self.conditions = loaded.conditions
        else:
            self.wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
            self.rulesets = load_guardrails(cfg.conditions.guardrails(cfg.guardrails), self.wh.catalog, self.wh)
            self.prompt = load_prompt(cfg.prompt, cfg.style, self.wh)
            self.conditions = load_conditions(cfg, self.wh)
        self.kind = KINDS[cfg.answer]  # what the answer is: its request part, its scorer
        grammar = grammar_for(cfg.answer, self.wh)  # --answer sql-grammar: the warehouse's SQL grammar
        self.sampling = bind_sampling(request_sampling(cfg), self.wh, cfg.answer,
                                      grammar=grammar.text if grammar is not None else None)
        # At most one condition replaces the single request (the registry refuses two).
        self.requester = next((c for c in self.conditions if c.replaces_request), None)
        # Connection pools sized for this process's share of the run's concurrency.
        ecfg = EndpointConfig(base_url=base_url, model=model, api_key=key, timeout_s=cfg.timeout_s,
                              concurrency=concurrency or cfg.concurrency, retry_budget=cfg.retry_budget,
                              client=cfg.client)
        self.pool = Pool([dataclasses.replace(ecfg, base_url=u, model=m, api_key=k)
                          for u, m, k in targets(cfg, base_url, model, key)], cfg.routing)
        self.fail_fast = FAIL_FAST if self.pool.multi else frozenset()
        self.budget = budget
        self.samplers = ([MetricsSampler(r.cfg.base_url, cfg.load.metrics_interval_s) for r in self.pool.replicas]
                         if sample_metrics else [])
        self.ex = make_executor(self.wh)
        self.sandbox = None  # the direct-SQL answer's (and gold SQL's) own read-only, locked, time-limited DuckDB
        self.golds: GoldRunner | None = None  # a gold-SQL set: its golds, each run once in the sandbox
        gold_sql = is_gold_sql_set(cfg.evalset, self.wh.name)
        if self.kind.writes_sql or gold_sql:
            self.sandbox = Sandbox(self.wh.db_path, timeout_s=cfg.sql_timeout_s,
                                   search_path=resolve_search_path(self.wh.catalog.manifest, cfg.search_path))
            if gold_sql:
                self.golds = GoldRunner(self.sandbox)
        self.monitor = HarnessMonitor()

    def prepare(self, cases: Iterable[EvalCase | QueryCase | GoldSqlCase]) -> None:
        """Execute each distinct gold query once, before the clock starts: the answers are the
        warehouse's, not the endpoint's, so their cost belongs to setting up, not to the measured
        requests (``vllm bench serve`` prepares its prompts before its clock too).  A gold that
        fails here is left to fail the same way, recorded, when its item is scored."""
        for case in cases:
            with contextlib.suppress(SqlBuildError, ExecutionError):
                if isinstance(case, GoldSqlCase):
                    for sql in case.gold_sql or ():
                        if self.golds is not None:
                            self.golds.result(sql)
                elif isinstance(case, QueryCase):
                    if case.gold is not None:
                        self.ex.run(self.wh.catalog.engine.compile(case.gold))
                else:
                    self.ex.run(build_sql(canonicalise(case.gold), self.wh.catalog))

    def start(self) -> None:
        for smp in self.samplers:
            smp.start()
        self.pool.start()
        self.monitor.start()

    async def close(self) -> None:
        try:
            await self.monitor.stop()
            for smp in self.samplers:
                await smp.stop()
            await self.pool.close()
        finally:
            self.ex.close()
            if self.sandbox is not None:
                self.sandbox.close()

    async def record(self, case: EvalCase | QueryCase | GoldSqlCase | Question, scheduled: float | None = None
                     ) -> ItemRecord:
        """The item's record (a failed request is a recorded outcome, never an exception)."""
        cfg, pool = self.cfg, self.pool
        messages = self.prompt.messages(case.question + cfg.load.context_suffix)
        traces: list[Trace] = []  # what the conditions chose for this item (each its declared record keys)
        for cond in self.conditions:
            messages, chosen = cond.before(case.question, messages)
            traces.append(chosen)
        planned: Trace | None = None  # a replacing request's own keys (the planner's stage, the vote)
        if self.requester is not None:
            requester = self.requester
            (comp, planned), rep, trail = await pool.call(
                case.id, lambda r: requester.answer(Request(r.client, r.cfg, messages, self.sampling, self.budget,
                                                            self.fail_fast)),
                lambda res: res[0])
        else:
            comp, rep, trail = await pool.call(
                case.id, lambda r: complete(r.client, r.cfg, messages, self.sampling, self.budget, self.fail_fast))
        # A question without a gold (``batch --questions``) is answered, not scored: same keys.
        request_error = None if comp.outcome == "ok" else comp.outcome
        if isinstance(case, GoldSqlCase):  # golds stated as SQL: any answer kind, by rows (answers.sql.gold)
            assert self.golds is not None
            rec = self.kind.gold_record(case, comp.text, executor=self.ex, catalog=self.wh.catalog,
                                        golds=self.golds, rulesets=self.rulesets, finish_reason=comp.finish_reason,
                                        request_error=request_error)
        else:  # the kind's own scorer (the SQL kinds': guarded, sandboxed)
            rec = self.kind.record(case, comp.text, self.ex, self.wh.catalog, rulesets=self.rulesets,
                                   sandbox=self.sandbox, finish_reason=comp.finish_reason,
                                   request_error=request_error)
        rec.request = request_part(comp)
        for chosen in traces:  # converted to the record's JSON values only here, in registry order
            rec.merge(chosen)
        if planned is not None:
            rec.merge(planned)
        for cond in self.conditions:  # over the built record (their keys: each to its part, else a trace)
            cond.after(rec, comp, scored=not isinstance(case, Question))
        req = rec.request
        if pool.multi:  # which replica answered, which failed the item before it, every request on each
            req.replica = rep.label
            req.failed_over_from = trail.failed_over_from
            req.attempt_log = trail.attempt_log(comp.started)
            req.latency_e2e_s = trail.latency_e2e_s
        req.concurrency = cfg.concurrency
        if scheduled is not None:  # open loop: time spent waiting for an in-flight slot
            queued = max(0.0, comp.started - scheduled)
            # (answered; with several replicas: to its answer's end, failovers included)
            done_s = None if comp.latency_s is None else trail.latency_e2e_s if pool.multi else comp.latency_s
            rec.load = LoadStamp(scheduled=scheduled, queued_s=queued,
                                 latency_from_arrival_s=queued + done_s if done_s is not None else None)
        req.whitespace_chars = whitespace_outside_strings(comp.text) if comp.text is not None else None
        req.chars = len(comp.text) if comp.text is not None else None
        return rec

    def fleet(self) -> FleetSession | None:
        """This session's replica events and per-replica /metrics (None with one replica)."""
        if not self.pool.multi:
            return None
        return FleetSession(routing=self.cfg.routing, failovers=self.pool.failovers, replicas=self.pool.report(),
                            server_metrics={r.label: smp.result()
                                            for r, smp in zip(self.pool.replicas, self.samplers, strict=False)})

    def harness(self) -> Harness:
        """This process's CPU share and event-loop lag: was the client the bottleneck?"""
        return self.monitor.result()

    def server_metrics(self) -> ServerMetrics:
        if not self.samplers:
            return ServerMetrics(observed=False, note="not sampled by this process")
        return self.samplers[0].result()
