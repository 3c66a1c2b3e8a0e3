"""Past one core: client worker processes on this machine, or Ray actors on a cluster.

One Python event loop tops out at a few hundred to a thousand streamed requests per second
(the client benchmark), below what a fleet of replicas serves.  ``--workers N`` runs N
client processes; ``--engine ray`` runs them as Ray actors, spread over a cluster.  Both
use the same worker body (``serve_items``) and the same ``item.ItemRunner``, so a record is
the same wherever it was made:

* items go out from **one queue** (whoever is free takes the next), and the run's
  concurrency is split over the workers, so the cap stays global;
* the retry budget is **one** counter for the run (shared memory locally, a Ray actor on a
  cluster);
* records stream back to this process, which alone writes ``records.jsonl`` (in completion
  order, flushed per record), so resume after a kill is exact, as for one process;
* a worker process dies with its driver: on Linux the kernel kills it the moment the driver
  dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, set as the worker starts), and everywhere a
  watchdog thread ends it within ``PARENT_POLL_S`` of its parent changing -- requests in
  flight, retry waits and all: a killed driver's workers send nothing more.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import queue as queue_mod
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .client import RetryBudget
from .errors import InputError, Nlq2SqlError
from .evalset import EvalCase
from .harness_load import HarnessMonitor
from .harness_load import merge as merge_harness
from .records import RECORDS, RecordWriter

if TYPE_CHECKING:
    from .live import EvalConfig, Progress

__all__ = ["ENGINES", "SharedBudget", "auto_workers", "run_workers", "serve_items", "shares"]

ENGINES = ("local", "ray")


class Queue(Protocol):
    def get(self, block: bool = ..., timeout: float | None = ...) -> Any: ...
    def put(self, item: Any, block: bool = ..., timeout: float | None = ...) -> None: ...


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


def auto_workers(concurrency: int) -> int:
    """``--workers auto``: one client process per CPU this process may run on (at most the
    concurrency).  One event loop saturates one core; more processes than cores only compete."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, concurrency))


def shares(concurrency: int, workers: int) -> list[int]:
    """The run's concurrency split over workers (each at least 1): the cap stays global."""
    if workers > concurrency:
        raise InputError(f"{workers} workers need a concurrency of at least {workers}, got {concurrency}",
                         field="--workers")
    base, extra = divmod(concurrency, workers)
    return [base + (i < extra) for i in range(workers)]


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


def serve_items(cfg: EvalConfig, endpoint: tuple[str, str, str], slots: int, inbox: Queue, outbox: Queue,
                budget: RetryBudget, deadline: float | None, parent_pid: int | None,
                golds: Sequence[EvalCase] = ()) -> None:
    """A worker's whole life: answer items from ``inbox`` with ``slots`` in flight, send each
    record to ``outbox``, then a final ``("done", report)``.  ``None`` in the inbox ends a lane.
    ``golds`` (a case per distinct gold intent) are answered by the warehouse before the first
    request, as one process does (``ItemRunner.prepare``).  ``parent_pid``: a worker process
    ends when that driver dies (``die_with_parent``); None for a Ray actor (Ray ends the
    actors of a driver that died)."""
    if parent_pid is not None:
        die_with_parent(parent_pid)
    try:
        report = asyncio.run(_serve(cfg, endpoint, slots, inbox, outbox, budget, deadline, parent_pid, golds))
        outbox.put(("done", report))
    except BaseException as exc:  # noqa: BLE001 -- reported to the driver, which raises
        outbox.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"))


