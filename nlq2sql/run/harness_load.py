"""Is the harness itself the bottleneck?  Event-loop lag and the client's own CPU time.

A client that cannot keep up measures itself, not the server: requests start late, and
TTFT and latency include time spent waiting for the event loop.  Every live run records,
per client process, its CPU time over the session (as a share of one core) and how late a
timer that should fire every ``interval_s`` actually fires (the loop lag).  The summary says
*saturated* when the lag's p95 or the CPU share crosses a stated threshold, so a figure
measured by a starved client is flagged instead of being believed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from nlq2sql.stages.score import percentiles

__all__ = ["CPU_SHARE_LIMIT", "LAG_P95_LIMIT_MS", "STARVED_SHARE_BELOW", "HarnessMonitor", "HarnessResult",
           "ProcessShare", "Thresholds", "judge", "merge"]

#: Thresholds for "saturated" (documented in docs/failures.md and the summary itself).
LAG_P95_LIMIT_MS = 50.0
CPU_SHARE_LIMIT = 0.9
#: A lagging loop in a client using less than this share of a core waited for a core others held.
STARVED_SHARE_BELOW = 0.5
#: Lag samples kept (a uniform reservoir): memory stays flat for a run of any length.
RESERVOIR = 5000


class ProcessShare(msgspec.Struct):
    """One client process of several: its CPU share and loop-lag p95."""

    cpu_share_of_core: float | None
    loop_lag_p95_ms: float | None


class Thresholds(msgspec.Struct):
    """The thresholds a verdict was judged against (stated beside it)."""

    loop_lag_p95_ms: float = LAG_P95_LIMIT_MS
    cpu_share_of_core: float = CPU_SHARE_LIMIT
    starved_share_below: float = STARVED_SHARE_BELOW


class HarnessResult(msgspec.Struct, kw_only=True):
    """The client's load over a session (one process, or the busiest of several) and the verdict
    (:func:`judge`); a msgspec Struct so that it crosses to the driver from a worker process or
    Ray actor as it is, and is written (the summary's ``harness``) with its keys in this order."""

    processes: int
    cpu_s: float
    wall_s: float
    cpu_share_of_core: float | None
    loop_lag_ms: dict[str, float | int | None]  # percentiles (their key order varies), n, max
    interval_s: float
    per_process: list[ProcessShare] | UnsetType = UNSET  # several processes only
    saturated: bool = False
    why: list[str] = msgspec.field(default_factory=list)
    starved: bool = False
    starved_why: list[str] = msgspec.field(default_factory=list)
    thresholds: Thresholds = msgspec.field(default_factory=Thresholds)

    def written(self) -> Any:
        """As the summary holds it (the JSON edge)."""
        return msgspec.to_builtins(self)


class HarnessMonitor:
    def __init__(self, interval_s: float = 0.1, seed: int = 0) -> None:
        self.interval_s = interval_s
        self.lags_ms: list[float] = []
        self.n = 0
        self.max_ms = 0.0
        self._rng = random.Random(seed)
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = self._wall0 = 0.0
        self._cpu1: float | None = None
        self._wall1: float | None = None

    def start(self) -> None:
        self._cpu0, self._wall0 = time.process_time(), time.monotonic()
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(self.interval_s)
            lag = max(0.0, (time.monotonic() - t - self.interval_s) * 1000.0)
            self.n += 1
            self.max_ms = max(self.max_ms, lag)
            if len(self.lags_ms) < RESERVOIR:
                self.lags_ms.append(lag)
            else:
                j = self._rng.randrange(self.n)
                if j < RESERVOIR:
                    self.lags_ms[j] = lag

    async def stop(self) -> None:
        self._cpu1, self._wall1 = time.process_time(), time.monotonic()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def result(self) -> HarnessResult:
        cpu = (self._cpu1 if self._cpu1 is not None else time.process_time()) - self._cpu0
        wall = (self._wall1 if self._wall1 is not None else time.monotonic()) - self._wall0
        return judge(HarnessResult(processes=1, cpu_s=cpu, wall_s=wall,
                                   cpu_share_of_core=cpu / wall if wall > 0 else None,
                                   loop_lag_ms=dict(percentiles(self.lags_ms), n=self.n, max=self.max_ms),
                                   interval_s=self.interval_s))


def judge(r: HarnessResult) -> HarnessResult:
    """Add the verdict against the stated thresholds: *saturated* (the client's own work is the
    bottleneck: its CPU share is high, or its loop lags while it is busy) or *starved* (its loop
    lags while it uses little CPU: other processes — a local CPU server — held the cores, so
    its timings include waiting for a core, but more client capacity would not help)."""
    why, starved_why = [], []
    p95 = r.loop_lag_ms.get("p95")
    share = r.cpu_share_of_core
    if p95 is not None and p95 > LAG_P95_LIMIT_MS:
        lag = f"event-loop lag p95 {p95:.0f} ms > {LAG_P95_LIMIT_MS:.0f} ms"
        if share is not None and share < STARVED_SHARE_BELOW:
            starved_why.append(f"{lag} while the client used {share:.0%} of a core")
        else:
            why.append(lag)
    if share is not None and share >= CPU_SHARE_LIMIT:
        why.append(f"client CPU {share:.0%} of a core ≥ {CPU_SHARE_LIMIT:.0%}")
    return msgspec.structs.replace(r, saturated=bool(why), why=why, starved=bool(starved_why) and not why,
                                   starved_why=starved_why, thresholds=Thresholds())


def merge(results: list[HarnessResult | None]) -> HarnessResult | None:
    """Several client processes: the busiest one decides (each is one event loop on one core)."""
    seen = [r for r in results if r is not None]
    if not seen:
        return None
    worst = max(seen, key=lambda r: (r.loop_lag_ms.get("p95") or 0.0, r.cpu_share_of_core or 0.0))
    return judge(msgspec.structs.replace(
        worst, processes=len(seen), cpu_s=sum(r.cpu_s for r in seen),
        per_process=[ProcessShare(r.cpu_share_of_core, r.loop_lag_ms.get("p95")) for r in seen]))
