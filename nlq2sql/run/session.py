"""What a run's sessions add up to: each session's own figures (throughput, load shape, the
client's CPU and loop lag, the server's /metrics) and the summary re-derived from every record
on disk, so a resumed run's summary counts all its sessions' items exactly once.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql.answers.kinds import summary_fields
from nlq2sql.records.item import iter_item_records
from nlq2sql.records.results import Manifest, Summary
from nlq2sql.records.run_parts import Fleet, FleetSession, Harness, ReplicaFigures, ServerMetrics
from nlq2sql.records.store import MANIFEST, RECORD_VERSION, RECORDS, SUMMARY, records_digest, write_json_atomic
from nlq2sql.records.summary_parts import Compactness, LoadShape, Throughput, WorkerFigures
from nlq2sql.stages.pipeline import summarise_file
from nlq2sql.stages.score import spread

if TYPE_CHECKING:
    from nlq2sql.run.config import EvalConfig
    from nlq2sql.stages.guardrail import RuleSet

__all__ = ["Session", "finish_summary", "fleet_summary", "recorded_retries", "session_result"]


@dataclass
class Session:
    """What one session (of one or several processes) adds to the summary: its own figures,
    built as they are measured; :func:`finish_summary` puts them in the summary."""

    wall_s: float
    items_this_session: int
    not_sent: int
    startup_s: float | None
    server_metrics: ServerMetrics  # the endpoint's /metrics, as sampled (transport.server_metrics)
    fleet: FleetSession | None  # several replicas: the pool's report (run.pool), summed up by fleet_summary
    retries_used: int
    harness: Harness | None
    load: LoadShape
    compiles: int | None = None  # distinct MetricFlow compiles this session needed
    #: Several client workers: the query shapes their warehouses compiled (each its own), joined.
    worker_shapes: frozenset[str] = frozenset()


def session_result(cfg: EvalConfig, wall: float, sent: int, n: int, server_metrics: ServerMetrics,
                   fleet: FleetSession | None, retries_used: int,
                   harness: Harness | None = None, startup_s: float | None = None,
                   workers: WorkerFigures | None = None) -> Session:
    """What one session (of one or several processes) adds to the summary.  ``startup_s``:
    how much of ``wall`` went on starting client workers before the first request (their
    interpreters, imports and warehouses) -- counted in the wall time, so in req/s.
    ``workers``: what became of several client workers (losses, restarts, start-up)."""
    load = cfg.load
    several = cfg.workers > 1 or cfg.engine != "local"
    shape = LoadShape(mode="open-loop Poisson" if load.rate else "closed loop", offered_rate=load.rate,
                      max_in_flight=cfg.concurrency, duration_s=load.duration_s,
                      arrival_seed=load.arrival_seed if load.rate else None)
    if several:
        shape.workers, shape.engine = cfg.workers, cfg.engine
    if workers is not None:
        shape.lost_workers, shape.restarted_workers = workers.lost_workers, workers.restarted_workers
        shape.requeued_items, shape.worker_losses = workers.requeued_items, workers.worker_losses
        shape.worker_startup_s = workers.worker_startup_s
    return Session(wall_s=wall, items_this_session=sent, not_sent=n - sent, startup_s=startup_s,
                   server_metrics=server_metrics, fleet=fleet,
                   retries_used=retries_used, harness=harness,
                   load=shape)


def recorded_retries(records_path: Path) -> tuple[set[str], int]:
    """Ids already recorded and the retries they took (one wait recorded per retry).

    Retries spent by items that were in flight when a run died are not counted: those items
    are redone from their first attempt, exactly as in an uninterrupted run.
    """
    done: set[str] = set()
    used = 0
    if records_path.exists():
        for rec in iter_item_records(records_path):
            done.add(rec.id)
            used += rec.retries()
    return done, used


def finish_summary(out: Path, rulesets: list[RuleSet], session: Session, manifest: Manifest) -> Summary:
    """Summary from the records on disk (all sessions), plus this session's throughput; written
    (``summary.json``, then the manifest with its finish time) and returned."""
    base = summarise_file(out / RECORDS, rulesets, summary_fields)
    outcomes: Counter[str] = Counter()
    ws: list[int] = []
    chars: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    retries = 0
    for rec in iter_item_records(out / RECORDS):
        req = rec.request
        outcomes[rec.outcome or "n/a"] += 1
        white, size = req.whitespace_chars, req.chars
        if white is not None and size is not None:
            ws.append(white)
            chars.append(size)
        retries += rec.retries()
        # (with several replicas an item's span is every attempt's: latency_e2e_s, failovers included)
        e2e = req.latency_e2e_s
        took, started = e2e if e2e is not None else req.latency_s, req.started
        if started and took is not None:
            starts.append(started)
            ends.append(started + took)
    n_ok = outcomes.get("ok", 0)
    wall, sent, startup = session.wall_s, session.items_this_session, session.startup_s
    throughput = Throughput(items_this_session=sent, wall_s=wall, req_per_s=sent / wall if wall else None,
                            span_s_all_records=(max(ends) - min(starts)) if starts else None,
                            completed_ok=n_ok, not_sent=session.not_sent)
    if startup is not None:
        throughput.startup_s = startup
        throughput.req_per_s_after_startup = sent / (wall - startup) if wall > startup else None
    several = bool(session.fleet or manifest.replicas)
    budget = manifest.retry_budget
    summary = Summary.of(
        base, outcomes=dict(outcomes), errors_by_class={k: v for k, v in outcomes.items() if k != "ok"},
        compactness=Compactness(n=len(ws), outputs_without_whitespace=sum(1 for w in ws if w == 0),
                                whitespace_chars=spread([float(w) for w in ws]),
                                chars=spread([float(c) for c in chars])),
        throughput=throughput, load=session.load,
        # This session's client: CPU share and event-loop lag, and whether it was saturated.
        harness=session.harness,
        server_metrics=ServerMetrics(observed=False, note="several replicas: see fleet.server_metrics, one per replica")
        if several else session.server_metrics,
        **({"fleet": fleet_summary(out, manifest, session.fleet)} if several else {}),
        # The whole run's, from the records (a resumed run counts its earlier sessions too).
        retries_used=retries, retry_budget=budget.model_copy(update={"used": retries}) if budget is not None else None,
        # distinct MetricFlow compiles this session needed (several workers: their shapes, joined)
        **({"compiles": session.compiles} if session.compiles is not None else {}),
        **({"column_rule": manifest.column_rule} if manifest.column_rule is not None else {}),
        records=records_digest(out / RECORDS),  # what `compare` checks the records against
        record_version=RECORD_VERSION)
    write_json_atomic(out / SUMMARY, summary.to_json())
    manifest.finished = time.time()
    write_json_atomic(out / MANIFEST, manifest.to_json())
    return summary


@dataclass
class _Tally:
    """One replica's requests, as its records say."""

    requests: int = 0
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    lat: list[float] = field(default_factory=list)
    failed_here: int = 0


