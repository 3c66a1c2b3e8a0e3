"""Is the harness itself the bottleneck? Event-loop lag and the client's own CPU time.

A starved client measures itself, not the server. Every live run records per client process its CPU
share of one core and how late a timer due every ``interval_s`` fires; the summary says *saturated*
when the lag's p95 or the CPU share crosses a stated threshold."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

from nlq2sql.records.run_parts import Harness, HarnessThresholds, LoopLag, ProcessLoad
from nlq2sql.stages.score import spread

__all__ = ["CPU_SHARE_LIMIT", "LAG_P95_LIMIT_MS", "STARVED_SHARE_BELOW", "HarnessMonitor", "judged", "merge"]

#: Thresholds for "saturated" (documented in docs/failures.md and the summary itself).
LAG_P95_LIMIT_MS = 50.0
CPU_SHARE_LIMIT = 0.9
#: A lagging loop in a client using less than this share of a core waited for a core others held.
STARVED_SHARE_BELOW = 0.5
#: Lag samples kept (a uniform reservoir): memory stays flat for a run of any length.
RESERVOIR = 5000


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

    def result(self) -> Harness:
        cpu = (self._cpu1 if self._cpu1 is not None else time.process_time()) - self._cpu0
        wall = (self._wall1 if self._wall1 is not None else time.monotonic()) - self._wall0
        p = spread(self.lags_ms)  # (of the samples kept; the count and the worst are of all)
        lag = LoopLag(n=self.n, mean=p.mean, p50=p.p50, p95=p.p95, p99=p.p99, max=self.max_ms)
        return judged(processes=1, cpu_s=cpu, wall_s=wall, cpu_share_of_core=cpu / wall if wall > 0 else None,
                      loop_lag_ms=lag, interval_s=self.interval_s)


def judged(*, processes: int, cpu_s: float, wall_s: float, cpu_share_of_core: float | None, loop_lag_ms: LoopLag,
           interval_s: float, per_process: list[ProcessLoad] | None = None) -> Harness:
    """The client's load with the verdict against the stated thresholds: *saturated* (the client's
    own work is the bottleneck: its CPU share is high, or its loop lags while it is busy) or
    *starved* (its loop lags while it uses little CPU: other processes — a local CPU server — held
    the cores, so its timings include waiting for a core, but more client capacity would not help)."""
    why, starved_why = [], []
    p95 = loop_lag_ms.p95
    share = cpu_share_of_core
    if p95 is not None and p95 > LAG_P95_LIMIT_MS:
        lag = f"event-loop lag p95 {p95:.0f} ms > {LAG_P95_LIMIT_MS:.0f} ms"
        if share is not None and share < STARVED_SHARE_BELOW:
            starved_why.append(f"{lag} while the client used {share:.0%} of a core")
        else:
            why.append(lag)
    if share is not None and share >= CPU_SHARE_LIMIT:
        why.append(f"client CPU {share:.0%} of a core ≥ {CPU_SHARE_LIMIT:.0%}")
    h = Harness(processes=processes, cpu_s=cpu_s, wall_s=wall_s, cpu_share_of_core=share, loop_lag_ms=loop_lag_ms,
                interval_s=interval_s, saturated=bool(why), why=why, starved=bool(starved_why) and not why,
                starved_why=starved_why,
                thresholds=HarnessThresholds(loop_lag_p95_ms=LAG_P95_LIMIT_MS, cpu_share_of_core=CPU_SHARE_LIMIT,
                                             starved_share_below=STARVED_SHARE_BELOW))
    if per_process is not None:  # several processes only (a key never set stays absent)
        h.per_process = per_process
    return h


def merge(results: list[Harness | None]) -> Harness | None:
    """Several client processes: the busiest one decides (each is one event loop on one core)."""
    seen = [r for r in results if r is not None]
    if not seen:
        return None
    worst = max(seen, key=lambda r: (r.loop_lag_ms.p95 or 0.0, r.cpu_share_of_core or 0.0))
    return judged(processes=len(seen), cpu_s=sum(r.cpu_s for r in seen), wall_s=worst.wall_s,
                  cpu_share_of_core=worst.cpu_share_of_core, loop_lag_ms=worst.loop_lag_ms,
                  interval_s=worst.interval_s,
                  per_process=[ProcessLoad(cpu_share_of_core=r.cpu_share_of_core, loop_lag_p95_ms=r.loop_lag_ms.p95)
                               for r in seen])
