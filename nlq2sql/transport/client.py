"""Endpoint calls: structured outputs, streamed timings, classified failures, bounded retries.

One client with a connection pool at least as large as the concurrency (the client must never be
the serializer).  Every request is streamed so TTFT and inter-token gaps are measured, not inferred.
Failures become a classified ``outcome``; retryable ones are retried with backoff and jitter,
honouring ``Retry-After``, under a per-run retry budget so a sick server is not stormed."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import random
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import aiohttp

if TYPE_CHECKING:  # the SDK loads only with the sdk client: workers on aiohttp never import it
    from openai import AsyncOpenAI

from nlq2sql.errors import InputError

# Kept only until run/batch_manifest and run/batch_vllm import it from answers.kinds (its home): the
# transport takes a kind's structured-output part as plain sampling fields and knows no kind itself.
from nlq2sql.records.manifest_parts import SamplingPart
from nlq2sql.stages.intent import SCHEMA_MODES
from nlq2sql.transport.rawclient import RawClient, stream_once
from nlq2sql.transport.stream import Accumulator, Completion, HTTPStatusError, StreamEventError, Transport

__all__ = ["ATTEMPT_WATCH", "CLIENTS", "KEEPALIVE_S", "OUTCOMES", "STRUCTURED_MODES", "AttemptWatch", "Client",
           "EndpointConfig", "RetryBudget", "Sampling", "classify", "complete", "make_client",
           "redact", "request_kwargs", "unsent"]

#: outcome → retried?  (the docs list the same table)
OUTCOMES: dict[str, bool] = {
    "ok": False, "http_429": True, "http_5xx": True, "timeout": True, "connection_error": True,
    "stream_error": True, "context_overflow": False, "http_4xx": False, "auth_error": False,
    "model_not_found": False, "malformed_response": False,
}
STRUCTURED_MODES = ("json", "response_format", "regex", "choice", "grammar", "none")
#: aiohttp (the default) = the request the SDK would send, on plain aiohttp: ~4-5x the SDK's
#: req/s on one core (benchmarks/bench_client.py), so the client is not the bottleneck of a
#: fast endpoint; sdk = the official openai SDK (AsyncOpenAI on its aiohttp transport), kept
#: selectable (tests check both send the same body and record the same).
CLIENTS = ("sdk", "aiohttp")
#: An endpoint's client, of either kind (:func:`make_client`); the SDK's is named, not imported, at run time.
Client: TypeAlias = "AsyncOpenAI | RawClient"


@dataclass(frozen=True)
class EndpointConfig:
    """Where and how to call; the API key itself is never stored in records."""

    base_url: str
    model: str
    api_key: str = "EMPTY"
    timeout_s: float = 120.0
    concurrency: int = 8
    retry_budget: float = 0.2  # extra requests allowed, as a fraction of items
    max_attempts: int = 4
    client: str = "aiohttp"  # see CLIENTS


@dataclass(frozen=True)
class Sampling:
    max_tokens: int = 128
    temperature: float = 0.0
    seed: int | None = 0
    structured: str = "json"  # json | response_format | regex | none
    regex: str | None = None
    ignore_eos: bool = False  # vLLM extension: generate exactly max_tokens (fixed output lengths)
    schema: str = "flat"  # flat | branches (intent.SCHEMA_MODES)
    #: The exact JSON Schema sent (from the warehouse's semantic model; set by
    #: ``answers.kinds.bind_sampling``); None: not bound yet (structured JSON refuses to send it).
    schema_json: str | None = None
    choices: tuple[str, ...] | None = None  # structured "choice": the answer is one of these strings
    #: structured "grammar": the xgrammar EBNF sent as ``structured_outputs.grammar`` (the
    #: ``sql-grammar`` answer's, from the warehouse: ``answers.sql.grammar``).
    grammar: str | None = None
    #: Ask for each token's logprob and this many alternatives (None: none asked; the
    #: intent-token confidence of ``--abstain-below`` reads them).
    top_logprobs: int | None = None

    def __post_init__(self) -> None:
        if self.structured not in STRUCTURED_MODES:
            raise InputError(f"unknown structured mode {self.structured!r} (known: {', '.join(STRUCTURED_MODES)})",
                             field="structured")
        if self.structured == "regex" and not self.regex:
            raise InputError("structured mode 'regex' needs a regex", field="regex")
        if self.structured == "choice" and not self.choices:
            raise InputError("structured mode 'choice' needs choices", field="choices")
        if self.structured == "grammar" and not self.grammar:
            raise InputError("structured mode 'grammar' needs a grammar", field="grammar")
        if self.top_logprobs is not None and not 1 <= self.top_logprobs <= 20:
            raise InputError(f"top_logprobs must be between 1 and 20 (vLLM's default cap), got {self.top_logprobs}",
                             field="top_logprobs")
        if self.schema not in SCHEMA_MODES:
            raise InputError(f"unknown schema mode {self.schema!r} (known: {', '.join(SCHEMA_MODES)})",
                             field="schema")

    def recorded(self) -> SamplingPart:
        """As a manifest records it: what is off is left out; a grammar as its text and sha256."""
        part = SamplingPart(max_tokens=self.max_tokens, temperature=self.temperature, seed=self.seed,
                            structured=self.structured, regex=self.regex)
        if self.ignore_eos:
            part.ignore_eos = True
        if self.top_logprobs is not None:
            part.top_logprobs = self.top_logprobs
        if self.schema != "flat" or self.schema_json is not None:
            part.schema_mode, part.schema_text = self.schema, self.schema_json
        if self.grammar is not None:
            part.grammar, part.grammar_sha256 = self.grammar, hashlib.sha256(self.grammar.encode()).hexdigest()
        return part

    def json_schema(self) -> dict[str, Any]:
        if self.schema_json is None:  # no default warehouse to take one from (bind_sampling sets it)
            raise ValueError("structured JSON needs the warehouse's schema: bind the sampling first")
        return json.loads(self.schema_json)  # type: ignore[no-any-return]


class RetryBudget:
    """A per-run cap on retries: total requests ≤ items × (1 + fraction).

    ``items`` is every item of the *run* and ``used`` the retries recorded items took: a resumed run
    continues the same budget, as an uninterrupted one would (``live`` keeps the total in the manifest)."""

    def __init__(self, items: int, fraction: float, *, used: int = 0, total: int | None = None) -> None:
        self.total = self.allowed(items, fraction) if total is None else total
        self.used = used
        self.left = max(0, self.total - used)

    @staticmethod
    def allowed(items: int, fraction: float) -> int:
        return max(1, int(items * fraction)) if fraction > 0 else 0

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        self.used += 1
        return True


#: Told of every attempt a request makes (one sent to the server: a free re-send of a request
#: the server never saw is not one): ``(outcome, http_status, error, sent_at, took_s)``; it
#: returns False to stop retrying there.  A replica pool sets it around one item's call on one
#: replica (``pool.Pool.call``): it logs the attempt against the replica, feeds the replica's
#: circuit breaker, and stops retries on a replica whose breaker has opened (the item fails over
#: instead).  A context variable, so every request path (one request, the planner's two, the
#: self-consistency samples) reports without being handed it; unset, nothing changes.
AttemptWatch = Callable[[str, int | None, str | None, float, float], bool]
ATTEMPT_WATCH: ContextVar[AttemptWatch | None] = ContextVar("nlq2sql_attempt_watch", default=None)


def make_client(cfg: EndpointConfig) -> Client:
    """Client with a pool sized to the concurrency; SDK retries off (ours count)."""
    connector_limit = max(100, cfg.concurrency * 2)
    if cfg.client == "aiohttp":
        return RawClient(cfg.base_url, cfg.api_key, connector_limit, KEEPALIVE_S, cfg.timeout_s)
    from openai import AsyncOpenAI, DefaultAioHttpClient

    http = DefaultAioHttpClient(timeout=cfg.timeout_s, limits=_limits(connector_limit))
    return AsyncOpenAI(base_url=cfg.base_url, api_key=cfg.api_key, max_retries=0,
                       timeout=cfg.timeout_s, http_client=http)


#: Idle pooled connections are dropped after this long.  It must stay below the server's own
#: keep-alive (uvicorn in vLLM: 5 s); at equal values a connection the server is closing gets
#: reused and the write fails ("Cannot write to closing transport").
KEEPALIVE_S = 2.0


def _limits(n: int) -> Any:

    import httpx

    return httpx.Limits(max_connections=n, max_keepalive_connections=n, keepalive_expiry=KEEPALIVE_S)


def unsent(exc: BaseException, out: Completion) -> bool:
    """True when a pooled connection was closing before our request was written.

    The server never saw the request, so retrying it at once is safe and is not a retry in
    the budget's sense (nothing was re-done on the server).
    """
    if out.chunks or out.ttft_s is not None:
        return False
    return any(isinstance(e, aiohttp.ClientConnectionResetError) and "closing transport" in str(e)
               for e in _causes(exc))


@functools.lru_cache(maxsize=64)
def _extra_body(s: Sampling) -> dict[str, Any]:
    """vLLM's extensions for one sampling setting, built once: the same object every request
    (read-only), so the aiohttp client can encode the schema once per run, not per request."""
    extra: dict[str, Any] = {}
    if s.structured == "json":
        extra["structured_outputs"] = {"json": s.json_schema()}
    elif s.structured == "regex":
        extra["structured_outputs"] = {"regex": s.regex}
    elif s.structured == "choice":
        extra["structured_outputs"] = {"choice": list(s.choices or ())}
    elif s.structured == "grammar":
        extra["structured_outputs"] = {"grammar": s.grammar}
    if s.ignore_eos:
        extra["ignore_eos"] = True
    return extra


def request_kwargs(model: str, messages: list[dict[str, str]], s: Sampling) -> dict[str, Any]:
    """Chat-completions arguments carrying the intent contract the way the server expects."""
    kw: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": s.max_tokens,
                          "temperature": s.temperature, "stream": True,
                          "stream_options": {"include_usage": True}}
    if s.seed is not None:
        kw["seed"] = s.seed
    if s.top_logprobs is not None:
        kw["logprobs"], kw["top_logprobs"] = True, s.top_logprobs
    if s.structured == "response_format":
        kw["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "intent", "schema": s.json_schema(), "strict": True}}
    extra = _extra_body(s)
    if extra:
        kw["extra_body"] = extra
    return kw


def redact(text: str, secret: str | None) -> str:
    """Remove the API key from text that may echo it (some servers quote a refused key)."""
    if secret and secret != "EMPTY" and len(secret) >= 4:
        text = text.replace(secret, "[redacted]")
    return text


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def classify(exc: BaseException) -> tuple[str, int | None, float | None]:
    """Exception → (outcome, HTTP status, Retry-After seconds)."""
    oa = sys.modules.get("openai")  # an SDK error can only exist once the SDK is loaded

    def sdk(*names: str) -> tuple[type, ...]:
        return tuple(getattr(oa, n) for n in names) if oa is not None else ()
    if isinstance(exc, (HTTPStatusError, *sdk("APIStatusError"))):
        if isinstance(exc, HTTPStatusError):
            code, ra = exc.status, exc.retry_after
        else:
            e: Any = exc  # the SDK's APIStatusError
            code, ra = e.status_code, (e.response.headers.get("retry-after") if e.response is not None else None)
        retry_after = None
        if ra:
            try:
                retry_after = float(ra)
            except ValueError:
                retry_after = None
        if code == 429:
            return "http_429", code, retry_after
        if code >= 500:
            return "http_5xx", code, retry_after
        if code in (401, 403):
            return "auth_error", code, None
        if code == 404:
            return "model_not_found", code, None
        text = str(exc).lower()
        if code == 400 and ("maximum context length" in text or "context length" in text
                            or "too long" in text):
            return "context_overflow", code, None
        return "http_4xx", code, None
    if isinstance(exc, (asyncio.TimeoutError, *sdk("APITimeoutError"))):
        # The aiohttp transport reports a refused connection as ConnectTimeout: not a timeout.
        if any(isinstance(e, (aiohttp.ClientConnectorError, ConnectionError)) for e in _causes(exc)):
            return "connection_error", None, None
        return "timeout", None, None
    if isinstance(exc, sdk("APIConnectionError")):
        return "connection_error", None, None
    if isinstance(exc, StreamEventError | aiohttp.ClientPayloadError):
        return "stream_error", None, None
    if isinstance(exc, aiohttp.ClientConnectionError | ConnectionError):
        return "connection_error", None, None
    if isinstance(exc, (json.JSONDecodeError, *sdk("APIResponseValidationError"), ValueError,
                        KeyError, TypeError, AttributeError)):
        return "malformed_response", None, None
    if isinstance(exc, (aiohttp.ClientError, *sdk("APIError"), ConnectionError)):
        return "stream_error", None, None
    return "stream_error", None, None


async def _once(client: AsyncOpenAI, kw: dict[str, Any], timeout_s: float, out: Completion) -> None:
    """The SDK transport: its typed chunks fed to the one accumulator."""
    acc = Accumulator(out)
    async with asyncio.timeout(timeout_s):
        stream = await client.chat.completions.create(**kw)
        try:
            async for chunk in stream:
                now = acc.chunk()
                if chunk.usage is not None:
                    details = getattr(chunk.usage, "prompt_tokens_details", None)
                    acc.usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens,
                              getattr(details, "cached_tokens", None) if details else None)
                for choice in chunk.choices:
                    acc.delta(choice.delta.content if choice.delta is not None else None, now)
                    lp = getattr(choice, "logprobs", None)
                    if lp is not None and lp.content:
                        acc.logprobs([e.model_dump() for e in lp.content])
                    acc.finish(choice.finish_reason)
        finally:
            await stream.close()
    response = getattr(stream, "response", None)
    acc.end(response.headers.get("content-type") if response is not None else None)


async def complete(client: Client, cfg: EndpointConfig, messages: list[dict[str, str]],
                   sampling: Sampling, budget: RetryBudget,
                   fail_fast: frozenset[str] = frozenset()) -> Completion:
    """One item's call with classified failures and bounded, jittered retries.

    ``fail_fast``: outcomes returned at once, not retried here (a replica pool fails over
    to another server instead of retrying a dead or hung one).  Each attempt is reported to
    ``ATTEMPT_WATCH`` when one is set; its False ends the retries here (the replica's circuit
    breaker opened: the pool fails the item over instead)."""
    kw = request_kwargs(cfg.model, messages, sampling)
    result = Completion(started=time.time())
    watch = ATTEMPT_WATCH.get()
    keep = True
    free_retry = True
    attempt = 0
    while attempt < cfg.max_attempts:
        attempt += 1
        out = Completion(started=result.started, attempts=attempt,
                         retry_waits_s=result.retry_waits_s, unsent_retries=result.unsent_retries)
        sent_at = time.time()
        try:
            send: Transport = stream_once if isinstance(client, RawClient) else _once
            await send(client, kw, cfg.timeout_s, out)
            if watch is not None:
                watch("ok", out.http_status, None, sent_at, time.time() - sent_at)
            return out
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 — every failure becomes an outcome
            outcome, code, retry_after = classify(exc)
            out.outcome, out.http_status = outcome, code
            root = _causes(exc)[-1]
            detail = str(exc) or (f"request not complete within {cfg.timeout_s:g} s"
                                  if outcome == "timeout" else "")
            text = f"{type(exc).__name__}: {detail}" + (
                f" (cause: {type(root).__name__}: {root})"
                if root is not exc and not isinstance(root, asyncio.CancelledError) else "")
            out.error = redact(text, cfg.api_key)[:300]
            out.text = None
            result = out
            if free_retry and unsent(exc, out):
                free_retry = False
                attempt -= 1
                result.unsent_retries += 1
                continue
            if watch is not None:
                keep = watch(outcome, code, out.error, sent_at, time.time() - sent_at)
        if not OUTCOMES.get(result.outcome, False) or attempt == cfg.max_attempts \
                or result.outcome in fail_fast or not keep:
            break
        if not budget.take():
            result.error = (result.error or "") + " (retry budget exhausted)"
            break
        wait = min(20.0, 0.5 * 2 ** (attempt - 1)) * (0.5 + random.random())
        if retry_after is not None:
            wait = max(wait, min(retry_after, 60.0))
        result.retry_waits_s.append(round(wait, 3))
        await asyncio.sleep(wait)
    return result
