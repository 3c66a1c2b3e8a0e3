"""Several replicas of one model behind one run: routing, failover, health, attribution.

A fleet is several vLLM servers (data parallel, one per GPU, or behind nothing at all).
One run drives all of them: each item goes to one replica chosen by the routing policy,
and its record names the replica that answered.  A replica that fails *as a server*
(connection refused or reset, a stream cut off, 5xx after its retries, a failing health
check) leaves the rotation at once; the item that saw the failure is re-sent to another
replica (a failover, not a retry: the retry budget is not charged), so no item is lost or
counted twice.  A background prober puts a replica back as soon as it answers ``/models``
again, and the time each replica spent out of rotation is part of the summary.

With one replica nothing here changes a run: no failover, no record field, no prober.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import aiohttp

from .client import Completion, EndpointConfig, make_client
from .errors import InputError

__all__ = ["REPLICA_FAULTS", "ROUTINGS", "Pool", "Replica", "ReplicaSpec", "parse_endpoints_file"]

#: How an item picks its replica. least-inflight: the one with fewest requests in flight
#: (ties: the lowest index); round-robin: in turn; sticky: by a hash of the item id, so an
#: item is answered by the same replica in every run (reproducible attribution).
ROUTINGS = ("least-inflight", "round-robin", "sticky")
#: Outcomes that mean the replica, not the request, failed: it leaves the rotation.
REPLICA_FAULTS = frozenset({"connection_error", "stream_error", "http_5xx"})
#: Not retried on the same replica when there are others to fail over to (a dead server
#: refuses every retry; the next replica is the better bet).
FAIL_FAST = frozenset({"connection_error", "stream_error"})

T = TypeVar("T")


@dataclass(frozen=True)
class ReplicaSpec:
    """One endpoint of a fleet: its URL, and optionally its own model name and key variable."""

    url: str
    model: str | None = None
    api_key_env: str | None = None


def parse_endpoints_file(path: str) -> tuple[ReplicaSpec, ...]:
    """``--endpoints-file``: one ``URL [MODEL [KEY_ENV]]`` per line; ``#`` comments, blanks skipped."""
    from .inputs import decode_line, regular_file

    specs: list[ReplicaSpec] = []
    try:
        raw_lines = open(regular_file(path, "endpoints file"), "rb").read().splitlines()  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read endpoints file: {exc.strerror}", path=path) from None
    for lineno, raw in enumerate(raw_lines, start=1):
        line = decode_line(raw, path=path, line=lineno, offset=0).split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) > 3:
            raise InputError(f"expected 'URL [MODEL [KEY_ENV]]', got {len(parts)} fields",
                             path=path, line=lineno)
        from .live import check_endpoint_url

        try:
            check_endpoint_url(parts[0])
        except InputError as exc:
            raise InputError(str(exc).removeprefix("--endpoint: "), path=path, line=lineno,
                             field="url") from None
        specs.append(ReplicaSpec(parts[0], parts[1] if len(parts) > 1 else None,
                                 parts[2] if len(parts) > 2 else None))
    if not specs:
        raise InputError("no endpoint in the file", path=path)
    return tuple(specs)


@dataclass
class Replica:
    """One endpoint's client and what happened to it during this session."""

    label: str
    cfg: EndpointConfig
    client: Any
    in_flight: int = 0
    healthy: bool = True
    events: list[dict[str, Any]] = field(default_factory=list)  # out of / back in rotation
    down_since: float | None = None
    out_s: float = 0.0

    def take_out(self, reason: str) -> None:
        if not self.healthy:
            return
        self.healthy = False
        self.down_since = time.time()
        self.events.append({"event": "out", "t": self.down_since, "reason": reason[:200]})

    def put_back(self) -> None:
        if self.healthy:
            return
        now = time.time()
        self.out_s += now - (self.down_since or now)
        self.healthy, self.down_since = True, None
        self.events.append({"event": "back", "t": now})

    def report(self, t0: float) -> dict[str, Any]:
        out_s = self.out_s + (time.time() - self.down_since if self.down_since else 0.0)
        return {"label": self.label, "url": self.cfg.base_url, "model": self.cfg.model,
                "in_rotation_at_end": self.healthy, "out_of_rotation_s": round(out_s, 3),
                "first_out_after_s": next((round(e["t"] - t0, 3) for e in self.events
                                           if e["event"] == "out"), None),
                "events": [dict(e, after_s=round(e["t"] - t0, 3)) for e in self.events]}


