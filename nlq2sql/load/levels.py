"""One load level = one normal eval run over an expanded eval set.

Items are cycled to N requests with unique ids (``ho-001#2`` is the second copy of ``ho-001``),
written beside the results, so each level is an ordinary run directory ``compare`` and
``load-check`` read; :func:`level_stats` gives its figures, each with its sample count."""

from __future__ import annotations

import json
import os
import random
import resource
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from nlq2sql.inputs import MAX_REQUESTS, at_most
from nlq2sql.load.contract import ClientSeen, Gauge, Inflight, LevelStats, Machine, ServerSeen
from nlq2sql.load.slo import is_correct
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.run_parts import Gauge as SummaryGauge
from nlq2sql.records.run_parts import ServerMetrics
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import read_json, write_json_atomic
from nlq2sql.records.summary_parts import Percentiles
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.semantic import load_catalog
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.score import spread


def expand_evalset(evalset: str, requests: int, out_dir: Path, semantic_model: str,
                   seed: int | None = None) -> Path:
    """Write ``<name>-x<N>.jsonl``: the set's items cycled to ``requests`` lines, ids ``id#k``
    (``seed``: the lines in a seeded random order, so a short set's copies do not arrive in
    lock-step; the same seed gives the same order, so levels stay paired item by item)."""
    at_most(requests, MAX_REQUESTS, "--requests")
    es = load_evalset(evalset, load_catalog(semantic_model))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{es.name}-x{requests}.jsonl"
    lines = []
    for i in range(requests):
        case = es.cases[i % len(es.cases)]
        obj = case.model_dump(mode="json")
        obj["id"] = f"{case.id}#{i // len(es.cases) + 1}"
        lines.append(json.dumps(obj, separators=(",", ":")))
    if seed is not None:
        random.Random(seed).shuffle(lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


#: A finished level's stats, written into its run directory last: a level without it did not
#: finish, and ``--resume`` runs it again from the start (a level is one session's measurement).
LEVEL = "level.json"


def run_level(base: EvalConfig, evalset_path: Path, concurrency: int, out: Path,
              rate: float | None = None, *, reuse: bool = False) -> LevelStats:
    """Run one level (``base`` must be bound to an endpoint) and return its stats.

    The harness's own CPU time (this process, all threads) is measured around the run, so
    a level can say when the client, not the server, was the bottleneck.  ``reuse``: a level
    that finished in an earlier session (its ``level.json``) is returned as it was measured.
    """
    if reuse and (out / LEVEL).is_file():
        return LevelStats.from_json(read_json(out / LEVEL), path=str(out / LEVEL))
    cfg = replace(base, evalset=str(evalset_path), out=out, concurrency=concurrency, limit=None,
                  force=True, resume=False, load=replace(base.load, rate=rate))
    load0 = os.getloadavg()[0]
    cpu0, t0 = _cpu_s(), time.monotonic()
    run_eval(cfg)
    cpu, wall = _cpu_s() - cpu0, time.monotonic() - t0
    st = stats_from_run(out, client_cpu_s=cpu, client_wall_s=wall)
    st.machine = Machine(loadavg_1m_start=load0, loadavg_1m_end=os.getloadavg()[0], cpus=os.cpu_count())
    write_json_atomic(out / LEVEL, st.to_json())
    return st


def stats_from_run(run_dir: Path, client_cpu_s: float | None = None,
                   client_wall_s: float | None = None) -> LevelStats:
    """Level stats from a recorded run directory (works offline on old runs too)."""
    run = RunDir(run_dir)
    manifest, summary, records = run.manifest_json(), run.summary(), list(run.records())
    thr = summary.throughput
    client = client_stats(client_cpu_s, client_wall_s, len(records), inflight(intervals(records)))
    st = level_stats(records, thr.wall_s if thr else None, summary.server_metrics,
                     int(manifest.get("concurrency") or 0), run_dir=str(run_dir), client=client)
    load = manifest.get("load") or {}
    st.offered_rate = load.get("rate")
    st.duration_s = load.get("duration_s")
    st.not_sent = thr.not_sent if thr is not None and thr.not_sent is not None else 0  # older runs: absent
    return st


def client_stats(cpu_s: float | None, wall_s: float | None, n: int, seen: Inflight) -> ClientSeen:
    if cpu_s is None or not wall_s:
        return ClientSeen(cpu_s=None, cpu_share_of_core=None, cpu_ms_per_request=None,
                          note="harness CPU not measured (recorded run)", **seen.to_json())
    return ClientSeen(cpu_s=cpu_s, wall_s=wall_s, cpu_share_of_core=cpu_s / wall_s,
                      cpu_ms_per_request=1000 * cpu_s / n if n else None, n=n, **seen.to_json())


def intervals(records: list[ItemRecord]) -> list[tuple[float, float]]:
    """(start, end) of every request that has both."""
    return [(start, start + latency) for r in records
            if (start := r.request.started) and (latency := r.request.latency_s) is not None]


def inflight(spans: list[tuple[float, float]]) -> Inflight:
    """Client-side requests in flight from (start, end) pairs: peak and time-weighted mean."""
    if not spans:
        return Inflight(inflight_peak=None, inflight_mean=None, inflight_n=0)
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                    key=lambda x: (x[0], x[1]))
    cur = peak = 0
    area = 0.0
    last = events[0][0]
    for t, d in events:
        area += cur * (t - last)
        last = t
        cur += d
        peak = max(peak, cur)
    span = events[-1][0] - events[0][0]
    return Inflight(inflight_peak=peak, inflight_mean=area / span if span > 0 else float(peak),
                    inflight_n=len(spans))


