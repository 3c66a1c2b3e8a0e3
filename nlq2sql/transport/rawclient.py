"""A plain-aiohttp chat-completions stream: the same wire request as the SDK path, less CPU.

The SDK's per-chunk CPU caps a client on one core below what ``vllm bench serve`` drives, and a
harness slower than its server cannot measure it. ``--client aiohttp`` sends the *same* JSON body
(``extra_body`` merged at the top level) and reads SSE lines with ``stream.sse_events``; outcomes,
retries and records are shared with the SDK path."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from yarl import URL

from nlq2sql.transport.stream import (
    Accumulator,
    Completion,
    HTTPStatusError,
    NotAnEventStream,
    StreamEventError,
    sse_events,
)

__all__ = ["HTTPStatusError", "NotAnEventStream", "RawClient", "StreamEventError", "body_of", "stream_once"]


class RawClient:
    """One aiohttp session with a pool sized like the SDK path's; created inside the loop."""

    def __init__(self, base_url: str, api_key: str, limit: int, keepalive_s: float, timeout_s: float) -> None:
        # Parsed once: aiohttp re-parses a str URL (and its host) on every request.
        self.url = URL(base_url.rstrip("/") + "/chat/completions")
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key and api_key != "EMPTY":
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._args = (limit, keepalive_s, timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            limit, keepalive_s, timeout_s = self._args
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=limit, keepalive_timeout=keepalive_s),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout_s))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


_ENCODED: dict[int, tuple[object, bytes]] = {}


def body_of(kw: dict[str, Any]) -> bytes:
    """SDK-style keyword arguments → the JSON body the SDK would send.

    ``extra_body`` (the intent schema: most of the bytes) is the same object on every request
    of a run, so its encoding is cached by identity and spliced after the per-request part.
    """
    head = json.dumps({k: v for k, v in kw.items() if k != "extra_body"}, separators=(",", ":")).encode()
    extra = kw.get("extra_body")
    if not extra:
        return head
    hit = _ENCODED.get(id(extra))
    if hit is None or hit[0] is not extra:
        if len(_ENCODED) > 256:
            _ENCODED.clear()
        hit = _ENCODED[id(extra)] = (extra, json.dumps(extra, separators=(",", ":")).encode())
    return head[:-1] + b"," + hit[1][1:]


async def stream_once(client: RawClient, kw: dict[str, Any], timeout_s: float, out: Completion) -> None:
    """One streamed request; its SSE events fed to the one accumulator (raises on any failure)."""
    acc = Accumulator(out)
    async with asyncio.timeout(timeout_s):
        body = aiohttp.payload.BytesPayload(body_of(kw), content_type="application/json")
        async with client.session().post(client.url, data=body, headers=client.headers) as resp:
            if resp.status != 200:
                raise HTTPStatusError(resp.status, await resp.text(), resp.headers.get("Retry-After"))
            content_type = resp.headers.get("Content-Type")
            async for obj in sse_events(resp.content.iter_any()):
                acc.event(obj)
    acc.end(content_type)
