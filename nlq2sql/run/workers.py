"""Past one core: client worker processes on this machine, or Ray actors on a cluster.

``--workers N`` and ``--engine ray`` run the same worker body and ``item.ItemRunner``. Items go out
from one queue with the concurrency split over workers (a global cap); the retry budget is one counter;
records stream back to this process, the only writer of ``records.jsonl`` (flushed per record, so
resume is exact). A worker dies with its driver: ``PR_SET_PDEATHSIG`` on Linux, and a watchdog
within ``PARENT_POLL_S`` everywhere, so a killed driver's workers send nothing more."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlq2sql.errors import InputError, Nlq2SqlError
from nlq2sql.records.run_parts import FleetSession, ReplicaRotation, ServerMetrics
from nlq2sql.records.store import RECORDS, RecordWriter
from nlq2sql.records.summary_parts import WorkerFigures, WorkerLoss, WorkerPhases, WorkerStartup
from nlq2sql.run.harness_load import HarnessMonitor
from nlq2sql.run.harness_load import merge as merge_harness
from nlq2sql.run.item import targets
from nlq2sql.run.ray_engine import RayEngine
from nlq2sql.run.session import Session, session_result
from nlq2sql.run.worker import SharedBudget, WorkerReport, serve_items
from nlq2sql.stages.goldsql import GoldSqlCase
from nlq2sql.stages.sets import Case
from nlq2sql.transport.client import RetryBudget
from nlq2sql.transport.server_metrics import MetricsSampler

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess

    from nlq2sql.run.config import EvalConfig

__all__ = ["ENGINES", "RESTARTS_PER_WORKER", "Fleet", "LocalEngine", "Progress", "auto_workers", "distinct_golds",
           "merge_fleets", "run_workers", "shares"]

ENGINES = ("local", "ray")

#: What a run reports as items finish: an event (``"update"``) and the outcome counts so far.  Declared
#: here, beside the driver that calls it from its workers' records, and used by ``run.live`` for its own.
Progress = Callable[[str, dict[str, int]], None]


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


def distinct_golds(cases: Sequence[Case]) -> list[Case]:
    """A case per distinct gold (a v1 intent or a v2 query): what each worker answers from the
    warehouse before its first request (every worker has its own DuckDB memo, and may be sent any
    item).  A v2 item without a gold (unanswerable) and a gold-SQL item have nothing to answer in
    advance."""
    by_object: dict[int, tuple[str, Case]] = {}
    for c in cases:  # cases of repeated lines share their gold object
        gold = c.gold if not isinstance(c, GoldSqlCase) else None  # a gold SQL is run by its scorer
        if gold is not None and id(gold) not in by_object:
            by_object[id(gold)] = (gold.model_dump_json(), c)
    by_value: dict[str, Case] = {}
    for key, c in by_object.values():
        by_value.setdefault(key, c)
    return list(by_value.values())


def merge_fleets(reports: list[FleetSession | None]) -> FleetSession | None:
    """Each worker saw the replicas on its own (its own circuit breakers): a replica was out
    when any worker took it out, and the probes are every worker's."""
    seen = [r for r in reports if r]
    if not seen:
        return None
    rows: dict[str, ReplicaRotation] = {}
    for w, rep in enumerate(seen):
        for r in rep.replicas:
            first = r.label not in rows
            row = rows.setdefault(r.label, r.model_copy(update={"events": []}))
            row.events += [e.model_copy(update={"worker": w}) for e in r.events]
            row.out_of_rotation_s = max(row.out_of_rotation_s, r.out_of_rotation_s)
            row.in_rotation_at_end = row.in_rotation_at_end and r.in_rotation_at_end
            if not first:  # each worker has its own breakers: their probes add up
                row.probes, row.probes_failed = row.probes + r.probes, row.probes_failed + r.probes_failed
            firsts = [x for x in (row.first_out_after_s, r.first_out_after_s) if x is not None]
            row.first_out_after_s = min(firsts) if firsts else None
    for row in rows.values():
        row.events.sort(key=lambda e: e.t)
    return FleetSession(routing=seen[0].routing, failovers=sum(r.failovers for r in seen),
                        replicas=list(rows.values()), server_metrics=None)  # filled in by the driver


