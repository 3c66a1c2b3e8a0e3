"""One place turns a chat-completions stream into a measured ``Completion``.

Every transport hands its events to an ``Accumulator`` (TTFT, inter-token gaps, usage, finish reason,
chunk counts), so clients and probes cannot disagree on a chunk or a gap. A leaf: imports nothing of nlq2sql."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["Accumulator", "Completion", "HTTPStatusError", "NotAnEventStream", "StreamEventError", "Transport",
           "decode_event", "sse_events"]


@dataclass
class Completion:
    """What one item's call produced, success or not, with how it was measured."""

    outcome: str = "ok"
    text: str | None = None
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None
    attempts: int = 0
    started: float = 0.0
    latency_s: float | None = None
    ttft_s: float | None = None
    itl_mean_s: float | None = None
    itl_max_s: float | None = None
    chunks: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    retry_waits_s: list[float] = field(default_factory=list)
    unsent_retries: int = 0  # re-sends after a pooled connection closed before the write
    #: Per generated token, when logprobs were asked for: (token, logprob, [(alternative,
    #: logprob), …]).  Kept in memory for the confidence read-out, never recorded whole.
    token_logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None


class HTTPStatusError(Exception):
    """A non-200 answer, carrying what :func:`nlq2sql.transport.client.classify` needs."""

    def __init__(self, status: int, body: str, retry_after: str | None) -> None:
        super().__init__(f"HTTP {status}: {body[:200]}")
        self.status, self.body, self.retry_after = status, body, retry_after


class StreamEventError(Exception):
    """An ``{"error": …}`` event inside a 200 stream (vLLM reports mid-stream failures so)."""


class NotAnEventStream(ValueError):
    """HTTP 200 whose body carried no SSE chunk at all (plain bytes, an HTML page): not a
    stream that broke but a wrong answer (a proxy, a portal, not an OpenAI endpoint), which a
    retry would only repeat -- ``malformed_response``, not retried (both clients)."""

    def __init__(self, content_type: str | None) -> None:
        super().__init__(f"HTTP 200 but the body is not an event stream: no SSE data event "
                         f"(Content-Type {content_type or 'missing'!s})")


class Accumulator:
    """Feed one stream's events in order; ``end`` fills the ``Completion`` or raises.

    ``chunks`` counts every event (role, content, finish and usage chunks alike);
    ``content_chunks`` counts the ones carrying text (≈ tokens: vLLM sends one token per
    chunk by default).  TTFT is at the first content chunk; gaps are between content chunks.
    """

    __slots__ = ("out", "t0", "parts", "last", "gap_sum", "gap_max", "gaps", "content_chunks", "usage_raw")

    def __init__(self, out: Completion) -> None:
        self.out = out
        self.t0 = time.perf_counter()
        self.parts: list[str] = []
        self.last: float | None = None
        self.gap_sum, self.gap_max, self.gaps = 0.0, 0.0, 0
        self.content_chunks = 0
        self.usage_raw: dict[str, Any] | None = None

    def chunk(self) -> float:
        """An event arrived; returns its arrival time."""
        self.out.chunks += 1
        return time.perf_counter()

    def usage(self, prompt: int | None, completion: int | None, cached: int | None) -> None:
        self.out.prompt_tokens, self.out.completion_tokens, self.out.cached_tokens = prompt, completion, cached

    def delta(self, text: str | None, now: float) -> None:
        if not text:
            return
        self.content_chunks += 1
        if self.out.ttft_s is None:
            self.out.ttft_s = now - self.t0
        elif self.last is not None:
            gap = now - self.last
            self.gap_sum, self.gap_max, self.gaps = self.gap_sum + gap, max(self.gap_max, gap), self.gaps + 1
        self.last = now
        self.parts.append(text)

    def logprobs(self, entries: JsonValue) -> None:
        """One chunk's ``logprobs.content`` (a list of {token, logprob, top_logprobs})."""
        if not entries:
            return
        if self.out.token_logprobs is None:
            self.out.token_logprobs = []
        for e in entries:
            self.out.token_logprobs.append((str(e["token"]), float(e["logprob"]), [
                (str(t["token"]), float(t["logprob"])) for t in e.get("top_logprobs") or ()]))

    def finish(self, reason: str | None) -> None:
        if reason:
            self.out.finish_reason = reason

    def event(self, obj: JsonValue) -> None:
        """One decoded SSE ``data:`` JSON object (the wire form)."""
        now = self.chunk()
        if not isinstance(obj, dict):
            raise ValueError("stream event is not a JSON object")
        if "error" in obj:
            raise StreamEventError(str(obj["error"])[:300])
        usage = obj.get("usage")
        if usage:
            self.usage_raw = usage
            details = usage.get("prompt_tokens_details") or {}
            self.usage(usage.get("prompt_tokens"), usage.get("completion_tokens"), details.get("cached_tokens"))
        for choice in obj.get("choices") or ():
            self.delta((choice.get("delta") or {}).get("content"), now)
            lp = choice.get("logprobs")
            if lp:
                self.logprobs(lp.get("content"))
            self.finish(choice.get("finish_reason"))

    def end(self, content_type: str | None = None, *, require_finish: bool = True) -> Completion:
        """The stream is over: latency, text, gaps; a stream that never finished is an error."""
        out = self.out
        out.latency_s = time.perf_counter() - self.t0
        out.text = "".join(self.parts)
        out.http_status = 200
        if self.gaps:
            out.itl_mean_s, out.itl_max_s = self.gap_sum / self.gaps, self.gap_max
        if require_finish and out.finish_reason is None:
            if not out.chunks:
                raise NotAnEventStream(content_type)
            raise StreamEventError("stream ended without a finish_reason")
        return out


