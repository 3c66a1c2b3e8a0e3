"""Serving-path probes: cancellation, /health under prefill, prefix reuse.

* **cancel**: stream a long ``ignore_eos`` generation, disconnect after k tokens, poll ``/metrics``
  until ``num_requests_running`` is 0: that time, and tokens generated after the disconnect.
  Needs an otherwise idle server.
* **health**: ``/health`` latency idle and during long prefills.
* **prefix**: shared vs diverse vs leading-unique prefixes: TTFT, latency, cache hit rate, prefill share.

Each is a :class:`ProbeMode`; every figure carries its sample count; without ``/metrics``
server-side figures are "not observed", never zero."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import aiohttp
from pydantic import Field, model_validator

from nlq2sql.errors import InputError
from nlq2sql.inputs import MAX_REQUESTS
from nlq2sql.load.driver import Mode, ModeSettings, Progress, option, register
from nlq2sql.load.metrics import HistMean, Snapshot, counter_delta, hist_delta, hit_rate, root_url, scrape
from nlq2sql.load.output import write_outputs
from nlq2sql.load.probe_figures import Stream
from nlq2sql.load.probe_results import (
    CancelProbeResult,
    CancelTrial,
    HealthLoop,
    HealthProbeResult,
    PrefillRequests,
    PrefixProbeResult,
    PrefixScenario,
    Unreported,
)
from nlq2sql.records.store import output_dir
from nlq2sql.records.summary_parts import Percentiles
from nlq2sql.records.typed import Typed
from nlq2sql.run.config import EvalConfig, api_key, preflight
from nlq2sql.run.live import bound_endpoint
from nlq2sql.stages.score import spread
from nlq2sql.transport.stream import Accumulator, Completion, StreamEventError, sse_events

__all__ = ["FILLER", "SCENARIOS", "CancelMode", "CancelSettings", "HealthMode", "HealthSettings", "PrefixMode",
           "PrefixSettings", "ProbeMode", "ProbeSettings", "Stream", "Target", "filler", "prefix_messages",
           "stream_chat", "wait_idle"]

_FILLER_TEXT = ("the store sells office furniture and electronics to customers in five regions while "
          "analysts track revenue orders units and average order value by month quarter and year "
          "across online retail partner and phone channels for consumer corporate and small business "
          "segments")
FILLER = _FILLER_TEXT.split(" ")


@dataclass(frozen=True)
class Target:
    base_url: str  # …/v1
    model: str
    key: str = "EMPTY"


def filler(words: int, offset: int = 0) -> str:
    return " ".join(FILLER[(i + offset) % len(FILLER)] for i in range(words))


async def stream_chat(sess: aiohttp.ClientSession, t: Target, body: dict[str, Any],
                      stop_after: int | None = None, timeout_s: float = 300) -> Stream:
    """One streamed chat request over raw SSE; optionally disconnect after ``stop_after`` tokens.

    Returns client TTFT / latency, content chunks received (≈ tokens: vLLM sends one
    token per chunk by default), finish reason and usage when the stream ran to the end.
    """
    body = dict(body, stream=True, stream_options={"include_usage": True})
    out = Stream(status=None, error=None, ttft_s=None, latency_s=None, chunks=0, finish_reason=None, usage=None,
                 disconnected=False, t_start=time.time())
    acc = Accumulator(Completion())
    try:
        async with asyncio.timeout(timeout_s), sess.post(
                t.base_url.rstrip("/") + "/chat/completions", json=body,
                headers={"Authorization": f"Bearer {t.key}"}) as resp:
            out.status = resp.status
            if resp.status != 200:
                out.error = (await resp.text())[:300]
                return out
            async with contextlib.aclosing(sse_events(resp.content)) as events:
                async for obj in events:
                    acc.event(obj)
                    if stop_after is not None and acc.content_chunks >= stop_after:
                        out.disconnected = True
                        out.t_disconnect = time.time()
                        resp.close()  # drop the connection: the server should abort the request
                        break
    except (TimeoutError, aiohttp.ClientError, ValueError, StreamEventError) as exc:
        out.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    comp = acc.end(require_finish=False)
    out.ttft_s, out.latency_s, out.chunks = comp.ttft_s, comp.latency_s, acc.content_chunks
    out.finish_reason, out.usage = comp.finish_reason, acc.usage_raw
    return out


async def wait_idle(sess: aiohttp.ClientSession, t: Target, timeout_s: float = 30) -> Snapshot | None:
    """Snapshot once the server runs and queues nothing (or after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        snap = await scrape(sess, t.base_url)
        if snap is None or (snap.values.get("running", 0) == 0 and snap.values.get("waiting", 0) == 0) \
                or time.monotonic() > deadline:
            return snap
        await asyncio.sleep(0.1)


# -- the probe family ----------------------------------------------------------------------

class ProbeSettings(ModeSettings):
    """Where a probe sends and writes: ``base.endpoint`` (or a local server started for it, with
    ``base.server``), ``base.model``, ``base.api_key_env`` and ``base.out``."""

    base: EvalConfig


P = TypeVar("P", bound=ProbeSettings)
R = TypeVar("R", bound=Typed)


class ProbeMode(Mode[P, R]):
    """A serving-path probe: the endpoint bound (or a local server started and stopped), the
    probe's own requests sent (:meth:`probe`), its result (``created`` stamped when it declares
    one) written as ``STEM.json``/``STEM.md``.  A mode named ``probe-X`` is the command
    ``nlq2sql probe X``, its options generated from the settings' :func:`.driver.option` fields;
    ``asks_questions``: the settings take ``system`` and ``questions`` (an eval set's, as prompted)."""

    asks_questions: ClassVar[bool] = False

    def run(self, settings: P, progress: Progress | None = None) -> R:
        base = settings.base
        output_dir(base.out, create=False)
        key = api_key(base)
        if base.endpoint is not None:
            preflight(base)  # an unusable endpoint is refused before the local-server / probe work
        with bound_endpoint(base) as (bound, _info):
            assert bound.endpoint is not None
            r = self.measure(Target(bound.endpoint, bound.model, key if base.endpoint else "EMPTY"), settings)
        if "created" in type(r).model_fields:
            setattr(r, "created", time.time())  # noqa: B010  (a field the result may declare)
        output_dir(base.out)
        return write_outputs(base.out, self.stem, r, self.render)

    def measure(self, t: Target, settings: P) -> R:
        """The probe's requests, sent (its event loop started and ended here)."""
        return asyncio.run(self.probe(t, settings))

    @abstractmethod
    async def probe(self, t: Target, settings: P) -> R:
        """The probe's measurement against a bound endpoint."""


class _Titled(ProbeMode[P, R]):
    """The package's probes: a title naming the probe and the model, then the probe's report."""

    def render(self, result: R) -> str:
        return "\n".join([f"# {self.stem} probe · {getattr(result, 'model', '')}", "", *self.report(result)]) + "\n"

    @abstractmethod
    def report(self, r: R) -> list[str]:
        """The Markdown lines under the title."""


def _s(v: object, fmt: str = "{:.3f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.1f}"


def _p(p: Percentiles, key: str = "p50", scale: float = 1.0, fmt: str = "{:.3f}") -> str:
    value = getattr(p, key)
    if not p.n or value is None:
        return "not observed"
    return f"{fmt.format(value * scale)} (n={p.n})"


def _h(h: HistMean) -> str:
    """A server histogram's mean with its count; "not observed" without /metrics."""
    if h.note or h.mean is None:
        return f"{h.note or 'not observed'} (n={h.n})"
    return f"{h.mean:.3f} (n={h.n})"


def _opt(v: object) -> str:
    return "n/a" if v is None else str(v)


# -- cancel -----------------------------------------------------------------------------

class CancelSettings(ProbeSettings):
    k_tokens: int = option(16, "--k", "Disconnect after this many streamed tokens.", ge=1)
    max_tokens: int = option(512, "--max-tokens", "The long generation's max_tokens (ignore_eos).", ge=2,
                             le=MAX_REQUESTS)
    trials: int = option(3, "--trials", "Repetitions.", ge=1, le=10_000)
    poll_s: float = Field(0.02, gt=0)
    settle_s: float = Field(0.5, ge=0)

    @model_validator(mode="after")
    def _below_max(self) -> CancelSettings:
        if self.k_tokens >= self.max_tokens:
            raise InputError("need 1 ≤ k < max_tokens and trials ≥ 1", field="--k")
        return self


@register
class CancelMode(_Titled[CancelSettings, CancelProbeResult]):
    """Disconnect a long stream after k tokens: time until running = 0, tokens generated after."""

    name: ClassVar[str] = "probe-cancel"
    stem: ClassVar[str] = "cancel"
    settings_model: ClassVar[type[ModeSettings]] = CancelSettings

    async def probe(self, t: Target, settings: CancelSettings) -> CancelProbeResult:
        k_tokens, max_tokens, trials = settings.k_tokens, settings.max_tokens, settings.trials
        poll_s, settle_s = settings.poll_s, settings.settle_s
        body = {"model": t.model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                "messages": [{"role": "user", "content": "Count from 1 to 10000, one number per line."}]}
        rows = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as sess:
            for _ in range(trials):
                before = await wait_idle(sess, t)
                busy = before is not None and (before.values.get("running", 0) or before.values.get("waiting", 0))
                r = await stream_chat(sess, t, body, stop_after=k_tokens)
                if r.status == 400 and "ignore_eos" in (r.error or ""):
                    body.pop("ignore_eos")
                    r = await stream_chat(sess, t, body, stop_after=k_tokens)
                if before is None:
                    rows.append(_trial(r, busy, to_idle_s=None, polls=0, tokens_after_disconnect=None,
                                       note="/metrics not observed"))
                    continue
                if not r.disconnected or r.t_disconnect is None:
                    rows.append(_trial(r, busy, to_idle_s=None, polls=0, tokens_after_disconnect=None,
                                       note="stream ended before k tokens: nothing to cancel"))
                    continue
                # The zero is seen by a scrape sent at t_sent: running reached 0 after the previous
                # scrape was sent (lower bound) and before this one returned (upper bound).
                t_disc = r.t_disconnect
                polls, to_idle, lower, prev_sent = 0, None, None, t_disc
                deadline = t_disc + 60
                while time.time() < deadline:
                    t_sent = time.time()
                    snap = await scrape(sess, t.base_url)
                    polls += 1
                    if snap is not None and snap.values.get("running", 1) == 0:
                        to_idle = time.time() - t_disc
                        lower = prev_sent - t_disc
                        break
                    prev_sent = t_sent
                    await asyncio.sleep(poll_s)
                await asyncio.sleep(settle_s)
                after = await scrape(sess, t.base_url)
                gen = counter_delta(before, after, "generation_tokens")
                rows.append(_trial(r, busy, to_idle_s=to_idle, to_idle_lower_s=lower, polls=polls,
                                   generated_total=None if gen is None else int(gen),
                                   tokens_after_disconnect=None if gen is None else int(gen) - r.chunks,
                                   would_have_generated=max_tokens - r.chunks))
        idle = [x.to_idle_s for x in rows if x.to_idle_s is not None]
        after_tok = [float(x.tokens_after_disconnect) for x in rows if x.tokens_after_disconnect is not None]
        return CancelProbeResult(kind="probe-cancel", endpoint=t.base_url, model=t.model, probe="cancel",
                                 k_tokens=k_tokens, max_tokens=max_tokens, trials=rows, poll_interval_s=poll_s,
                                 to_idle_s=spread(idle),
                                 tokens_after_disconnect=spread(after_tok),
                                 ignore_eos="ignore_eos" in body)

    def report(self, r: CancelProbeResult) -> list[str]:
        md = [f"Stream {r.max_tokens} tokens (ignore_eos {r.ignore_eos}), disconnect after "
              f"{r.k_tokens} tokens; poll /metrics every {r.poll_interval_s * 1000:.0f} ms until "
              "num_requests_running = 0 (the time is when the scrape that saw 0 returned; running reached "
              "0 after the previous scrape was sent: the lower bound).", "",
              f"- time until running = 0: median {_p(r.to_idle_s)} s, max {_s(r.to_idle_s.p99)} s (p99)",
              f"- tokens generated after the disconnect: median {_p(r.tokens_after_disconnect, fmt='{:.0f}')}",
              "", "| trial | tokens received | running → 0 (s) [lower bound] | polls | generated total "
              "| after disconnect | would have generated | note |", "|---:|---:|---:|---:|---:|---:|---:|---|"]
        for i, x in enumerate(r.trials, 1):
            md.append(f"| {i} | {x.received_tokens} | {_s(x.to_idle_s)} [{_s(x.to_idle_lower_s)}] | {x.polls} "
                      f"| {_opt(x.generated_total)} | {_opt(x.tokens_after_disconnect)} "
                      f"| {_opt(x.would_have_generated)} | {x.note or x.error or ''} |")
        return md


def _trial(r: Stream, busy: object, **measured: Any) -> CancelTrial:
    return CancelTrial(received_tokens=r.chunks, disconnected=r.disconnected, error=r.error,
                       finish_reason=r.finish_reason, server_busy_before=bool(busy), **measured)


# -- health -----------------------------------------------------------------------------

async def _health_loop(sess: aiohttp.ClientSession, url: str, stop: asyncio.Event, interval_s: float,
                       limit: int) -> HealthLoop:
    rtts: list[float] = []
    errors: list[str] = []
    while not stop.is_set() and len(rtts) + len(errors) < limit:
        t0 = time.perf_counter()
        try:
            async with sess.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                await resp.read()
                if resp.status == 200:
                    rtts.append(time.perf_counter() - t0)
                else:
                    errors.append(f"HTTP {resp.status}")
        except (TimeoutError, aiohttp.ClientError) as exc:
            errors.append(type(exc).__name__)
        await asyncio.sleep(interval_s)
    p = spread(rtts)
    return HealthLoop(n=len(rtts) + len(errors), ok=len(rtts), errors=len(errors), error_kinds=sorted(set(errors)),
                      p50_s=p.p50, p95_s=p.p95, max_s=max(rtts) if rtts else None)


class HealthSettings(ProbeSettings):
    prefill_words: int = option(1200, "--prefill-words", "Words in each long prompt (≈ tokens).", ge=1,
                                le=MAX_REQUESTS)
    parallel: int = option(4, "--parallel", "Long prompts sent together.", ge=1, le=1024)
    max_tokens: int = option(16, "--max-tokens", ge=1)
    interval_s: float = option(0.05, "--interval", "Seconds between /health calls.", gt=0)
    idle_count: int = Field(40, ge=1)


@register
class HealthMode(_Titled[HealthSettings, HealthProbeResult]):
    """/health round trip (count, p50, p95, max, errors) idle and while long prefills run."""

    name: ClassVar[str] = "probe-health"
    stem: ClassVar[str] = "health"
    settings_model: ClassVar[type[ModeSettings]] = HealthSettings

    async def probe(self, t: Target, settings: HealthSettings) -> HealthProbeResult:
        prefill_words, parallel, max_tokens = settings.prefill_words, settings.parallel, settings.max_tokens
        interval_s, idle_count = settings.interval_s, settings.idle_count
        url = root_url(t.base_url) + "/health"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as sess:
            await wait_idle(sess, t)
            idle = await _health_loop(sess, url, asyncio.Event(), interval_s, idle_count)
            before = await scrape(sess, t.base_url)
            stop = asyncio.Event()
            loop_task = asyncio.create_task(_health_loop(sess, url, stop, interval_s, 100_000))
            bodies = [{"model": t.model, "max_tokens": max_tokens, "temperature": 0,
                       "messages": [{"role": "user", "content": f"[{uuid.uuid4().hex}] " +
                                     filler(prefill_words, offset=i) + "\nSummarise the text above."}]}
                      for i in range(parallel)]
            t0 = time.perf_counter()
            reqs = await asyncio.gather(*(stream_chat(sess, t, b) for b in bodies))
            load_s = time.perf_counter() - t0
            stop.set()
            busy = await loop_task
            after = await scrape(sess, t.base_url)
        ok = [r for r in reqs if r.status == 200 and not r.error]
        return HealthProbeResult(
            kind="probe-health", endpoint=t.base_url, model=t.model, probe="health",
            interval_s=interval_s, idle=idle, under_prefill=busy,
            prefill_requests=PrefillRequests(
                n=len(reqs), ok=len(ok), parallel=parallel, errors=[r.error for r in reqs if r.error],
                prompt_tokens=spread([float(r.usage["prompt_tokens"]) for r in ok if r.usage]),
                ttft_s=spread([r.ttft_s for r in ok if r.ttft_s is not None]),
                load_wall_s=load_s),
            server_prefill_s=hist_delta(before, after, "prefill"), server_ttft_s=hist_delta(before, after, "ttft"))

    def report(self, r: HealthProbeResult) -> list[str]:
        pr = r.prefill_requests
        md = [f"/health polled every {r.interval_s * 1000:.0f} ms, idle and while {pr.parallel} long "
              f"prompts ({_p(pr.prompt_tokens, fmt='{:.0f}')} prompt tokens, p50) were prefilling "
              f"({pr.ok}/{pr.n} ok, {pr.load_wall_s:.1f} s).", "",
              "| state | count | errors | p50 (ms) | p95 (ms) | max (ms) |", "|---|---:|---:|---:|---:|---:|"]
        for name, h in (("idle", r.idle), ("under prefill", r.under_prefill)):
            md.append(f"| {name} | {h.n} | {h.errors} | {_ms(h.p50_s)} | {_ms(h.p95_s)} | {_ms(h.max_s)} |")
        sp: HistMean = r.server_prefill_s
        md.append(f"\nServer prefill time per request, mean (s): {_h(sp)}; client TTFT p50 (s): {_p(pr.ttft_s)}.")
        return md


# -- prefix -----------------------------------------------------------------------------

SCENARIOS = ("shared", "diverse", "leading-unique")


def prefix_messages(scenario: str, system: str, question: str, pad_words: int) -> list[dict[str, str]]:
    """The eval's system prompt plus padding; diverse = unique text half-way, leading-unique = first."""
    pad = filler(pad_words)
    tag = f"[request {uuid.uuid4().hex}]"
    if scenario == "shared":
        sys_text = f"{system}\nReference notes: {pad}"
    elif scenario == "diverse":
        half = len(pad) // 2
        sys_text = f"{system}\nReference notes: {pad[:half]} {tag} {pad[half:]}"
    elif scenario == "leading-unique":
        sys_text = f"{tag}\n{system}\nReference notes: {pad}"
    else:
        raise ValueError(scenario)
    return [{"role": "system", "content": sys_text}, {"role": "user", "content": question}]


class PrefixSettings(ProbeSettings):
    system: str  # the eval's system prompt
    questions: tuple[str, ...] = Field(min_length=1)
    requests: int = option(8, "--requests", "Sequential requests per scenario.", ge=1, le=MAX_REQUESTS)
    pad_words: int = option(600, "--pad-words", "Padding words appended to the system prompt.", ge=0,
                            le=MAX_REQUESTS)
    max_tokens: int = option(32, "--max-tokens", "max_tokens per request.", ge=1)


@register
class PrefixMode(_Titled[PrefixSettings, PrefixProbeResult]):
    """Shared vs diverse vs leading-unique prefixes: TTFT, prefill share, prefix-cache hit rate."""

    name: ClassVar[str] = "probe-prefix"
    stem: ClassVar[str] = "prefix"
    settings_model: ClassVar[type[ModeSettings]] = PrefixSettings
    asks_questions: ClassVar[bool] = True

    async def probe(self, t: Target, settings: PrefixSettings) -> PrefixProbeResult:
        system, questions, requests = settings.system, list(settings.questions), settings.requests
        pad_words, max_tokens = settings.pad_words, settings.max_tokens
        out = PrefixProbeResult(kind="probe-prefix", endpoint=t.base_url, model=t.model, probe="prefix",
                                requests_per_scenario=requests, pad_words=pad_words, max_tokens=max_tokens,
                                concurrency=1, scenarios={})
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as sess:
            await wait_idle(sess, t)
            # Warm the shared prefix once (not measured), so "shared" is the warm best case.
            await stream_chat(sess, t, {"model": t.model, "max_tokens": 1, "temperature": 0,
                                        "messages": prefix_messages("shared", system, questions[0], pad_words)})
            for sc in SCENARIOS:
                before = await wait_idle(sess, t)
                rows = []
                for i in range(requests):
                    body = {"model": t.model, "max_tokens": max_tokens, "temperature": 0,
                            "messages": prefix_messages(sc, system, questions[i % len(questions)], pad_words)}
                    rows.append(await stream_chat(sess, t, body))
                await asyncio.sleep(0.3)
                after = await scrape(sess, t.base_url)
                ok = [r for r in rows if r.status == 200 and not r.error]
                pre, e2e = hist_delta(before, after, "prefill"), hist_delta(before, after, "e2e")
                cached = [float((r.usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
                          for r in ok if r.usage]
                out.scenarios[sc] = PrefixScenario(
                    n=len(rows), ok=len(ok), errors=[r.error for r in rows if r.error],
                    client_ttft_s=spread([r.ttft_s for r in ok if r.ttft_s is not None]),
                    client_latency_s=spread([r.latency_s for r in ok if r.latency_s is not None]),
                    prompt_tokens=spread([float(r.usage["prompt_tokens"]) for r in ok if r.usage]),
                    cached_tokens_reported=spread(cached) if any(cached) else
                    Unreported(n=len(cached), note="not reported by the server (or zero)"),
                    prefix_cache=hit_rate(before, after),
                    server_ttft_s=hist_delta(before, after, "ttft"),
                    server_prefill_s=pre, server_decode_s=hist_delta(before, after, "decode"),
                    server_queue_s=hist_delta(before, after, "queue"), server_e2e_s=e2e,
                    prefill_share=pre.mean / e2e.mean if pre.mean is not None and e2e.mean else None,
                )
        return out

    def report(self, r: PrefixProbeResult) -> list[str]:
        md = [f"{r.requests_per_scenario} sequential requests per scenario (c=1), max_tokens "
              f"{r.max_tokens}; the eval's system prompt plus {r.pad_words} words of padding. "
              "shared: identical prefix (warmed once); diverse: unique text half-way; leading-unique: "
              "unique text first.", "",
              "| scenario | n ok | prompt tokens p50 | prefix hit rate (hits / queries) | client TTFT p50 (s) "
              "| client e2e p50 (s) | server TTFT mean (s) | server prefill mean (s) | prefill share "
              "of server e2e |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, sc in r.scenarios.items():
            pc = sc.prefix_cache
            hit = f"{pc.rate:.1%} ({pc.hits} / {pc.queries})" if pc.rate is not None else "not observed"
            md.append(f"| {name} | {sc.ok}/{sc.n} | {_p(sc.prompt_tokens, fmt='{:.0f}')} | {hit} "
                      f"| {_p(sc.client_ttft_s)} | {_p(sc.client_latency_s)} "
                      f"| {_h(sc.server_ttft_s)} | {_h(sc.server_prefill_s)} "
                      f"| {_s(sc.prefill_share, '{:.1%}')} |")
        return md