#: Replacement workers a run may start, per worker it began with, before it gives up.
RESTARTS_PER_WORKER = 3


class Fleet:
    """The driver's view of its workers: which items each holds, and what was lost.

    Items go out from one queue to whichever worker has a free slot (a worker holds at most
    its share of the concurrency), and the driver remembers which worker holds which item.
    When a worker dies (its process ends, its Ray actor dies) the items it held and had not
    answered go back to the front of the queue, a replacement is started, and the run goes
    on: each item is recorded exactly once (a record already written is never written
    again), as in an uninterrupted run."""

    def __init__(self, cases: Sequence[Case], lanes: list[int], t0: float) -> None:
        self.pending: deque[Case] = deque(cases)
        self.slots: dict[int, int] = {}
        self.held: dict[int, dict[str, Case]] = {}
        self.ready: set[int] = set()
        self.finished: set[int] = set()
        self.written: set[str] = set()
        self.losses: list[WorkerLoss] = []
        self.startups: list[float] = []
        self.phases: list[dict[str, float | None]] = []  # each worker's start-up, by phase
        self.first_ready: float | None = None
        self.t0 = t0
        self.ended = False
        self.not_sent = 0
        self.next_id = 0
        self.restarts_left = RESTARTS_PER_WORKER * len(lanes)

    def add(self, slots: int) -> int:
        wid = self.next_id
        self.next_id += 1
        self.slots[wid], self.held[wid] = slots, {}
        return wid

    @property
    def live(self) -> list[int]:
        return list(self.held)

    def to_send(self) -> list[tuple[int, Case]]:
        """Fill every ready worker's free slots from the queue."""
        out = []
        for wid in sorted(self.ready & self.held.keys()):
            held = self.held[wid]
            while self.pending and len(held) < self.slots[wid]:
                case = self.pending.popleft()
                held[case.id] = case
                out.append((wid, case))
        return out

    def all_answered(self) -> bool:
        return not self.pending and not any(self.held.values())

    def lost(self, wid: int, why: str) -> int | None:
        """Worker ``wid`` died: re-queue what it held; the slots of its replacement (None: none needed)."""
        held = self.held.pop(wid, {})
        self.ready.discard(wid)
        if wid in self.finished:  # it had reported: nothing lost
            return None
        cases = list(held.values())
        self.pending.extendleft(reversed(cases))
        self.losses.append(WorkerLoss(worker=wid, why=why, at_s=round(time.time() - self.t0, 3),
                                      requeued=len(cases), requeued_ids=[c.id for c in cases][:20]))
        if self.ended:
            return None
        if self.restarts_left <= 0:
            if not self.held:
                raise Nlq2SqlError(f"client workers keep dying ({len(self.losses)} lost; the last: {why}); "
                                   f"{len(self.written)} records are on disk: --resume continues the run")
            return None
        self.restarts_left -= 1
        return self.slots[wid]