def fleet_summary(out: Path, manifest: Manifest, session: FleetSession | None) -> Fleet:
    """Per replica: requests, outcomes and latency from the records (every session of the
    run), and this session's time out of rotation and events."""
    per: dict[str, _Tally] = {}
    for rec in iter_item_records(out / RECORDS):
        req = rec.request
        label = req.replica
        if label is None:
            continue
        st = per.setdefault(label, _Tally())
        st.requests += 1
        latency = req.latency_s
        if rec.outcome == "ok":
            st.ok += 1
            if latency is not None:
                st.lat.append(float(latency))
        else:
            st.errors[rec.outcome or "n/a"] += 1
        for lab in req.failed_over_from or ():
            per.setdefault(lab, _Tally()).failed_here += 1
    live = {r.label: r for r in session.replicas} if session is not None else {}
    rows = []
    for rep in manifest.replicas or []:
        st = per.get(rep.label, _Tally())
        row = ReplicaFigures(label=rep.label, url=rep.url, model=rep.model, answered=st.requests, ok=st.ok,
                             errors=dict(st.errors), failed_then_resent=st.failed_here, latency_s=spread(st.lat))
        if rep.label in live:  # this session's time out of rotation
            now = live[rep.label]
            row.out_of_rotation_s, row.first_out_after_s = now.out_of_rotation_s, now.first_out_after_s
            row.in_rotation_at_end = now.in_rotation_at_end
            row.events = now.events
        rows.append(row)
    return Fleet(routing=manifest.routing, failovers_this_session=session.failovers if session else None,
                 replicas=rows, server_metrics=session.server_metrics if session else None)
