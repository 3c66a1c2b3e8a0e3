"""``--engine ray``: the client workers as Ray actors, spread over a cluster.

Each worker is an async actor running ``worker.ItemWorker``, each item one actor task, so the driver
knows what an actor holds and sees a dead one at once; the retry budget is one small actor. Without
``--ray-address`` a local Ray is started (2 CPUs at most, sessions under the cache); with one the run
joins that cluster (each node needs nlq2sql and must reach the endpoints)."""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

from nlq2sql.errors import InputError
from nlq2sql.records.item import ItemRecord
from nlq2sql.run.endpoints import check_address
from nlq2sql.run.worker import ItemWorker, SharedBudget, WorkerReady, WorkerReport

if TYPE_CHECKING:
    from nlq2sql.run.config import EvalConfig
    from nlq2sql.stages.sets import Case

__all__ = ["MAX_CHUNK", "BudgetCounter", "RayEngine", "chunk_size", "ray_available", "start_local_ray"]

#: The most items one actor task carries.  A task per item cost a round trip through Ray's
#: task machinery each way per item (``benchmarks/bench_ray.py``: 0.35x one process's req/s
#: after start-up), so an actor's free slots are filled by tasks of several items; few enough
#: that a task's slowest answer holds back only a few finished ones.
MAX_CHUNK = 16


