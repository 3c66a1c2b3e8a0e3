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
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from .client import CLIENTS, EndpointConfig, RetryBudget, Sampling, complete, make_client
from .errors import InputError
from .evalset import EvalCase, load_evalset
from .guardrail import load_guardrails
from .prompt import load_prompt
from .records import (
    MANIFEST,
    RECORDS,
    SUMMARY,
    RecordWriter,
    check_resume,
    done_ids,
    prepare_dir,
    repair_tail,
    write_json_atomic,
)
from .runner import make_executor, manifest_base, summarise_file
from .score import percentiles, score_item
from .server_metrics import MetricsSampler

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
class EvalConfig:
    evalset: str = "heldout"
    out: Path = Path("runs/eval")
    endpoint: str | None = None
    model: str = "smollm2-135m"
    api_key_env: str | None = None
    prompt: str = "baseline"
    style: str = "default"
    guardrails: tuple[str, ...] = ("ranking",)
    concurrency: int = 8
    limit: int | None = None
    sampling: Sampling = field(default_factory=Sampling)
    timeout_s: float = 120.0
    retry_budget: float = 0.2
    client: str = "sdk"  # sdk | aiohttp (client.CLIENTS)
    resume: bool = False
    force: bool = False
    warehouse: Path | None = None
    # local server settings (used only when endpoint is None)
    compact_server: bool = True
    max_num_seqs: int | None = None
    port: int | None = None
    metrics_interval_s: float = 0.25
    # load shape (used by the load tools; the defaults are a plain closed-loop eval)
    rate: float | None = None  # open loop: Poisson arrivals per second; concurrency caps in-flight
    duration_s: float | None = None  # start no request after this many seconds (the rest: not sent)
    arrival_seed: int = 0
    context_suffix: str = ""  # text after every question (length classes for `grid`)


def whitespace_outside_strings(text: str) -> int:
    """Whitespace characters a compact serialiser would not have written."""
    count, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in " \t\r\n":
            count += 1
    return count


def validate(cfg: EvalConfig) -> None:
    if cfg.concurrency < 1:
        raise InputError(f"must be at least 1, got {cfg.concurrency}", field="--concurrency")
    if cfg.limit is not None and cfg.limit < 1:
        raise InputError(f"must be at least 1, got {cfg.limit}", field="--limit")
    if cfg.sampling.max_tokens < 1:
        raise InputError(f"must be at least 1, got {cfg.sampling.max_tokens}", field="--max-tokens")
    if cfg.timeout_s <= 0:
        raise InputError("must be positive", field="--timeout")
    if cfg.client not in CLIENTS:
        raise InputError(f"unknown client {cfg.client!r} (known: {', '.join(CLIENTS)})", field="--client")
    if cfg.rate is not None and not cfg.rate > 0:
        raise InputError(f"must be positive, got {cfg.rate}", field="--rate")
    if cfg.duration_s is not None and not cfg.duration_s > 0:
        raise InputError(f"must be positive, got {cfg.duration_s}", field="--duration")


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
               interrupts: Interrupts | None = None) -> dict[str, Any]:
    if interrupts is not None:
        loop, main = asyncio.get_running_loop(), asyncio.current_task()
        assert main is not None

        def cancel() -> None:
            loop.call_soon_threadsafe(main.cancel)

        interrupts.cancel = cancel
    try:
        return await _run_items(cfg, base_url, model, key, out, cases, progress)
    finally:
        if interrupts is not None:
            interrupts.cancel = None


