"""Several replicas of one model behind one run: routing, failover, circuit breakers, attribution.

A record names the replica that answered. A replica's breaker *opens* on a server failure
(connection refused or reset, a cut stream: at once; HTTP 5xx or timeout: ``FAILURE_THRESHOLD`` in a
row) or a failing ``/models``: its items in flight fail over (not a retry: no budget charged), none
lost or counted twice. *Half-open* after a back-off (``probe_interval_s``, doubled per failed probe
up to ``PROBE_BACKOFF_MAX_S``), it closes only when a real chat request (``PROBE_QUESTION``) succeeds,
so a live ``/models`` with failing chat, or a stranger on the port, stays out; one reopening within
``FLAP_WINDOW_S`` keeps its back-off. Every attempt is logged (``Trail.attempt_log``) and counted in
the item's ``attempts``, ``retry_waits_s`` and latency. One replica: nothing here changes a run."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import aiohttp

from nlq2sql.errors import InputError
from nlq2sql.records.run_parts import AttemptEntry, ReplicaEvent, ReplicaRotation
from nlq2sql.run.endpoints import ROUTINGS
from nlq2sql.run.pool_probe import healthy, probe_answer
from nlq2sql.transport.client import ATTEMPT_WATCH, Client, EndpointConfig, make_client
from nlq2sql.transport.stream import Completion

__all__ = ["FAILURE_THRESHOLD", "FAIL_FAST", "FLAP_WINDOW_S", "PROBE_BACKOFF_MAX_S", "REPLICA_FAULTS", "Attempt",
           "Pool", "Replica", "Trail", "probe_chat", "split_concurrency"]

#: Outcomes that mean the replica, not the request, failed: they count against its breaker,
#: and the item fails over to another replica.
REPLICA_FAULTS = frozenset({"connection_error", "stream_error", "http_5xx", "timeout"})
#: Not retried on the same replica when there are others to fail over to (a dead server
#: refuses every retry, a hung one hangs every retry; the next replica is the better bet).
#: HTTP 5xx is retried there under the run's budget, until the replica's breaker opens.
FAIL_FAST = frozenset({"connection_error", "stream_error", "timeout"})
#: Faults that open a breaker at once: no server is there (refused), or it dropped the
#: connection.  HTTP 5xx and timeouts may be one request's bad luck: they open it after
#: ``FAILURE_THRESHOLD`` in a row (any answer in between resets the count).
OPEN_AT_ONCE = frozenset({"connection_error", "stream_error"})
FAILURE_THRESHOLD = 3
#: Rate limiting says nothing about the replica's health: neither a failure nor a success.
NEUTRAL = frozenset({"http_429"})
PROBE_BACKOFF_MAX_S = 30.0  # the longest wait between two half-open probes of one replica
FLAP_WINDOW_S = 30.0  # opened again within this long of closing: it keeps (and doubles) its back-off

T = TypeVar("T")


@dataclass
class Replica:
    """One endpoint's client, its circuit breaker, and what happened to it during this session."""

    label: str
    cfg: EndpointConfig
    client: Client
    in_flight: int = 0
    state: str = "closed"  # closed (in rotation) | open (out) | half-open (out, a probe in flight)
    failures: int = 0  # consecutive replica faults while closed
    level: int = 0  # back-off exponent: the next probe waits probe_interval_s * 2**level
    next_probe: float = 0.0  # monotonic time of the next half-open probe (while open)
    closed_at: float | None = None  # monotonic time it last came back
    probes: int = 0  # probes sent this open spell
    probes_total: int = 0
    probes_failed: int = 0
    last_probe: str | None = None  # the last probe's verdict: ok, or why not
    events: list[ReplicaEvent] = field(default_factory=list)  # out of / back in rotation
    down_since: float | None = None
    out_s: float = 0.0
    t0: float = field(default_factory=time.time)  # the session's start (the pool's): events' ``after_s``

    @property
    def healthy(self) -> bool:
        """In rotation (the breaker is closed)."""
        return self.state == "closed"

    def observe(self, outcome: str, error: str | None, base_s: float) -> None:
        """One request's outcome on this replica: a fault counts towards opening the breaker,
        any answer resets the count.  Seen while open or half-open, nothing changes: only a probe
        closes it, and failures of requests sent before it opened do not lengthen the back-off."""
        if outcome in NEUTRAL or self.state != "closed":
            return
        if outcome not in REPLICA_FAULTS:
            self.failures = 0
            return
        self.failures += 1
        if outcome in OPEN_AT_ONCE or self.failures >= FAILURE_THRESHOLD:
            times = f" ({self.failures} in a row)" if self.failures > 1 else ""
            self.trip(f"{outcome}{times}: {error or ''}", base_s)

    def trip(self, reason: str, base_s: float) -> None:
        """Open the breaker: out of rotation until a probe chat succeeds."""
        if self.state != "closed":
            return
        now = time.monotonic()
        # Back soon after the last time out: a flapping replica keeps its longer back-off.
        if self.closed_at is not None and now - self.closed_at < FLAP_WINDOW_S:
            self.level += 1
        else:
            self.level = 0
        self.state, self.failures, self.probes = "open", 0, 0
        self.next_probe = now + self.backoff(base_s)
        self.down_since = time.time()
        self.events.append(ReplicaEvent(event="out", t=self.down_since, reason=reason[:200],
                                        after_s=round(self.down_since - self.t0, 3)))

    def backoff(self, base_s: float) -> float:
        return float(min(PROBE_BACKOFF_MAX_S, base_s * 2 ** min(self.level, 16)))

    def probe_failed(self, base_s: float) -> None:
        self.probes_failed += 1
        self.level += 1
        self.state = "open"
        self.next_probe = time.monotonic() + self.backoff(base_s)

    def close(self) -> None:
        """A probe chat succeeded: back in rotation."""
        if self.state == "closed":
            return
        now = time.time()
        self.out_s += now - (self.down_since or now)
        self.state, self.down_since, self.failures = "closed", None, 0
        self.closed_at = time.monotonic()
        self.events.append(ReplicaEvent(event="back", t=now, reason="probe chat ok", probes=self.probes,
                                        after_s=round(now - self.t0, 3)))

    def report(self) -> ReplicaRotation:
        out_s = self.out_s + (time.time() - self.down_since if self.down_since else 0.0)
        events = list(self.events)
        return ReplicaRotation(label=self.label, url=self.cfg.base_url, model=self.cfg.model,
                               in_rotation_at_end=self.healthy, out_of_rotation_s=round(out_s, 3),
                               first_out_after_s=next((e.after_s for e in events if e.event == "out"), None),
                               probes=self.probes_total, probes_failed=self.probes_failed, last_probe=self.last_probe,
                               events=events)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One request an item made on one replica, as the attempt watch saw it: sent at ``t``
    (epoch seconds), took ``s``."""

    replica: str
    outcome: str
    http_status: int | None
    t: float
    s: float


@dataclass
class Trail:
    """How one item was answered over the pool: the replicas that failed it first, and every
    request it made on every replica (``attempt_log``: replica, outcome, HTTP status, sent
    ``at_s`` after the item's first request, ``took_s``), with the end-to-end latency from its
    first request to its last one's end (retry waits and failovers included)."""

    failed_over_from: list[str] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    latency_e2e_s: float | None = None

    def attempt_log(self, started: float) -> list[AttemptEntry]:
        return [AttemptEntry(replica=a.replica, outcome=a.outcome, http_status=a.http_status,
                             at_s=round(max(0.0, a.t - started), 3), took_s=round(a.s, 3)) for a in self.attempts]


class Pool:
    """The replicas of one run; ``call`` routes an item, fails over, and says who answered."""

    def __init__(self, cfgs: list[EndpointConfig], routing: str = "least-inflight",
                 probe_interval_s: float = 1.0, wait_for_replica_s: float | None = None) -> None:
        if routing not in ROUTINGS:
            raise InputError(f"unknown routing {routing!r} (known: {', '.join(ROUTINGS)})", field="--routing")
        # Each replica gets its share of the run's connections (the concurrency cap is global).
        self.t0 = time.time()
        self.replicas = [Replica(f"r{i}", c, make_client(c), t0=self.t0) for i, c in enumerate(cfgs)]
        self.routing = routing
        self.probe_interval_s = probe_interval_s
        self.wait_for_replica_s = wait_for_replica_s if wait_for_replica_s is not None else cfgs[0].timeout_s
        self._rr = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._probes: set[asyncio.Task[None]] = set()
        self.failovers = 0

    @property
    def multi(self) -> bool:
        return len(self.replicas) > 1

    def start(self) -> None:
        if self.multi:
            self._tasks = [asyncio.create_task(self._models_loop()), asyncio.create_task(self._breaker_loop())]

    async def close(self) -> None:
        for task in [*self._tasks, *self._probes]:
            task.cancel()
        for task in [*self._tasks, *self._probes]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks, self._probes = [], set()
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
                   ) -> tuple[T, Replica, Trail]:
        """Run ``fn`` on a replica for item ``key``; on a replica fault, fail over.

        Returns the result, the replica that produced it, and the item's trail (the replicas
        that failed it first, every attempt).  With several replicas the result's completion
        counts every replica's attempts, retry waits and unsent re-sends, and starts at the
        item's first request."""
        trail = Trail()
        spent: list[Completion] = []  # what the replicas that failed this item gave
        last: tuple[T, Replica] | None = None
        while True:
            tried = trail.failed_over_from
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
                trail.failed_over_from = tried[:-1]
                self._account(completion_of(last[0]), spent[:-1], trail)
                return last[0], last[1], trail
            seen = len(trail.attempts)
            rep.in_flight += 1
            token = ATTEMPT_WATCH.set(self._watch(rep, trail)) if self.multi else None
            try:
                res = await fn(rep)
            finally:
                if token is not None:
                    ATTEMPT_WATCH.reset(token)
                rep.in_flight -= 1
            comp = completion_of(res)
            if not (self.multi and comp.outcome in REPLICA_FAULTS):
                self._account(comp, spent, trail)
                return res, rep, trail
            if len(trail.attempts) == seen:  # (every request path reports; never a silent fault)
                rep.observe(comp.outcome, comp.error, self.probe_interval_s)
            tried.append(rep.label)
            self.failovers += 1
            spent.append(comp)
            last = (res, rep)

    def _watch(self, rep: Replica, trail: Trail) -> Callable[[str, int | None, str | None, float, float], bool]:
        """The attempt watch for one item's call on ``rep``: log, feed the breaker, and keep
        retrying there only while the breaker is closed."""
        def seen(outcome: str, status: int | None, error: str | None, sent_at: float, took_s: float) -> bool:
            trail.attempts.append(Attempt(rep.label, outcome, status, sent_at, took_s))
            rep.observe(outcome, error, self.probe_interval_s)
            return rep.healthy
        return seen

    def _account(self, final: Completion, spent: list[Completion], trail: Trail) -> None:
        """The answering completion counts what the replicas that failed the item before spent."""
        if not self.multi:
            return
        started = min([c.started for c in (*spent, final) if c.started] + [a.t for a in trail.attempts]
                      or [time.time()])
        if spent:
            final.attempts += sum(c.attempts for c in spent)
            final.retry_waits_s = [w for c in spent for w in c.retry_waits_s] + list(final.retry_waits_s)
            final.unsent_retries += sum(c.unsent_retries for c in spent)
        final.started = started
        trail.latency_e2e_s = time.time() - started

    async def _wait_for_one(self, exclude: set[str]) -> Replica | None:
        """All replicas this item may use are out: wait (bounded) for a probe to bring one back."""
        deadline = time.monotonic() + self.wait_for_replica_s
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.2, self.probe_interval_s))
            rep = self.pick("", exclude)
            if rep is not None:
                return rep
        return None

    async def _models_loop(self) -> None:
        """A replica in rotation that stops answering ``/models`` (or stops serving the model) is
        taken out.  ``/models`` never brings one back: only a probe chat does."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as sess:
            while True:
                await asyncio.sleep(self.probe_interval_s)
                closed = [r for r in self.replicas if r.healthy]
                for r, ok in zip(closed, await asyncio.gather(*(healthy(sess, r.cfg) for r in closed)),
                                 strict=True):
                    if not ok:
                        r.trip("health check failed (/models)", self.probe_interval_s)

    async def _breaker_loop(self) -> None:
        """Half-open probes, each replica on its own back-off (a hung probe holds up no other)."""
        while True:
            await asyncio.sleep(min(0.1, self.probe_interval_s))
            now = time.monotonic()
            for r in self.replicas:
                if r.state == "open" and now >= r.next_probe:
                    r.state = "half-open"
                    task = asyncio.create_task(self._half_open(r))
                    self._probes.add(task)
                    task.add_done_callback(self._probes.discard)

    async def _half_open(self, r: Replica) -> None:
        r.probes += 1
        r.probes_total += 1
        if await probe_chat(r):
            r.close()
        else:
            r.probe_failed(self.probe_interval_s)

    def report(self) -> list[ReplicaRotation]:
        return [r.report() for r in self.replicas]


async def probe_chat(r: Replica) -> bool:
    """The half-open probe of ``r`` (``pool_probe.probe_answer``); ``r.last_probe`` says why one failed."""
    r.last_probe = await probe_answer(r.cfg)
    return r.last_probe == "ok"


def split_concurrency(base: EndpointConfig, urls: list[tuple[str, str, str]]) -> list[EndpointConfig]:
    """One EndpointConfig per replica (url, model, key), each pool sized for the whole run:
    after a failover one replica may carry every in-flight request."""
    return [replace(base, base_url=u, model=m, api_key=k) for u, m, k in urls]
