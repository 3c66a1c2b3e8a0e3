"""``--engine ray``: the client workers as Ray actors, spread over a cluster.

Nothing here is a home-made RPC: items and records travel in Ray queues
(``ray.util.queue.Queue``), the run's retry budget is one small actor, and each worker is an
actor running ``workers.serve_items`` — the same body a local worker process runs.  Without
``--ray-address`` a local Ray is started for the run (2 CPUs at most, a small object store,
its session files under the project's cache); with one, the run joins that cluster (every
node needs nlq2sql installed, as for any Ray job, and must reach the endpoints).
"""

from __future__ import annotations

import queue as queue_mod
from typing import TYPE_CHECKING, Any

from .errors import InputError, Nlq2SqlError

if TYPE_CHECKING:
    from .evalset import EvalCase
    from .live import EvalConfig
    from .workers import SharedBudget

__all__ = ["RayEngine", "ray_available"]


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


class RayEngine:
    def __init__(self, address: str | None) -> None:
        try:
            import ray
        except ImportError:
            raise InputError("Ray is not installed: pip install 'nlq2sql[ray]'", field="--engine") from None
        self.ray = ray
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                import os

                ray.init(num_cpus=min(2, os.cpu_count() or 1), object_store_memory=100 * 2**20,
                         include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.actors: list[Any] = []
        self.tasks: list[Any] = []

    def queues(self, used: int, total: int) -> tuple[Any, Any, Any]:
        from ray.util.queue import Queue

        budget = self.ray.remote(num_cpus=0)(_Budget).remote(used, total)
        return Queue(actor_options={"num_cpus": 0}), Queue(actor_options={"num_cpus": 0}), budget

    def start(self, cfg: EvalConfig, endpoint: tuple[str, str, str], lanes: list[int], inbox: Any,
              outbox: Any, budget: SharedBudget, deadline: float | None, golds: list[EvalCase]) -> None:
        worker = self.ray.remote(num_cpus=0.5)(_Worker).options(scheduling_strategy="SPREAD")
        for n in lanes:
            actor = worker.remote()
            self.actors.append(actor)
            self.tasks.append(actor.run.remote(cfg, endpoint, n, inbox, outbox, budget, deadline, golds))  # type: ignore[attr-defined]

    @staticmethod
    def receive(outbox: Any) -> Any:
        from ray.util.queue import Empty

        try:
            return outbox.get(timeout=1.0)
        except (Empty, queue_mod.Empty):
            return None

    def check_alive(self) -> None:
        done, _ = self.ray.wait(self.tasks, num_returns=len(self.tasks), timeout=0)
        for ref in done:
            try:
                self.ray.get(ref)
            except Exception as exc:  # noqa: BLE001 -- an actor died: the run cannot finish
                raise Nlq2SqlError(f"a Ray client worker failed: {type(exc).__name__}: {exc}") from None

    def stop(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors, self.tasks = [], []


class _Budget:
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
    def run(self, cfg: EvalConfig, endpoint: tuple[str, str, str], slots: int, inbox: Any, outbox: Any,
            budget: SharedBudget, deadline: float | None, golds: list[EvalCase]) -> None:
        from .workers import serve_items

        serve_items(cfg, endpoint, slots, inbox, outbox, budget, deadline, None, golds)
