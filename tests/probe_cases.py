"""The probes' files on fixture inputs (cases of ``tests/unit/load/test_load_golden.py``).

The probes talk to a live server, so their golden cases replace the network with scripted
answers: ``stream_chat`` (a streamed request's figures), ``scrape`` (a ``/metrics`` snapshot,
or none: "not observed") and the ``/health`` loop's session; time is fixed.  Each probe then
runs as ``probe cancel|health|prefix`` does (``run_mode``; the endpoint's binding is scripted
too) and its ``STEM.json``/``STEM.md`` are pinned, with and without ``/metrics``; the
``/health`` loop is pinned on its own too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nlq2sql.load import probes
from nlq2sql.load.metrics import HISTOGRAMS, Snapshot
from nlq2sql.load.modes import run_mode
from nlq2sql.run.config import EvalConfig

__all__ = ["probe_cases"]


def _snapshots(observed: bool) -> Any:
    k = 0

    async def scrape(_sess: Any, _url: str) -> Snapshot | None:
        nonlocal k
        k += 1
        if not observed:
            return None
        return Snapshot(values={"running": 0 if k % 3 == 2 else 1, "waiting": 0, "generation_tokens": 37.0 * k,
                                "prefix_cache_queries": 1000.0 * k, "prefix_cache_hits": 600.0 * k + (k % 2)},
                        hist={n: (0.125 * k * (i + 1), 2.0 * k) for i, n in enumerate(HISTOGRAMS)})
    return scrape


def _streams() -> Any:
    k = 0

    async def stream_chat(_sess: Any, _t: Any, body: dict[str, Any], stop_after: int | None = None,
                          timeout_s: float = 300) -> Any:
        nonlocal k
        k += 1
        await asyncio.sleep(0)
        if k == 1 and body.get("ignore_eos"):
            return _reply(status=400, error="ignore_eos is not supported", chunks=0)
        if stop_after is not None and k % 4 == 0:  # the stream ended before k tokens
            return _reply(chunks=stop_after - 1, finish_reason="stop")
        usage = {"prompt_tokens": 100 + 7 * k, "completion_tokens": 8,
                 **({"prompt_tokens_details": {"cached_tokens": 64 * (k % 3)}} if k % 2 else {})}
        return _reply(chunks=stop_after or 8, ttft_s=0.05 * k, latency_s=0.2 + 0.01 * k,
                      finish_reason=None if stop_after else "length", usage=None if stop_after else usage,
                      disconnected=stop_after is not None)
    return stream_chat


def _reply(status: int = 200, error: str | None = None, chunks: int = 0, ttft_s: float | None = None,
           latency_s: float | None = None, finish_reason: str | None = None, usage: dict[str, Any] | None = None,
           disconnected: bool = False) -> Any:
    out: dict[str, Any] = {"status": status, "error": error, "ttft_s": ttft_s, "latency_s": latency_s,
                           "chunks": chunks, "finish_reason": finish_reason, "usage": usage,
                           "disconnected": disconnected, "t_start": time.time()}
    if disconnected:
        out["t_disconnect"] = time.time() - 1.5
    reply = getattr(probes, "Stream", None)
    return reply.from_json(out) if reply is not None else out


class _Resp:
    def __init__(self, status: int) -> None:
        self.status = status

    async def __aenter__(self) -> _Resp:
        if self.status == 0:
            raise TimeoutError
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def read(self) -> bytes:
        return b"ok"


class _Session:
    """``/health`` answers: 200 mostly, a 503 and a timeout now and then."""

    def __init__(self) -> None:
        self.k = 0

    def get(self, _url: str, timeout: Any = None) -> _Resp:
        self.k += 1
        return _Resp(503 if self.k % 7 == 3 else 0 if self.k % 11 == 5 else 200)


def probe_cases(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """(name, text) of every probe's files on scripted answers; call with ``time.time`` fixed."""
    clock = iter(range(10**6))
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock) * 0.003)
    real_sleep = asyncio.sleep

    async def no_wait(_s: float) -> None:
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", no_wait)
    real_loop = probes._health_loop
    loop = asyncio.run(real_loop(_Session(), "http://x/health", asyncio.Event(), 0.05, 40))  # type: ignore[arg-type]
    yield "probe:health-loop", repr(loop.to_json() if hasattr(loop, "to_json") else loop)

    async def health_loop(_sess: Any, url: str, stop: asyncio.Event, interval_s: float, limit: int) -> Any:
        return await real_loop(_Session(), url, stop, interval_s, min(limit, 25))  # type: ignore[arg-type]

    monkeypatch.setattr(probes, "_health_loop", health_loop)

    @contextlib.contextmanager
    def bound(base: EvalConfig) -> Iterator[tuple[EvalConfig, None]]:
        yield base, None

    monkeypatch.setattr(probes, "preflight", lambda _base: "EMPTY")  # the endpoint is scripted, not reached
    monkeypatch.setattr(probes, "bound_endpoint", bound)
    for observed in (True, False):
        tag = "metrics" if observed else "no-metrics"
        for name, kw in (("cancel", {"k_tokens": 4, "max_tokens": 64, "trials": 5}),
                         ("health", {"prefill_words": 40, "parallel": 3}),
                         ("prefix", {"system": "answer", "questions": ["revenue by region", "units by month"],
                                     "requests": 3, "pad_words": 30, "max_tokens": 8})):
            monkeypatch.setattr(probes, "scrape", _snapshots(observed))
            monkeypatch.setattr(probes, "stream_chat", _streams())
            out = Path(f"probe-{name}-{tag}")
            run_mode(f"probe-{name}", {"base": EvalConfig(endpoint="http://127.0.0.1:9/v1", model="golden-model",
                                                          out=out), **kw})
            yield f"probe:{name}-{tag}.json", (out / f"{name}.json").read_text()
            yield f"probe:{name}-{tag}.md", (out / f"{name}.md").read_text()