class Transport(Protocol):
    """One streamed chat request: its events fed to an :class:`Accumulator` on ``out``, raising
    on any failure (``client.complete`` classifies and retries).  Implemented by the SDK path
    (``client._once``) and the plain-aiohttp path (``rawclient.stream_once``)."""

    async def __call__(self, client: Any, kw: dict[str, Any], timeout_s: float, out: Completion) -> None: ...


async def sse_events(body: AsyncIterable[bytes]) -> AsyncGenerator[JsonValue, None]:
    """The decoded JSON of an SSE body's ``data:`` lines, up to ``[DONE]``: the one SSE reader
    (the aiohttp client and the probes; the SDK has its own).

    ``body`` yields bytes cut anywhere -- whole lines or whatever one network read returned
    (``iter_any``): lines are cut here, so a read carrying a whole answer costs one split,
    not one buffered ``readline`` per line.  A last line without its newline still counts.
    """
    held: list[bytes] = []
    async for piece in body:
        if b"\n" not in piece:
            held.append(piece)
            continue
        if held:
            held.append(piece)
            piece = b"".join(held)
            held.clear()
        *lines, rest = piece.split(b"\n")
        if rest:
            held.append(rest)
        for line in lines:
            payload = _payload(line)
            if payload is None:
                continue
            if payload == b"[DONE]":
                return
            yield decode_event(payload)
    payload = _payload(b"".join(held))
    if payload is not None and payload != b"[DONE]":
        yield decode_event(payload)


def _payload(line: bytes) -> bytes | None:
    """A ``data:`` line's payload; None for blank separators, comments and event names."""
    line = line.strip()
    if not line.startswith(b"data:"):
        return None
    return line[5:].strip()


_decode = msgspec.json.Decoder().decode


def decode_event(payload: bytes) -> JsonValue:
    """One event's JSON: msgspec's decoder (~5x ``json.loads`` per chunk, the client's hottest
    call), falling back to ``json.loads`` for what only Python's accepts (``NaN``, ``-Infinity``,
    lone surrogates), so both read the same streams; malformed JSON raises ``ValueError``."""
    try:
        return _decode(payload)
    except msgspec.DecodeError:
        pass
    except RecursionError:  # nested ~1,000 levels deep: malformed for us, never a crash
        raise ValueError("stream event JSON is nested too deeply") from None
    try:
        return json.loads(payload)
    except RecursionError:
        raise ValueError("stream event JSON is nested too deeply") from None