def chunk_size(slots: int) -> int:
    """Items per task for an actor with ``slots`` in flight: a quarter of them (1 to ``MAX_CHUNK``)."""
    return max(1, min(MAX_CHUNK, slots // 4))


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def start_local_ray() -> None:
    """A local Ray for ``batch --engine ray-vllm``'s engine: every logical CPU of the machine (at least 2)."""
    import ray

    ray.init(num_cpus=max(2, os.cpu_count() or 1), object_store_memory=200 * 2**20, include_dashboard=False,
             log_to_driver=False, configure_logging=False)


def _token_auth_for(address: str) -> None:
    """Ray 2.5x+ turns token authentication on for clusters it starts (``ray start --head``
    writes ``~/.ray/auth_token``), but a driver given an explicit address sends no token unless
    ``RAY_AUTH_MODE=token``: it retried for 30 s and failed with ``InvalidAuthToken``.  When
    the mode is unset and a token is available (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``), send it, as Ray itself does for ``auto``."""
    import os

    if os.environ.get("RAY_AUTH_MODE") is not None:
        return  # said explicitly: Ray's own rules
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray before token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


class RayEngine:
    def __init__(self, address: str | None) -> None:
        try:
            import ray
        except ImportError:
            raise InputError("Ray is not installed: pip install 'nlq2sql[ray]'", field="--engine") from None
        self.ray = ray
        if not ray.is_initialized():
            if address:
                check_address(address)
                _token_auth_for(address)
                try:
                    ray.init(address=address, log_to_driver=False)
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                    hint = ("" if os.environ.get("RAY_AUTH_MODE") else
                            "; a cluster with token authentication needs its token here "
                            "(RAY_AUTH_TOKEN, or ~/.ray/auth_token: ray get-auth-token)")
                    raise InputError(f"could not join the Ray cluster at {address}: {first}{hint}",
                                     field="--ray-address") from None
            else:
                ray.init(num_cpus=min(2, os.cpu_count() or 1), object_store_memory=100 * 2**20,
                         include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.actors: dict[int, Any] = {}
        self.refs: dict[Any, tuple[int, str]] = {}  # a task in flight: (worker, what it returns)
        self.chunks: dict[int, int] = {}  # items per task, per worker
        self.budget_actor: Any = None

    def counter(self, used: int, total: int) -> Any:
        self.budget_actor = self.ray.remote(num_cpus=0)(BudgetCounter).remote(used, total)
        return self.budget_actor

    def spawn(self, wid: int, cfg: EvalConfig, endpoint: tuple[str, str, str], slots: int, budget: SharedBudget,
              golds: list[Case]) -> None:
        # An async actor: each item is one task (``run``), ``slots`` of them at a time, so the
        # driver knows which items an actor holds and a dead actor's tasks fail (ActorDiedError).
        actor = self.ray.remote(_Worker).options(num_cpus=0.5, max_concurrency=slots + 2,
                                                 scheduling_strategy="SPREAD").remote()
        self.actors[wid] = actor
        self.chunks[wid] = chunk_size(slots)
        self.refs[actor.setup.remote(cfg, endpoint, slots, budget, golds, time.time())] = (wid, "ready")  # type: ignore[attr-defined]

    def submit(self, wid: int, cases: list[Case]) -> None:
        """``cases`` to worker ``wid``, in tasks of up to its chunk size (each case's record comes
        back with its task; a dead actor fails the task, and the driver re-queues what it held)."""
        if wid not in self.actors:
            return
        k = self.chunks.get(wid, 1)
        for i in range(0, len(cases), k):
            self.refs[self.actors[wid].run_many.remote(cases[i:i + k])] = (wid, "recs")

    def end(self, wid: int) -> None:
        if wid in self.actors:
            self.refs[self.actors[wid].finish.remote()] = (wid, "done")

    def poll(self, timeout: float) -> list[tuple[int, str, Any]]:
        """Finished tasks within ``timeout``: records, readiness, reports -- and dead actors."""
        from ray.exceptions import RayActorError, RayTaskError

        if not self.refs:
            time.sleep(timeout)
            return []
        ready, _ = self.ray.wait(list(self.refs), num_returns=1, timeout=timeout)
        if ready:
            ready, _ = self.ray.wait(list(self.refs), num_returns=len(self.refs), timeout=0)
        events: list[tuple[int, str, Any]] = []
        for ref in ready:
            if ref not in self.refs:
                continue  # its actor was declared dead by an earlier ref in this batch
            wid, kind = self.refs.pop(ref)
            try:
                body = self.ray.get(ref)
                if kind == "recs":
                    events.extend((wid, "rec", rec) for rec in body)
                else:
                    events.append((wid, kind, body))
            except RayActorError as exc:  # ActorDiedError and kin: the actor is gone
                self.refs = {r: v for r, v in self.refs.items() if v[0] != wid}
                with contextlib.suppress(Exception):
                    self.ray.kill(self.actors.pop(wid))
                events.append((wid, "dead", f"Ray actor died ({type(exc).__name__}: {str(exc).splitlines()[0]})"))
            except RayTaskError as exc:
                events.append((wid, "error", f"{type(exc).__name__}: {exc}"))
        return events

    def stop(self) -> None:
        for a in [*self.actors.values(), *([self.budget_actor] if self.budget_actor is not None else [])]:
            with contextlib.suppress(Exception):
                self.ray.kill(a)
        self.actors, self.refs = {}, {}


class BudgetCounter:
    """The run's retry budget on a cluster: one counter, drawn from by every worker."""

    def __init__(self, used: int, total: int) -> None:
        self._used, self.total = used, total

    def take(self) -> bool:
        if self._used >= self.total:
            return False
        self._used += 1
        return True

    def used(self) -> int:
        return self._used


class _Worker:
    """A client worker as an async Ray actor: ``worker.ItemWorker``, as a worker process runs it."""

    async def setup(self, cfg: EvalConfig, endpoint: tuple[str, str, str], slots: int, budget: SharedBudget,
                    golds: list[Case], spawned_at: float) -> WorkerReady:
        import os


        self.worker = ItemWorker(cfg, endpoint, slots, budget, golds)
        self.worker.start()
        return WorkerReady(pid=os.getpid(), startup_s=time.time() - spawned_at, phases=dict(self.worker.phases))

    async def run_many(self, cases: list[Case]) -> list[ItemRecord]:
        import asyncio

        return list(await asyncio.gather(*(self.worker.run(c) for c in cases)))

    async def finish(self) -> WorkerReport:
        return await self.worker.finish()