def run_workers(cfg: EvalConfig, base_url: str, model: str, key: str, out: Path, cases: list[Case],
                progress: Progress | None, budget: RetryBudget) -> Session:
    """Answer ``cases`` with ``cfg.workers`` processes (or Ray actors); write their records here.

    A worker that dies (SIGKILL, out of memory, a Ray node lost) is noticed at once (its
    process's sentinel, its actor's failed task); what it held is re-queued and a replacement
    started (``Fleet``).  The session's wall time counts the workers' start-up
    (``startup_s`` says how much of it was)."""

    lanes = shares(cfg.concurrency, cfg.workers)
    t0 = time.time()
    deadline = t0 + cfg.load.duration_s if cfg.load.duration_s else None
    engine: Any = _ray_engine(cfg) if cfg.engine == "ray" else LocalEngine()
    counter = engine.counter(budget.used, budget.total)
    golds = distinct_golds(cases)
    shared = SharedBudget(counter, budget.total)
    fleet = Fleet(cases, lanes, t0)
    counts = {"total": len(cases), "done": 0, "failed": 0, "in_flight": 0}
    first = [float("inf")]
    used = [0]
    reports: list[WorkerReport] = []
    driver = HarnessMonitor()
    # The driver samples every replica's /metrics (the workers sample none), labelled as the pool labels them.
    urls = [u for u, _, _ in targets(cfg, base_url, model, key)]
    endpoint = (base_url, model, key)

    def spawn(slots: int) -> None:  # from the loop's thread: a worker dies with the thread that started it
        engine.spawn(fleet.add(slots), cfg, endpoint, slots, shared, golds)

    async def drive() -> list[ServerMetrics]:
        samplers = [MetricsSampler(u, cfg.load.metrics_interval_s) for u in urls]
        for smp in samplers:
            smp.start()
        driver.start()
        loop = asyncio.get_running_loop()
        for n in lanes:
            spawn(n)
        try:
            with RecordWriter(out / RECORDS) as writer:
                while True:
                    if deadline is not None and time.time() >= deadline and fleet.pending:
                        fleet.not_sent += len(fleet.pending)  # no request starts after the deadline
                        fleet.pending.clear()
                    sends: dict[int, list[Case]] = {}
                    for wid, case in fleet.to_send():
                        sends.setdefault(wid, []).append(case)
                    for wid, batch in sends.items():
                        engine.submit(wid, batch)  # one message (Ray: a few tasks) per worker
                    if not fleet.ended and fleet.all_answered():
                        fleet.ended = True
                        for wid in fleet.live:
                            engine.end(wid)
                    if fleet.ended and set(fleet.live) <= fleet.finished:
                        break
                    counts["in_flight"] = sum(len(h) for h in fleet.held.values())
                    for wid, kind, body in await loop.run_in_executor(None, engine.poll, 0.5):
                        if kind == "rec":
                            fleet.held.get(wid, {}).pop(body.id, None)
                            if body.id in fleet.written:
                                continue  # never twice (a worker is declared lost only once drained)
                            fleet.written.add(body.id)
                            first[0] = min(first[0], body.request.started or first[0])
                            writer.write(body)
                            counts["done"] += 1
                            counts["failed"] += body.outcome != "ok"
                            if progress:
                                progress("update", dict(counts))
                        elif kind == "ready":
                            fleet.ready.add(wid)
                            fleet.first_ready = fleet.first_ready or time.time()
                            if body.startup_s is not None:  # (a WorkerReady)
                                fleet.startups.append(body.startup_s)
                                fleet.phases.append(body.phases)
                        elif kind == "done":
                            fleet.finished.add(wid)
                            reports.append(body)
                        elif kind == "dead":
                            slots = fleet.lost(wid, body)
                            if slots is not None:
                                spawn(slots)
                        else:
                            raise Nlq2SqlError(f"a client worker failed: {body}")
                used[0] = shared.used  # (a Ray budget actor ends with the engine)
        finally:
            await driver.stop()
            for smp in samplers:
                await smp.stop()
            engine.stop()
        return [smp.result() for smp in samplers]

    per_replica = asyncio.run(drive())
    merged = merge_fleets([r.fleet for r in reports])
    if merged is not None:
        merged.server_metrics = {f"r{i}": m for i, m in enumerate(per_replica)}
    now = time.time()
    started = min(first[0], now)
    workers = WorkerFigures(
        lost_workers=len(fleet.losses), restarted_workers=fleet.next_id - len(lanes),
        requeued_items=sum(x.requeued for x in fleet.losses), worker_losses=fleet.losses,
        worker_startup_s=WorkerStartup(
            first_ready_s=(fleet.first_ready - t0) if fleet.first_ready else None,
            first_request_s=started - t0 if first[0] != float("inf") else None,
            per_worker_s=[round(s, 3) for s in fleet.startups],
            per_worker_phases=[WorkerPhases.model_validate(p) for p in fleet.phases]))
    result = session_result(cfg, now - t0, len(fleet.written), len(cases), per_replica[0], merged, used[0],
                            merge_harness([driver.result(), *(r.harness for r in reports)]),
                            startup_s=max(0.0, started - t0), workers=workers)
    result.worker_shapes = frozenset().union(*(r.shapes for r in reports))
    return result


