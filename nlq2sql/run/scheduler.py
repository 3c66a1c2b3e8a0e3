"""When items are sent: a closed loop (a fixed number in flight) or an open loop (arrivals).

Both return how many items they sent: past a ``--duration`` deadline the rest are *not sent*, never
counted as failures."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

__all__ = ["closed_loop", "open_loop"]

C = TypeVar("C")
Handle = Callable[[C, "float | None"], Awaitable[None]]


async def closed_loop(cases: Sequence[C], concurrency: int, handle: Handle[C],
                      deadline: float | None = None) -> int:
    """``concurrency`` lanes each take the next item as soon as their last one ends."""
    queue: asyncio.Queue[C] = asyncio.Queue()
    for c in cases:
        queue.put_nowait(c)
    sent = 0

    async def lane() -> None:
        nonlocal sent
        while deadline is None or time.monotonic() < deadline:
            try:
                case = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            sent += 1
            await handle(case, None)

    await asyncio.gather(*(lane() for _ in range(min(concurrency, len(cases)) or 1)))
    return sent


async def open_loop(cases: Sequence[C], rate: float, concurrency: int, handle: Handle[C], *,
                    seed: int = 0, deadline: float | None = None) -> int:
    """Poisson arrivals on a seeded schedule; a full in-flight cap delays, never drops.

    ``handle`` gets the arrival's wall-clock time, so the queueing delay is measured."""
    rng = random.Random(seed)
    slots = asyncio.Semaphore(concurrency)
    tasks: list[asyncio.Task[None]] = []
    t0, m0 = time.time(), time.monotonic()

    async def one(case: C, scheduled: float) -> None:
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
            tasks.append(asyncio.create_task(one(case, t0 + (at - m0))))
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
    return len(tasks)