async def _serve(cfg: EvalConfig, endpoint: tuple[str, str, str], slots: int, inbox: Queue, outbox: Queue,
                 budget: RetryBudget, deadline: float | None, parent_pid: int | None,
                 golds: Sequence[EvalCase] = ()) -> dict[str, Any]:
    from .item import ItemRunner

    base_url, model, key = endpoint
    items = ItemRunner(cfg, base_url, model, key, budget, concurrency=slots, sample_metrics=False)
    items.prepare(golds)
    loop = asyncio.get_running_loop()
    sent = 0
    # Blocking queue reads happen in threads, one per lane, so a lane never waits on another's.
    with ThreadPoolExecutor(slots) as pool:
        def next_case() -> EvalCase | None:
            while True:
                if parent_pid is not None and os.getppid() != parent_pid:
                    return None  # the driver is gone (killed): stop sending requests
                try:
                    return inbox.get(timeout=0.5)  # type: ignore[no-any-return]
                except queue_mod.Empty:
                    continue
                except Exception as exc:  # noqa: BLE001 -- Ray's queue raises its own Empty
                    if type(exc).__name__ == "Empty":
                        continue
                    raise

        async def lane() -> None:
            nonlocal sent
            while deadline is None or time.time() < deadline:
                case = await loop.run_in_executor(pool, next_case)
                if case is None:
                    return
                sent += 1
                outbox.put(("rec", await items.run(case)))

        items.start()
        try:
            await asyncio.gather(*(lane() for _ in range(slots)))
        finally:
            await items.close()
    return {"sent": sent, "fleet": items.fleet(), "harness": items.harness(), "pid": os.getpid()}


def distinct_golds(cases: Sequence[EvalCase]) -> list[EvalCase]:
    """A case per distinct gold intent: what each worker answers from the warehouse before its
    first request (every worker has its own DuckDB memo, and may be sent any item)."""
    by_object: dict[int, EvalCase] = {}
    for c in cases:  # cases of repeated lines share their gold object
        by_object.setdefault(id(c.gold), c)
    by_value: dict[str, EvalCase] = {}
    for c in by_object.values():
        by_value.setdefault(c.gold.model_dump_json(), c)
    return list(by_value.values())