class LocalEngine:
    """Worker processes on this machine (spawned: a fresh interpreter, no inherited loop state),
    each with its own pipe to the driver; a dead one is seen by its process sentinel."""

    def __init__(self) -> None:
        import multiprocessing as mp

        self.ctx = mp.get_context("spawn")
        self.procs: dict[int, SpawnProcess] = {}
        self.conns: dict[int, Connection] = {}
        self.lock = threading.Lock()

    def counter(self, used: int, total: int) -> Any:
        return self.ctx.Value("i", used)

    def spawn(self, wid: int, cfg: EvalConfig, endpoint: tuple[str, str, str], slots: int, budget: SharedBudget,
              golds: list[Case]) -> None:
        mine, theirs = self.ctx.Pipe(duplex=True)
        p = self.ctx.Process(target=serve_items, args=(cfg, endpoint, slots, theirs, budget, os.getpid(), golds,
                                                       time.time()), daemon=True, name=f"nlq2sql-worker-{wid}")
        p.start()
        theirs.close()  # the worker's end lives in the worker: its death is EOF here
        with self.lock:
            self.procs[wid], self.conns[wid] = p, mine

    def submit(self, wid: int, cases: list[Case]) -> None:
        for case in cases:
            self._send(wid, case)

    def _send(self, wid: int, case: Case | None) -> None:
        conn = self.conns.get(wid)
        if conn is not None:
            with contextlib.suppress(OSError):  # a dead worker: its sentinel reports it
                conn.send(case)

    def end(self, wid: int) -> None:
        self._send(wid, None)

    def poll(self, timeout: float) -> list[tuple[int, str, Any]]:
        """What the workers said (and which died) within ``timeout``."""
        from multiprocessing.connection import wait

        with self.lock:
            by_conn = {c: w for w, c in self.conns.items()}
            by_sentinel = {p.sentinel: w for w, p in self.procs.items()}
        events: list[tuple[int, str, Any]] = []
        dead: set[int] = set()
        for obj in wait([*by_conn, *by_sentinel], timeout):
            if obj in by_conn:
                wid = by_conn[obj]  # type: ignore[index]
                if not self._drain(wid, events):
                    dead.add(wid)
            else:
                dead.add(by_sentinel[obj])  # type: ignore[index]
        for wid in sorted(dead):
            self._drain(wid, events)  # what it sent before it died is kept, never re-run
            p = self.procs[wid]
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
            with self.lock:
                del self.procs[wid]
                self.conns.pop(wid).close()
            code = p.exitcode
            events.append((wid, "dead", f"worker process {p.pid} ended "
                           + (f"by signal {signal.Signals(-code).name}" if code is not None and code < 0
                              else f"with exit code {code}")))
        return events

    def _drain(self, wid: int, events: list[tuple[int, str, Any]]) -> bool:
        """Every whole message waiting from ``wid``; False at its end of file (it is gone)."""
        conn = self.conns.get(wid)
        if conn is None:
            return False
        try:
            while conn.poll():
                events.append((wid, *conn.recv()))
        except (EOFError, OSError):  # closed, or cut off mid-message by a kill
            return False
        return True

    def stop(self) -> None:
        for p in self.procs.values():
            if p.is_alive():
                p.terminate()
            p.join(timeout=10)
        for c in self.conns.values():
            c.close()


def _ray_engine(cfg: EvalConfig) -> Any:
    return RayEngine(cfg.ray_address)