async def _run_items(cfg: EvalConfig, base_url: str, model: str, key: str, out: Path,
                     cases: list[EvalCase], progress: Progress | None) -> dict[str, Any]:
    evalset_rulesets = load_guardrails(list(cfg.guardrails))
    prompt = load_prompt(cfg.prompt, cfg.style)
    ecfg = EndpointConfig(base_url=base_url, model=model, api_key=key, timeout_s=cfg.timeout_s,
                          concurrency=cfg.concurrency, retry_budget=cfg.retry_budget,
                          client=cfg.client)
    client = make_client(ecfg)
    budget = RetryBudget(len(cases), cfg.retry_budget)
    counts: Counter[str] = Counter(total=len(cases))
    sampler = MetricsSampler(base_url, cfg.metrics_interval_s)
    sampler.start()
    t0 = time.time()
    m0 = time.monotonic()
    deadline = m0 + cfg.duration_s if cfg.duration_s else None
    sent = 0
    with make_executor(cfg.warehouse) as ex, RecordWriter(out / RECORDS) as writer:
        async def handle(case: EvalCase, scheduled: float | None) -> None:
            counts["in_flight"] += 1
            if progress:
                progress("update", dict(counts))
            comp = await complete(client, ecfg, prompt.messages(case.question + cfg.context_suffix),
                                  cfg.sampling, budget)
            counts["in_flight"] -= 1
            rec = score_item(case, comp.text, evalset_rulesets, ex,
                             finish_reason=comp.finish_reason,
                             request_error=None if comp.outcome == "ok" else comp.outcome)
            rec.update(comp.record_fields())
            rec["started"] = comp.started
            rec["concurrency"] = cfg.concurrency
            if scheduled is not None:  # open loop: time spent waiting for an in-flight slot
                rec["scheduled"] = scheduled
                rec["queued_s"] = max(0.0, comp.started - scheduled)
                rec["latency_from_arrival_s"] = (rec["queued_s"] + comp.latency_s
                                                 if comp.latency_s is not None else None)
            rec["whitespace_chars"] = (whitespace_outside_strings(comp.text)
                                       if comp.text is not None else None)
            rec["chars"] = len(comp.text) if comp.text is not None else None
            writer.write(rec)
            counts["done"] += 1
            counts["failed"] += comp.outcome != "ok"
            if progress:
                progress("update", dict(counts))

        def expired() -> bool:
            return deadline is not None and time.monotonic() >= deadline

        async def closed_loop() -> None:
            nonlocal sent
            queue: asyncio.Queue[EvalCase] = asyncio.Queue()
            for c in cases:
                queue.put_nowait(c)

            async def worker() -> None:
                nonlocal sent
                while not expired():
                    try:
                        case = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    sent += 1
                    await handle(case, None)

            await asyncio.gather(*(worker() for _ in range(min(cfg.concurrency, len(cases)) or 1)))

        async def open_loop(rate: float) -> None:
            """Poisson arrivals on a seeded schedule; a full in-flight cap delays, never drops."""
            nonlocal sent
            rng = random.Random(cfg.arrival_seed)
            slots = asyncio.Semaphore(cfg.concurrency)
            tasks: list[asyncio.Task[None]] = []

            async def one(case: EvalCase, scheduled: float) -> None:
                try:
                    await handle(case, scheduled)
                finally:
                    slots.release()

            at = m0
            try:
                for case in cases:
                    at += rng.expovariate(rate)
                    if deadline is not None and at >= deadline:
                        break
                    await asyncio.sleep(max(0.0, at - time.monotonic()))
                    await slots.acquire()
                    sent += 1
                    tasks.append(asyncio.create_task(one(case, t0 + (at - m0))))
                await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()

        try:
            await (open_loop(cfg.rate) if cfg.rate else closed_loop())
        finally:
            await sampler.stop()
            await client.close()
    wall = time.time() - t0
    return {"wall_s": wall, "items_this_session": sent, "not_sent": len(cases) - sent,
            "server_metrics": sampler.result(), "retries_used": budget.used,
            "load": {"mode": "open-loop Poisson" if cfg.rate else "closed loop",
                     "offered_rate": cfg.rate, "max_in_flight": cfg.concurrency,
                     "duration_s": cfg.duration_s, "arrival_seed": cfg.arrival_seed if cfg.rate else None}}