class Pool:
    """The replicas of one run; ``call`` routes an item, fails over, and says who answered."""

    def __init__(self, cfgs: list[EndpointConfig], routing: str = "least-inflight",
                 probe_interval_s: float = 1.0, wait_for_replica_s: float | None = None) -> None:
        if routing not in ROUTINGS:
            raise InputError(f"unknown routing {routing!r} (known: {', '.join(ROUTINGS)})", field="--routing")
        # Each replica gets its share of the run's connections (the concurrency cap is global).
        self.replicas = [Replica(f"r{i}", c, make_client(c)) for i, c in enumerate(cfgs)]
        self.routing = routing
        self.probe_interval_s = probe_interval_s
        self.wait_for_replica_s = wait_for_replica_s if wait_for_replica_s is not None else cfgs[0].timeout_s
        self.t0 = time.time()
        self._rr = 0
        self._prober: asyncio.Task[None] | None = None
        self.failovers = 0

    @property
    def multi(self) -> bool:
        return len(self.replicas) > 1

    def start(self) -> None:
        if self.multi:
            self._prober = asyncio.create_task(self._probe_loop())

    async def close(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
        for r in self.replicas:
            await r.client.close()

    def pick(self, key: str, exclude: set[str]) -> Replica | None:
        live = [r for r in self.replicas if r.healthy and r.label not in exclude]
        if not live:
            return None
        if self.routing == "sticky":
            # The item's home replica by hash; when it is out, the next one in order.
            h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
            start = h % len(self.replicas)
            order = self.replicas[start:] + self.replicas[:start]
            return next(r for r in order if r in live)
        if self.routing == "round-robin":
            for _ in range(len(self.replicas)):
                r = self.replicas[self._rr % len(self.replicas)]
                self._rr += 1
                if r in live:
                    return r
        return min(live, key=lambda r: r.in_flight)

    async def call(self, key: str, fn: Callable[[Replica], Awaitable[T]],
                   completion_of: Callable[[T], Completion] = lambda x: x  # type: ignore[assignment,return-value]
                   ) -> tuple[T, Replica, list[str]]:
        """Run ``fn`` on a replica for item ``key``; on a replica fault, fail over.

        Returns the result, the replica that produced it, and the labels of the replicas
        that failed before it (empty when the first one answered).
        """
        tried: list[str] = []
        last: tuple[T, Replica] | None = None
        while True:
            rep = self.pick(key, set(tried))
            if rep is None and self.multi and len(tried) < len(self.replicas):
                rep = await self._wait_for_one(set(tried))
            if rep is None and last is None:
                # Every replica is out and none came back in time, and this item has not been
                # sent yet: send it anyway, so its outcome is a real attempt's, not an invention.
                rep = next(r for r in self.replicas if r.label not in tried)
            if rep is None:
                # Every replica failed this item: the last failure is its recorded outcome.
                assert last is not None
                return last[0], last[1], tried[:-1]
            rep.in_flight += 1
            try:
                res = await fn(rep)
            finally:
                rep.in_flight -= 1
            comp = completion_of(res)
            if not (self.multi and comp.outcome in REPLICA_FAULTS):
                return res, rep, tried
            rep.take_out(f"{comp.outcome}: {comp.error or ''}")
            tried.append(rep.label)
            self.failovers += 1
            last = (res, rep)

    async def _wait_for_one(self, exclude: set[str]) -> Replica | None:
        """All replicas this item may use are out: wait (bounded) for the prober to bring one back."""
        deadline = time.monotonic() + self.wait_for_replica_s
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.2, self.probe_interval_s))
            rep = self.pick("", exclude)
            if rep is not None:
                return rep
        return None

    async def _probe_loop(self) -> None:
        """Health: a replica that stops answering ``/models`` leaves; one that answers again returns."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as sess:
            while True:
                await asyncio.sleep(self.probe_interval_s)
                for r in self.replicas:
                    ok = await healthy(sess, r.cfg)
                    if ok and not r.healthy:
                        r.put_back()
                    elif not ok and r.healthy:
                        r.take_out("health check failed (/models)")

    def report(self) -> list[dict[str, Any]]:
        return [r.report(self.t0) for r in self.replicas]


async def healthy(sess: aiohttp.ClientSession, cfg: EndpointConfig) -> bool:
    """The replica answers ``/models`` with HTTP 200 and still serves the model."""
    try:
        async with sess.get(cfg.base_url.rstrip("/") + "/models",
                            headers={"Authorization": f"Bearer {cfg.api_key}"}) as resp:
            if resp.status != 200:
                return False
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False
    return isinstance(body, dict) and any(
        isinstance(m, dict) and m.get("id") == cfg.model for m in body.get("data", []))


def split_concurrency(base: EndpointConfig, urls: list[tuple[str, str, str]]) -> list[EndpointConfig]:
    """One EndpointConfig per replica (url, model, key), each pool sized for the whole run:
    after a failover one replica may carry every in-flight request."""
    return [replace(base, base_url=u, model=m, api_key=k) for u, m, k in urls]
