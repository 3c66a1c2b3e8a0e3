"""Live evaluation: evalset × endpoint → records, at a fixed concurrency.

Items are scored and appended to ``records.jsonl`` the moment they complete; ``resume``
finishes an interrupted run with every item exactly once.  When no endpoint is given, a
local vLLM is started (and always stopped) for the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import math
import os
import signal
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from .client import CLIENTS, RetryBudget, Sampling, bind_sampling
from .conditions.examples import load_bank
from .conditions.planner import PLANNERS
from .conditions.selfcheck import MAX_SAMPLES
from .conditions.values import LINK_MODES, effective_guardrails
from .errors import InputError
from .evalset import EvalCase, load_evalset
from .guardrail import load_guardrails
from .item import ItemRunner, Loaded, request_sampling, targets, whitespace_outside_strings
from .models import DEFAULT_MODEL
from .pool import ROUTINGS, ReplicaSpec
from .prompt import load_prompt
from .records import (
    MANIFEST,
    RECORD_VERSION,
    RECORDS,
    SUMMARY,
    RecordWriter,
    check_resume,
    prepare_dir,
    read_json,
    records_digest,
    repair_tail,
    write_json_atomic,
)
from .results import Manifest, Summary, validated
from .runner import manifest_base, summarise_file
from .scheduler import closed_loop, open_loop
from .score import percentiles
from .semantic import open_warehouse

Progress = Callable[[str, dict[str, int]], None]


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
        self._previous: Any = None
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

    def _handle(self, signum: int, frame: Any) -> None:
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


@dataclass(frozen=True)
class LocalServerSettings:
    """How the harness starts a local vLLM for a run: used only when no endpoint is given
    (``bound_endpoint``)."""

    compact: bool = True  # whitespace-free structured outputs (--compact-server)
    max_num_seqs: int | None = None  # vLLM --max-num-seqs (default: vLLM's)
    port: int | None = None  # default: a free port


@dataclass(frozen=True)
class LoadShape:
    """How requests are offered beyond a plain closed-loop eval (the load tools set these;
    the defaults are a closed loop over every item)."""

    rate: float | None = None  # open loop: Poisson arrivals per second; concurrency caps in-flight
    duration_s: float | None = None  # start no request after this many seconds (the rest: not sent)
    arrival_seed: int = 0
    context_suffix: str = ""  # text after every question (length classes for `grid`)
    metrics_interval_s: float = 0.25  # how often the server's /metrics is sampled during the run


@dataclass(frozen=True)
class EvalConfig:
    """What is evaluated and where (``concurrency`` included); ``server``: how a local server
    is started when there is no endpoint; ``load``: the load shape."""

    evalset: str = "heldout"
    out: Path = Path("runs/eval")
    endpoint: str | None = None
    model: str = DEFAULT_MODEL
    # Further replicas of the same model (a fleet): ``endpoint`` is the first; items are
    # routed over all of them and every record names the replica that answered.
    replicas: tuple[ReplicaSpec, ...] = ()
    routing: str = "least-inflight"  # pool.ROUTINGS
    # Client processes: items go out from one queue to ``workers`` processes (each with its own
    # event loop and connections; the concurrency cap is split over them, so it stays global).
    workers: int = 1
    engine: str = "local"  # local (this machine's processes) | ray (Ray actors; --ray-address)
    ray_address: str | None = None  # an existing Ray cluster (default: a local Ray)
    api_key_env: str | None = None
    prompt: str = "baseline"
    style: str = "default"
    guardrails: tuple[str, ...] = ("ranking",)
    concurrency: int = 8
    limit: int | None = None
    sampling: Sampling = field(default_factory=Sampling)
    timeout_s: float = 120.0
    retry_budget: float = 0.2
    client: str = "aiohttp"  # aiohttp | sdk (client.CLIENTS)
    resume: bool = False
    force: bool = False
    warehouse: Path | None = None  # the database (--db); default: the semantic model's shipped build
    semantic_model: str | None = None  # name or path of the warehouse's semantic model (default: retail)
    examples: int = 0  # retrieved few-shot: K solved questions from the bank as turns (0: none)
    planner: str = "none"  # none | two-stage (conditions.planner)
    example_bank: str | None = None  # a set of the warehouse (default dev) or a JSONL path
    link_values: str = "none"  # none | hint | repair | both (conditions.values)
    samples: int = 1  # self-consistency: answers per item, majority vote (conditions.selfcheck)
    abstain: bool = False  # answer "needs clarification" when the evidence is split
    abstain_below: float | None = None  # … or when the intent-token confidence is below this (implies abstain)
    server: LocalServerSettings = field(default_factory=LocalServerSettings)  # only when endpoint is None
    load: LoadShape = field(default_factory=LoadShape)  # the defaults: a plain closed-loop eval

    @property
    def abstaining(self) -> bool:
        """Whether items may answer "needs clarification" (``--abstain`` or ``--abstain-below``)."""
        return self.abstain or self.abstain_below is not None


def validate(cfg: EvalConfig) -> None:
    if cfg.concurrency < 1:
        raise InputError(f"must be at least 1, got {cfg.concurrency}", field="--concurrency")
    if cfg.limit is not None and cfg.limit < 1:
        raise InputError(f"must be at least 1, got {cfg.limit}", field="--limit")
    if cfg.sampling.max_tokens < 1:
        raise InputError(f"must be at least 1, got {cfg.sampling.max_tokens}", field="--max-tokens")
    if not (cfg.timeout_s > 0 and math.isfinite(cfg.timeout_s)):
        raise InputError(f"must be positive and finite, got {cfg.timeout_s}", field="--timeout")
    if cfg.planner not in PLANNERS:
        raise InputError(f"unknown planner {cfg.planner!r} (known: {', '.join(PLANNERS)})", field="--planner")
    if not (cfg.sampling.temperature >= 0 and math.isfinite(cfg.sampling.temperature)):
        raise InputError(f"must be a finite number ≥ 0, got {cfg.sampling.temperature}", field="--temperature")
    if not 1 <= cfg.samples <= MAX_SAMPLES:
        raise InputError(f"must be between 1 and {MAX_SAMPLES}, got {cfg.samples}", field="--samples")
    if cfg.samples > 1 and not cfg.sampling.temperature > 0:
        raise InputError("self-consistency needs different answers: give --temperature > 0", field="--samples")
    if cfg.samples > 1 and cfg.planner != "none":
        raise InputError("--samples and --planner do not combine (yet): choose one", field="--samples")
    if cfg.abstain_below is not None and not 0 < cfg.abstain_below < 1:
        raise InputError(f"must be a probability strictly between 0 and 1, got {cfg.abstain_below}",
                         field="--abstain-below")
    if cfg.link_values not in LINK_MODES:
        raise InputError(f"unknown mode {cfg.link_values!r} (known: {', '.join(LINK_MODES)})",
                         field="--link-values")
    if cfg.client not in CLIENTS:
        raise InputError(f"unknown client {cfg.client!r} (known: {', '.join(CLIENTS)})", field="--client")
    load = cfg.load
    if load.rate is not None and not (load.rate > 0 and math.isfinite(load.rate)):
        raise InputError(f"must be positive and finite, got {load.rate}", field="--rate")
    if load.duration_s is not None and not (load.duration_s > 0 and math.isfinite(load.duration_s)):
        raise InputError(f"must be positive and finite, got {load.duration_s}", field="--duration")
    if not (cfg.retry_budget >= 0 and math.isfinite(cfg.retry_budget)):
        raise InputError(f"must be a finite fraction ≥ 0, got {cfg.retry_budget}", field="retry_budget")
    if cfg.resume and cfg.force:
        raise InputError("--resume continues the run in --out and --force replaces it: pass one of them",
                         field="--force")
    if cfg.endpoint is not None:
        check_endpoint_url(cfg.endpoint)
    if cfg.workers < 1:
        raise InputError(f"must be at least 1, got {cfg.workers}", field="--workers")
    if cfg.engine not in ("local", "ray"):
        raise InputError(f"unknown engine {cfg.engine!r} (known: local, ray)", field="--engine")
    if cfg.workers > 1 or cfg.engine != "local":
        if load.rate is not None:
            raise InputError("an open loop (--rate) runs in one process; drop --workers / --engine",
                             field="--workers")
        if cfg.workers > cfg.concurrency:
            raise InputError(f"{cfg.workers} workers need a concurrency of at least {cfg.workers}, "
                             f"got {cfg.concurrency}", field="--workers")
    if cfg.ray_address is not None and cfg.engine != "ray":
        raise InputError("only with --engine ray", field="--ray-address")
    if cfg.routing not in ROUTINGS:
        raise InputError(f"unknown routing {cfg.routing!r} (known: {', '.join(ROUTINGS)})", field="--routing")
    if cfg.replicas and cfg.endpoint is None:
        raise InputError("several endpoints need the first one as --endpoint", field="--endpoint")
    seen = {cfg.endpoint}
    for spec in cfg.replicas:
        check_endpoint_url(spec.url)
        if spec.url in seen:
            raise InputError(f"{spec.url} is given twice", field="--endpoint")
        seen.add(spec.url)


def check_endpoint_url(url: str) -> None:
    """An endpoint must be an http(s) URL with a host (``http://host:8000/v1``)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
    except ValueError as exc:
        raise InputError(f"not a valid URL: {url!r} ({exc})", field="--endpoint") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        what = f"scheme {parts.scheme}://" if parts.scheme else "no scheme"
        raise InputError(f"{url!r} is not an http(s) URL ({what}; expected e.g. http://host:8000/v1)",
                         field="--endpoint")


def preflight(cfg: EvalConfig) -> str:
    """What a run bound to ``cfg.endpoint`` checks before it writes anything: the options, the
    guardrails, the prompt, the API key and the endpoint itself (reachable, answers JSON,
    serves the model).  Multi-level commands call it before creating their output directory
    (their eval set is loaded next, before anything is measured).  Returns the API key."""
    validate(cfg)
    load_guardrails(effective_guardrails(cfg.guardrails, cfg.link_values))
    load_prompt(cfg.prompt, cfg.style)
    key = api_key(cfg)
    if cfg.endpoint is not None:
        for url, model, k in targets(cfg, cfg.endpoint, cfg.model, key):
            asyncio.run(probe_endpoint(url, model, k))
    return key


def api_key(cfg: EvalConfig) -> str:
    if cfg.api_key_env is None:
        return os.environ.get("OPENAI_API_KEY", "EMPTY")
    value = os.environ.get(cfg.api_key_env)
    if not value:
        raise InputError(f"environment variable {cfg.api_key_env} is not set (it should hold the "
                         "API key)", field="--api-key-env")
    return value


async def probe_endpoint(base_url: str, model: str, key: str) -> dict[str, Any]:
    """Measured server facts: served models, max_model_len, version. Fails clearly."""
    check_endpoint_url(base_url)
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {key}"}
    facts: dict[str, Any] = {"base_url": base_url}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as sess:
        try:
            async with sess.get(base_url.rstrip("/") + "/models", headers=headers) as resp:
                if resp.status in (401, 403):
                    raise InputError(f"endpoint {base_url} refused the API key (HTTP {resp.status})",
                                     field="--api-key-env")
                body = await resp.json(content_type=None)
        except aiohttp.ClientError as exc:
            raise InputError(f"endpoint {base_url} is unreachable: {exc}", field="--endpoint") from None
        except json.JSONDecodeError:
            raise InputError(f"endpoint {base_url}/models did not return JSON",
                             field="--endpoint") from None
        served = [m.get("id") for m in body.get("data", [])] if isinstance(body, dict) else []
        if model not in served:
            raise InputError(f"model {model!r} is not served by {base_url}; served: "
                             f"{', '.join(map(str, served)) or '(none)'}", field="--model")
        info = next(m for m in body["data"] if m.get("id") == model)
        facts["served_models"] = served
        facts["max_model_len"] = info.get("max_model_len")
        try:
            async with sess.get(root + "/version") as resp:
                facts["server_version"] = (await resp.json(content_type=None)).get("version") \
                    if resp.status == 200 else None
        except (aiohttp.ClientError, json.JSONDecodeError, AttributeError):
            facts["server_version"] = None
    return facts


async def _run(cfg: EvalConfig, base_url: str, model: str, key: str, out: Path,
               cases: list[EvalCase], progress: Progress | None,
               interrupts: Interrupts | None = None, budget: RetryBudget | None = None,
               loaded: Loaded | None = None) -> dict[str, Any]:
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
                     budget: RetryBudget | None = None, loaded: Loaded | None = None) -> dict[str, Any]:
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
            rec = await items.run(case, scheduled)
            counts["in_flight"] -= 1
            writer.write(rec)
            counts["done"] += 1
            counts["failed"] += rec["outcome"] != "ok"
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
    from .paths import PROJECT_ROOT

    out = []
    for a in args:
        if a.startswith("/"):
            try:
                a = str(Path(a).relative_to(PROJECT_ROOT))  # as given: .venv/bin/python stays itself
            except ValueError:
                a = Path(a).name
        out.append(a)
    return out