def level_stats(records: list[ItemRecord], wall_s: float | None,
                server_metrics: ServerMetrics | None, concurrency: int, *, run_dir: str,
                client: ClientSeen) -> LevelStats:
    """Throughput, goodput, tokens, latency percentiles, errors and server gauges for one level
    (``run_dir``: where it was recorded; ``client``: the harness seen around it)."""
    n = len(records)
    ok = [r for r in records if r.outcome == "ok"]
    good = [r for r in ok if is_correct(r)]
    errors = Counter(r.outcome or "n/a" for r in records if r.outcome != "ok")
    finish = Counter(r.answer.finish_reason or "n/a" for r in records)
    out_tokens = sum(r.request.completion_tokens or 0 for r in ok)

    def rate(k: float) -> float | None:
        return k / wall_s if wall_s else None

    def pct(key: str) -> Percentiles:
        return spread([float(v) for r in ok if (v := r.get(key)) is not None])

    sm = server_metrics
    observed = sm is not None and sm.observed

    def gauge(g: SummaryGauge | None) -> Gauge:
        if not observed or g is None or not g.n:
            return Gauge(n=0, peak=None, mean=None, note="not observed")
        return Gauge(n=g.n, peak=g.peak, mean=g.mean)

    return LevelStats(
        concurrency=concurrency, n=n, ok=len(ok), good=len(good),
        schema_valid=sum(1 for r in ok if r.answer.raw_intent is not None),
        wall_s=wall_s,
        req_per_s=rate(len(ok)), goodput_per_s=rate(len(good)),
        output_tok_per_s=rate(out_tokens), output_tokens=out_tokens,
        errors=dict(errors), finish_reasons=dict(finish),
        latency_s=pct("latency_s"), ttft_s=pct("ttft_s"), itl_s=pct("itl_mean_s"),
        completion_tokens=pct("completion_tokens"), prompt_tokens=pct("prompt_tokens"),
        latency_from_arrival_s=pct("latency_from_arrival_s"), queued_s=pct("queued_s"),
        server=ServerSeen(observed=observed, samples=sm.samples if sm is not None and sm.samples is not None else 0,
                          interval_s=sm.interval_s if sm is not None else None,
                          running=gauge(sm.running if sm else None), waiting=gauge(sm.waiting if sm else None),
                          kv_cache_usage=gauge(sm.kv_cache_usage if sm else None),
                          prefix_cache_hit_rate=sm.prefix_cache_hit_rate if sm is not None and observed else None),
        run_dir=run_dir, client=client,
    )


def load_level_dirs(dirs: list[Path]) -> list[LevelStats]:
    """Stats for recorded level runs, sorted by concurrency."""
    return sorted((stats_from_run(d) for d in dirs), key=lambda s: s.concurrency)


__all__ = ["LEVEL", "expand_evalset", "inflight", "intervals", "level_stats", "load_level_dirs", "run_level",
           "stats_from_run"]