def merge_fleets(reports: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Each worker saw the replicas on its own (its own circuit breakers): a replica was out
    when any worker took it out, and the probes are every worker's."""
    seen = [r for r in reports if r]
    if not seen:
        return None
    rows: dict[str, dict[str, Any]] = {}
    for w, rep in enumerate(seen):
        for r in rep["replicas"]:
            first = r["label"] not in rows
            row = rows.setdefault(r["label"], {**r, "events": []})
            row["events"] += [dict(e, worker=w) for e in r["events"]]
            row["out_of_rotation_s"] = max(row["out_of_rotation_s"], r["out_of_rotation_s"])
            row["in_rotation_at_end"] = row["in_rotation_at_end"] and r["in_rotation_at_end"]
            if not first:  # each worker has its own breakers: their probes add up
                for k in ("probes", "probes_failed"):
                    row[k] = row.get(k, 0) + r.get(k, 0)
            firsts = [x for x in (row.get("first_out_after_s"), r["first_out_after_s"]) if x is not None]
            row["first_out_after_s"] = min(firsts) if firsts else None
    for row in rows.values():
        row["events"].sort(key=lambda e: e["t"])
    return {"routing": seen[0]["routing"], "failovers": sum(r["failovers"] for r in seen),
            "replicas": list(rows.values()), "server_metrics": None}  # filled in by the driver


def run_workers(cfg: EvalConfig, base_url: str, model: str, key: str, out: Path, cases: list[EvalCase],
                progress: Progress | None, budget: RetryBudget) -> dict[str, Any]:
    """Answer ``cases`` with ``cfg.workers`` processes (or Ray actors); write their records here."""
    from .item import targets
    from .server_metrics import MetricsSampler
    from .session import session_result

    lanes = shares(cfg.concurrency, cfg.workers)
    t0 = time.time()
    deadline = t0 + cfg.load.duration_s if cfg.load.duration_s else None
    engine = _ray_engine(cfg) if cfg.engine == "ray" else _local_engine()
    inbox, outbox, counter = engine.queues(budget.used, budget.total)
    for c in cases:
        inbox.put(c)
    for _ in range(sum(lanes)):
        inbox.put(None)
    golds = distinct_golds(cases)
    shared = SharedBudget(counter, budget.total)
    counts = {"total": len(cases), "done": 0, "failed": 0, "in_flight": 0}
    # The session's wall time runs from the first request sent: starting the worker processes
    # (an interpreter, imports, the warehouse each) is set-up, as it is for one process.
    first = [float("inf")]
    reports: list[dict[str, Any]] = []

    driver = HarnessMonitor()

    # The driver samples every replica's /metrics (the workers sample none), labelled as the pool labels them.
    urls = [u for u, _, _ in targets(cfg, base_url, model, key)]

    async def drive() -> list[dict[str, Any]]:
        samplers = [MetricsSampler(u, cfg.load.metrics_interval_s) for u in urls]
        for smp in samplers:
            smp.start()
        driver.start()
        loop = asyncio.get_running_loop()
        engine.start(cfg, (base_url, model, key), lanes, inbox, outbox, shared, deadline, golds)
        try:
            with RecordWriter(out / RECORDS) as writer:
                while len(reports) < len(lanes):
                    msg = await loop.run_in_executor(None, engine.receive, outbox)
                    if msg is None:
                        engine.check_alive()
                        continue
                    kind, body = msg
                    if kind == "rec":
                        first[0] = min(first[0], body.get("started") or first[0])
                        writer.write(body)
                        counts["done"] += 1
                        counts["failed"] += body["outcome"] != "ok"
                        if progress:
                            progress("update", dict(counts))
                    elif kind == "done":
                        reports.append(body)
                    else:
                        raise Nlq2SqlError(f"a client worker failed: {body}")
        finally:
            await driver.stop()
            for smp in samplers:
                await smp.stop()
            engine.stop()
        return [smp.result() for smp in samplers]

    per_replica = asyncio.run(drive())
    sent = sum(r["sent"] for r in reports)
    fleet = merge_fleets([r["fleet"] for r in reports])
    if fleet is not None:
        fleet["server_metrics"] = {f"r{i}": m for i, m in enumerate(per_replica)}
    return session_result(cfg, time.time() - min(first[0], time.time()), sent, len(cases), per_replica[0],
                          fleet, shared.used,
                          merge_harness([driver.result(), *(r["harness"] for r in reports)]))


class _local_engine:  # noqa: N801 -- used like a function
    """Worker processes on this machine (spawned: a fresh interpreter, no inherited loop state)."""

    def __init__(self) -> None:
        import multiprocessing as mp

        self.ctx = mp.get_context("spawn")
        self.procs: list[Any] = []

    def queues(self, used: int, total: int) -> tuple[Any, Any, Any]:
        return self.ctx.Queue(), self.ctx.Queue(), self.ctx.Value("i", used)

    def start(self, cfg: EvalConfig, endpoint: tuple[str, str, str], lanes: list[int], inbox: Any,
              outbox: Any, budget: SharedBudget, deadline: float | None, golds: list[EvalCase]) -> None:
        for n in lanes:
            p = self.ctx.Process(target=serve_items, args=(cfg, endpoint, n, inbox, outbox, budget, deadline,
                                                           os.getpid(), golds), daemon=True)
            p.start()
            self.procs.append(p)

    @staticmethod
    def receive(outbox: Any) -> Any:
        try:
            return outbox.get(timeout=1.0)
        except queue_mod.Empty:
            return None

    def check_alive(self) -> None:
        dead = [p for p in self.procs if p.exitcode not in (None, 0)]
        if dead:
            raise Nlq2SqlError(f"a client worker process died (exit code {dead[0].exitcode})")

    def stop(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=10)


def _ray_engine(cfg: EvalConfig) -> Any:
    from .ray_engine import RayEngine

    return RayEngine(cfg.ray_address)