def session_result(cfg: EvalConfig, wall: float, sent: int, n: int, server_metrics: dict[str, Any],
                   fleet: dict[str, Any] | None, retries_used: int,
                   harness: dict[str, Any] | None = None) -> dict[str, Any]:
    """What one session (of one or several processes) adds to the summary."""
    load = cfg.load
    return {"wall_s": wall, "items_this_session": sent, "not_sent": n - sent,
            "server_metrics": server_metrics, "fleet": fleet, "retries_used": retries_used,
            "harness": harness,
            "load": {"mode": "open-loop Poisson" if load.rate else "closed loop",
                     "offered_rate": load.rate, "max_in_flight": cfg.concurrency,
                     "duration_s": load.duration_s, "arrival_seed": load.arrival_seed if load.rate else None,
                     **({"workers": cfg.workers, "engine": cfg.engine} if cfg.workers > 1 or cfg.engine != "local"
                        else {})}}


def run_eval(cfg: EvalConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run (or resume) a live evaluation; returns the summary written to ``summary.json``.

    Ctrl-C (SIGINT) cancels in-flight requests, keeps every finished record, stops a local
    server we started and raises ``KeyboardInterrupt``; a second one exits at once.
    """
    with Interrupts() as interrupts:
        return _run_eval(cfg, progress, interrupts)


def _run_eval(cfg: EvalConfig, progress: Progress | None, interrupts: Interrupts) -> dict[str, Any]:
    validate(cfg)
    wh = open_warehouse(cfg.semantic_model, cfg.warehouse)
    evalset = load_evalset(cfg.evalset, wh)
    rulesets = load_guardrails(effective_guardrails(cfg.guardrails, cfg.link_values), wh.catalog, wh)
    prompt = load_prompt(cfg.prompt, cfg.style, wh)
    bank = load_bank(cfg.example_bank, wh.catalog, cfg.examples) if cfg.examples else None
    if bank is not None:
        bank.check_disjoint(evalset)
    key = api_key(cfg)
    cases = list(evalset.cases[: cfg.limit] if cfg.limit else evalset.cases)

    started: list[Any] = []  # the local server, when there is no endpoint

    def hold(server: Any) -> None:  # before it starts: a second Ctrl-C kills its process group
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
        more_facts = [asyncio.run(probe_endpoint(u, m, k)) for u, m, k in fleet[1:]]
        manifest = manifest_base("eval", evalset, rulesets, wh) | {
            "endpoint": base_url if server is None else "local",
            "model": model, "prompt": prompt.name, "prompt_style": prompt.style,
            "prompt_sha256": prompt.sha256, "sampling": bind_sampling(request_sampling(cfg), wh.catalog).as_dict(),
            "concurrency": cfg.concurrency, "limit": cfg.limit, "server": facts, "client": cfg.client,
            "examples": bank.manifest(cfg.examples) if bank is not None else None,
            "planner": cfg.planner if cfg.planner != "none" else None,
            "link_values": cfg.link_values if cfg.link_values != "none" else None,
            "samples": cfg.samples if cfg.samples > 1 else None,
            "abstain": True if cfg.abstaining else None,
            "abstain_below": cfg.abstain_below,
            "timeout_s": cfg.timeout_s,
            "load": {"rate": load.rate, "duration_s": load.duration_s,
                     "arrival_seed": load.arrival_seed if load.rate else None},
            "context_suffix_chars": len(load.context_suffix),
            "context_suffix_sha256": (hashlib.sha256(load.context_suffix.encode()).hexdigest()
                                      if load.context_suffix else None),
            "server_started_by_us": server is not None,
            "server_args": recorded_args(server.args) if server is not None else None,
            "server_startup_s": getattr(server, "startup_s", None),
            "api_key_env": cfg.api_key_env,
            **({"routing": cfg.routing,
                "replicas": [{"label": f"r{i}", "url": u, "model": m, "server": f}
                             for i, ((u, m, _), f) in enumerate(zip(fleet, [facts, *more_facts], strict=True))]}
               if len(fleet) > 1 else {}),
            # Fixed for the whole run (all its items), so a resumed item gets the budget it
            # would have had uninterrupted: what the recorded items did not use.
            "retry_budget": {"fraction": cfg.retry_budget,
                             "total": RetryBudget.allowed(len(cases), cfg.retry_budget)},
        }
        prepare_dir(cfg.out, resume=cfg.resume, force=cfg.force)
        records_path = cfg.out / RECORDS
        used = 0
        if cfg.resume:
            check_resume(cfg.out, manifest)
            repair_tail(records_path)
            done, used = recorded_retries(records_path)
            cases = [c for c in cases if c.id not in done]
            manifest["retry_budget"] = read_json(cfg.out / MANIFEST).get("retry_budget") \
                or manifest["retry_budget"]  # a run from before the budget was kept: as now
            manifest["resumed_at"] = time.time()
        budget = RetryBudget(0, 0.0, used=used, total=int(manifest["retry_budget"]["total"]))
        manifest["started"] = time.time()
        write_json_atomic(cfg.out / MANIFEST, validated(Manifest, manifest))
        try:
            if cfg.workers > 1 or cfg.engine != "local":
                from .workers import run_workers

                session = run_workers(cfg, base_url, model, key, cfg.out, cases, progress, budget)
            else:
                session = asyncio.run(_run(cfg, base_url, model, key, cfg.out, cases, progress,
                                           interrupts, budget, Loaded(wh, rulesets, prompt, bank)))
        except asyncio.CancelledError:
            if interrupts.count:
                raise KeyboardInterrupt from None
            raise
    return finish_summary(cfg.out, rulesets, session, manifest)


def recorded_retries(records_path: Path) -> tuple[set[str], int]:
    """Ids already recorded and the retries they took (one wait recorded per retry).

    Retries spent by items that were in flight when a run died are not counted: those items
    are redone from their first attempt, exactly as in an uninterrupted run.
    """
    from .records import iter_records

    done: set[str] = set()
    used = 0
    if records_path.exists():
        for rec in iter_records(records_path):
            done.add(rec["id"])
            used += len(rec.get("retry_waits_s") or ())
    return done, used


def _kill_group(server: Any) -> None:
    """SIGKILL a local server's process group (it runs in its own session)."""
    pid = getattr(server, "pid", None)
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def finish_summary(out: Path, rulesets: list[Any], session: dict[str, Any],
                   manifest: dict[str, Any]) -> dict[str, Any]:
    """Summary from the records on disk (all sessions), plus this session's throughput."""
    from .records import iter_records

    summary = summarise_file(out / RECORDS, rulesets)
    outcomes: Counter[str] = Counter()
    ws, chars, starts, ends = [], [], [], []
    retries = 0
    for rec in iter_records(out / RECORDS):
        outcomes[rec.get("outcome") or "n/a"] += 1
        if rec.get("whitespace_chars") is not None:
            ws.append(rec["whitespace_chars"])
            chars.append(rec["chars"])
        retries += len(rec.get("retry_waits_s") or ())
        if rec.get("started") and rec.get("latency_s") is not None:
            starts.append(rec["started"])
            ends.append(rec["started"] + rec["latency_s"])
    summary["outcomes"] = dict(outcomes)
    summary["errors_by_class"] = {k: v for k, v in outcomes.items() if k != "ok"}
    summary["compactness"] = {"n": len(ws), "outputs_without_whitespace": sum(1 for w in ws if w == 0),
                              "whitespace_chars": percentiles([float(w) for w in ws]),
                              "chars": percentiles([float(c) for c in chars])}
    n_ok = outcomes.get("ok", 0)
    summary["throughput"] = {
        "items_this_session": session["items_this_session"], "wall_s": session["wall_s"],
        "req_per_s": session["items_this_session"] / session["wall_s"] if session["wall_s"] else None,
        "span_s_all_records": (max(ends) - min(starts)) if starts else None,
        "completed_ok": n_ok, "not_sent": session.get("not_sent", 0)}
    summary["load"] = session.get("load")
    # This session's client: CPU share and event-loop lag, and whether it was saturated.
    summary["harness"] = session.get("harness")
    summary["server_metrics"] = session["server_metrics"]
    if session.get("fleet") or manifest.get("replicas"):
        summary["fleet"] = fleet_summary(out, manifest, session.get("fleet"))
        summary["server_metrics"] = {"observed": False,
                                     "note": "several replicas: see fleet.server_metrics, one per replica"}
    # The whole run's, from the records (a resumed run counts its earlier sessions too).
    summary["retries_used"] = retries
    summary["retry_budget"] = dict(manifest.get("retry_budget") or {}, used=retries)
    summary["records"] = records_digest(out / RECORDS)  # what `compare` checks the records against
    summary["record_version"] = RECORD_VERSION
    write_json_atomic(out / SUMMARY, validated(Summary, summary))
    manifest["finished"] = time.time()
    write_json_atomic(out / MANIFEST, validated(Manifest, manifest))
    return summary


def fleet_summary(out: Path, manifest: dict[str, Any], session: dict[str, Any] | None) -> dict[str, Any]:
    """Per replica: requests, outcomes and latency from the records (every session of the
    run), and this session's time out of rotation and events."""
    from .records import iter_records

    per: dict[str, dict[str, Any]] = {}
    for rec in iter_records(out / RECORDS):
        label = rec.get("replica")
        if label is None:
            continue
        st = per.setdefault(label, {"requests": 0, "ok": 0, "errors": Counter(), "lat": [],
                                    "failed_here": 0})
        st["requests"] += 1
        if rec.get("outcome") == "ok":
            st["ok"] += 1
            if rec.get("latency_s") is not None:
                st["lat"].append(float(rec["latency_s"]))
        else:
            st["errors"][rec.get("outcome") or "n/a"] += 1
        for lab in rec.get("failed_over_from") or ():
            per.setdefault(lab, {"requests": 0, "ok": 0, "errors": Counter(), "lat": [],
                                 "failed_here": 0})["failed_here"] += 1
    live = {r["label"]: r for r in (session or {}).get("replicas", [])}
    rows = []
    for rep in manifest.get("replicas") or []:
        st = per.get(rep["label"], {"requests": 0, "ok": 0, "errors": Counter(), "lat": [], "failed_here": 0})
        rows.append({"label": rep["label"], "url": rep["url"], "model": rep["model"],
                     "answered": st["requests"], "ok": st["ok"], "errors": dict(st["errors"]),
                     "failed_then_resent": st["failed_here"], "latency_s": percentiles(st["lat"]),
                     **{k: live[rep["label"]][k] for k in ("out_of_rotation_s", "first_out_after_s",
                                                          "in_rotation_at_end", "events")
                        if rep["label"] in live}})
    return {"routing": manifest.get("routing"), "failovers_this_session": (session or {}).get("failovers"),
            "replicas": rows, "server_metrics": (session or {}).get("server_metrics")}


__all__ = ["EvalConfig", "LoadShape", "LocalServerSettings", "run_eval", "whitespace_outside_strings"]


@contextlib.contextmanager
def bound_endpoint(cfg: EvalConfig, on_server: Callable[[Any], None] | None = None
                   ) -> Iterator[tuple[EvalConfig, dict[str, Any]]]:
    """``cfg`` bound to its endpoint, or to one local vLLM started (and always stopped) here
    with ``cfg.server``'s settings: the one way a run starts a local server.

    ``on_server`` is given the ``LocalServer`` before it starts (``run_eval`` keeps it to
    record its arguments and to kill its process group on a second Ctrl-C)."""
    if cfg.endpoint is not None:
        yield cfg, {"started_by_us": False, "endpoint": cfg.endpoint}
        return
    from .server import LocalServer, ServerConfig, free_port

    local = cfg.server
    server = LocalServer(ServerConfig(model=cfg.model, port=local.port or free_port(),
                                      compact=local.compact, max_num_seqs=local.max_num_seqs))
    if on_server is not None:
        on_server(server)
    server.start()
    try:
        yield (replace(cfg, endpoint=server.url, model=server.model_name),
               {"started_by_us": True, "endpoint": "local", "args": server.args[1:],
                "startup_s": server.startup_s, "max_num_seqs": local.max_num_seqs, "cpu": True})
    finally:
        server.stop()