def run_eval(cfg: EvalConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run (or resume) a live evaluation; returns the summary written to ``summary.json``.

    Ctrl-C (SIGINT) cancels in-flight requests, keeps every finished record, stops a local
    server we started and raises ``KeyboardInterrupt``; a second one exits at once.
    """
    with Interrupts() as interrupts:
        return _run_eval(cfg, progress, interrupts)


def _run_eval(cfg: EvalConfig, progress: Progress | None, interrupts: Interrupts) -> dict[str, Any]:
    validate(cfg)
    evalset = load_evalset(cfg.evalset)
    rulesets = load_guardrails(list(cfg.guardrails))
    prompt = load_prompt(cfg.prompt, cfg.style)
    key = api_key(cfg)
    cases = list(evalset.cases[: cfg.limit] if cfg.limit else evalset.cases)

    server = None
    if cfg.endpoint is None:
        from .server import LocalServer, ServerConfig, free_port

        server = LocalServer(ServerConfig(model=cfg.model, port=cfg.port or free_port(),
                                          compact=cfg.compact_server,
                                          max_num_seqs=cfg.max_num_seqs))
        interrupts.kill_server = functools.partial(_kill_group, server)
        server.start()
        base_url, model, key = server.url, server.model_name, "EMPTY"
    else:
        base_url, model = cfg.endpoint, cfg.model
    try:
        facts = asyncio.run(probe_endpoint(base_url, model, key))
        manifest = manifest_base("eval", evalset, rulesets) | {
            "endpoint": base_url if server is None else "local",
            "model": model, "prompt": prompt.name, "prompt_style": prompt.style,
            "prompt_sha256": prompt.sha256, "sampling": cfg.sampling.as_dict(),
            "concurrency": cfg.concurrency, "limit": cfg.limit, "server": facts, "client": cfg.client,
            "load": {"rate": cfg.rate, "duration_s": cfg.duration_s,
                     "arrival_seed": cfg.arrival_seed if cfg.rate else None},
            "context_suffix_chars": len(cfg.context_suffix),
            "context_suffix_sha256": (hashlib.sha256(cfg.context_suffix.encode()).hexdigest()
                                      if cfg.context_suffix else None),
            "server_started_by_us": server is not None,
            "server_args": server.args if server is not None else None,
            "server_startup_s": getattr(server, "startup_s", None),
            "api_key_env": cfg.api_key_env,
        }
        prepare_dir(cfg.out, resume=cfg.resume, force=cfg.force)
        records_path = cfg.out / RECORDS
        if cfg.resume:
            check_resume(cfg.out, manifest)
            repair_tail(records_path)
            done = done_ids(records_path)
            cases = [c for c in cases if c.id not in done]
            manifest["resumed_at"] = time.time()
        manifest["started"] = time.time()
        write_json_atomic(cfg.out / MANIFEST, manifest)
        try:
            session = asyncio.run(_run(cfg, base_url, model, key, cfg.out, cases, progress,
                                       interrupts))
        except asyncio.CancelledError:
            if interrupts.count:
                raise KeyboardInterrupt from None
            raise
    finally:
        if server is not None:
            server.stop()
    return finish_summary(cfg.out, rulesets, session, manifest)


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
    for rec in iter_records(out / RECORDS):
        outcomes[rec.get("outcome") or "n/a"] += 1
        if rec.get("whitespace_chars") is not None:
            ws.append(rec["whitespace_chars"])
            chars.append(rec["chars"])
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
    summary["server_metrics"] = session["server_metrics"]
    summary["retries_used"] = session["retries_used"]
    write_json_atomic(out / SUMMARY, summary)
    manifest["finished"] = time.time()
    write_json_atomic(out / MANIFEST, manifest)
    return summary


__all__ = ["EvalConfig", "run_eval"]


@contextlib.contextmanager
def bound_endpoint(cfg: EvalConfig) -> Iterator[tuple[EvalConfig, dict[str, Any]]]:
    """``cfg`` bound to its endpoint, or to one local vLLM started (and always stopped) here."""
    if cfg.endpoint is not None:
        yield cfg, {"started_by_us": False, "endpoint": cfg.endpoint}
        return
    from .server import LocalServer, ServerConfig, free_port

    server = LocalServer(ServerConfig(model=cfg.model, port=cfg.port or free_port(),
                                      compact=cfg.compact_server, max_num_seqs=cfg.max_num_seqs))
    server.start()
    try:
        yield (replace(cfg, endpoint=server.url, model=server.model_name),
               {"started_by_us": True, "endpoint": "local", "args": server.args[1:],
                "startup_s": server.startup_s, "max_num_seqs": cfg.max_num_seqs, "cpu": True})
    finally:
        server.stop()
