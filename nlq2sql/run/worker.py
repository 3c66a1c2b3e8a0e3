"""One client worker's body, in a worker process or a Ray actor (the same code either way).

The driver side (``run.workers``: the item queue, the fleet, the local engine) and the Ray
engine (``run.ray_engine``) both start this; it sits below them, so neither imports the other
to reach it.  A worker answers its items with an ``item.ItemRunner`` (so a record is the same
wherever it was made), draws on the run's one retry budget (``SharedBudget``), and dies with
its driver (``die_with_parent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from nlq2sql.records.item import ItemRecord
from nlq2sql.records.run_parts import FleetSession, Harness
from nlq2sql.records.typed import Typed
from nlq2sql.stages.sets import Case
from nlq2sql.transport.client import RetryBudget

if TYPE_CHECKING:  # (the item code loads inside ItemWorker: its import time is a measured phase)
    from nlq2sql.run.config import EvalConfig

__all__ = ["PARENT_POLL_S", "ItemWorker", "SharedBudget", "WorkerReady", "WorkerReport", "die_with_parent",
           "serve_items"]


class WorkerReady(Typed):
    """A worker's first message: it can send requests, and how long getting there took, by phase.
    It crosses to the driver pickled (a pipe or Ray), as :class:`WorkerReport` does."""

    pid: int
    startup_s: float | None
    phases: dict[str, float | None]


class WorkerReport(Typed):
    """What a worker (process or Ray actor) reports when it is done: the driver merges these."""

    sent: int
    fleet: FleetSession | None  # its replicas' report (``ItemRunner.fleet``)
    harness: Harness
    pid: int
    shapes: frozenset[str] = frozenset()  # the query shapes its warehouse compiled (``Engine.shapes``)


class SharedBudget(RetryBudget):
    """The run's retry budget as one counter every worker draws from.

    ``take`` is the only call the request path makes; here it goes through ``counter``,
    a ``multiprocessing.Value`` (local workers) or a Ray actor handle (``engine ray``)."""

    def __init__(self, counter: Any, total: int) -> None:  # noqa: D107 -- no super(): no local count
        self.counter, self.total = counter, total

    def take(self) -> bool:
        if hasattr(self.counter, "get_lock"):
            with self.counter.get_lock():
                if self.counter.value >= self.total:
                    return False
                self.counter.value += 1
                return True
        import ray

        return bool(ray.get(self.counter.take.remote()))

    @property  # type: ignore[override]
    def used(self) -> int:
        if hasattr(self.counter, "get_lock"):
            return int(self.counter.value)
        import ray

        return int(ray.get(self.counter.used.remote()))

    @used.setter
    def used(self, value: int) -> None:
        raise AttributeError("a shared budget is only drawn from")

    @property  # type: ignore[override]
    def left(self) -> int:
        return max(0, self.total - self.used)

    @left.setter
    def left(self, value: int) -> None:
        raise AttributeError("a shared budget is only drawn from")


#: How often a worker's watchdog checks that its driver is still its parent.
PARENT_POLL_S = 0.1
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """End this process as soon as ``parent_pid`` (the driver that started it) is gone.

    Linux: ``PR_SET_PDEATHSIG`` asks the kernel to SIGKILL us when the parent dies (it fires on
    the death of the parent's *thread* that started us: ``run_workers`` starts its workers from
    the thread that runs it, and they are done before it returns).  Checked after setting it, in
    case the driver died first.  A watchdog thread polls ``getppid`` as well (other systems,
    and a second line): a reparented worker exits at once, without cleaning up -- whatever it
    was doing belonged to a run that no longer has a writer."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog below still holds
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="nlq2sql-parent-watch", daemon=True).start()


class ItemWorker:
    """One worker's items, in a worker process or a Ray actor (the same code either way): an
    ``item.ItemRunner`` for this worker's share of the run's concurrency, every distinct gold
    answered by the warehouse before the first request (``ItemRunner.prepare``, as one
    process does)."""

    def __init__(self, cfg: EvalConfig, endpoint: tuple[str, str, str], slots: int, budget: RetryBudget,
                 golds: Sequence[Case] = ()) -> None:
        t0 = time.time()
        from nlq2sql.run.item import ItemRunner  # deferred: its import time is the worker's measured import_s phase

        t1 = time.time()
        base_url, model, key = endpoint
        self.items = ItemRunner(cfg, base_url, model, key, budget, concurrency=slots, sample_metrics=False)
        t2 = time.time()
        self.items.prepare(golds)
        self.sent = 0
        #: Where this worker's start-up went: importing the item code, its warehouse and
        #: prompt (``ItemRunner``), answering the golds.
        self.phases: dict[str, float | None] = {"import_s": round(t1 - t0, 3), "runner_s": round(t2 - t1, 3),
                       "golds_s": round(time.time() - t2, 3)}

    def start(self) -> None:
        self.items.start()

    async def run(self, case: Case) -> ItemRecord:
        """The item's record, as the type: it crosses to the driver pickled, and becomes a line
        only where the driver writes it."""
        self.sent += 1
        return await self.items.record(case)

    async def finish(self) -> WorkerReport:
        await self.items.close()
        return WorkerReport(sent=self.sent, fleet=self.items.fleet(), harness=self.items.harness(), pid=os.getpid(),
                            shapes=self.items.wh.catalog.engine.shapes())


def serve_items(cfg: EvalConfig, endpoint: tuple[str, str, str], slots: int, conn: Connection, budget: RetryBudget,
                parent_pid: int | None, golds: Sequence[Case] = (), spawned_at: float | None = None) -> None:
    """A worker process's whole life, talking to its driver over its own pipe ``conn`` (no lock
    shared with other workers: a worker killed mid-write cannot wedge the others).

    Sends ``("ready", info)`` once it can send requests, ``("rec", record)`` per item, and a
    final ``("done", report)``.  Receives cases, at most ``slots`` outstanding (each is sent at
    once: the driver's dispatch is the concurrency cap), and ``None``: no more items.
    ``parent_pid``: the worker ends when that driver dies (``die_with_parent``)."""
    if parent_pid is not None:
        die_with_parent(parent_pid)
    try:
        asyncio.run(_serve(cfg, endpoint, slots, conn, budget, golds, spawned_at))
    except BaseException as exc:  # noqa: BLE001 -- reported to the driver, which raises
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"))


async def _serve(cfg: EvalConfig, endpoint: tuple[str, str, str], slots: int, conn: Connection,
                 budget: RetryBudget, golds: Sequence[Case] = (), spawned_at: float | None = None) -> None:
    entered = time.time()  # the interpreter is up, this module imported, the arguments unpickled
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Case | None] = asyncio.Queue()

    def read() -> None:  # a thread: the driver's messages never wait on this loop (nor it on them)
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = None  # the driver is gone (its death ends this process too)
            loop.call_soon_threadsafe(inbox.put_nowait, msg)
            if msg is None:
                return

    threading.Thread(target=read, name="nlq2sql-inbox", daemon=True).start()
    worker = ItemWorker(cfg, endpoint, slots, budget, golds)
    worker.start()
    conn.send(("ready", WorkerReady(pid=os.getpid(),
                                    startup_s=time.time() - spawned_at if spawned_at is not None else None,
                                    phases={"interpreter_s": round(entered - spawned_at, 3) if spawned_at else None,
                                            **worker.phases})))

    async def lane() -> None:
        while True:
            case = await inbox.get()
            if case is None:
                inbox.put_nowait(None)  # one None ends every lane
                return
            rec = await worker.run(case)
            conn.send(("rec", rec))

    try:
        await asyncio.gather(*(lane() for _ in range(slots)))
    finally:
        report = await worker.finish()
    conn.send(("done", report))
