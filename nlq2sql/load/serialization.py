"""Serialization verdict: do concurrent requests become batched work, and if not, where do they queue?

Evidence: (1) the load curve at c=1 and c=K (flat throughput with p95 growing ~linearly is the
serialized signature); (2) client in-flight vs the server's running/waiting from ``/metrics``
(held but neither run nor queued means queued *upstream*); (3) a staircase of N independent OS
processes (completions at ≈ 1×, 2×, 3× … one service time: the queue is beyond the client);
(4) the harness's own CPU share (near a full core: it is the bottleneck). Verdict ``batched`` /
``serialized-upstream`` / ``serialized-at-engine`` / ``client-bound`` / ``inconclusive``, with the
numbers and the rule that fired; without ``/metrics`` a serialized endpoint is inconclusive."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from nlq2sql.answers.kinds import bind_sampling
from nlq2sql.errors import InputError
from nlq2sql.inputs import MAX_REQUESTS
from nlq2sql.load.contract import LevelStats
from nlq2sql.load.driver import LevelContext, LoadMode, LoadSettings, option, register
from nlq2sql.load.levels import run_level
from nlq2sql.load.oneshot import Shot
from nlq2sql.load.render import fmt_num
from nlq2sql.load.results import SerializationResult
from nlq2sql.load.server_results import Evidence, SerializationSettings, Staircase
from nlq2sql.run.config import EvalConfig
from nlq2sql.semantic import load_catalog, open_warehouse
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.transport.client import request_kwargs

VERDICTS = ("batched", "serialized-upstream", "serialized-at-engine", "client-bound", "inconclusive")


@dataclass
class Verdict:
    """What :func:`decide` concludes: the verdict, the rule that fired, and caveats."""

    verdict: str
    rule: str
    caveats: list[str]


@dataclass(frozen=True)
class VerdictThresholds:
    scaled_speedup: float = 1.5  # thr(K)/thr(1) at or above: the endpoint scales
    flat_speedup: float = 1.3  # below: throughput is flat
    staircase_serial: float = 0.6  # staircase index at or above: serialized
    staircase_parallel: float = 0.35  # at or below: parallel
    client_cpu_share: float = 0.85  # harness CPU share of one core at or above: client-bound
    engine_queue_mean: float = 0.5  # mean server waiting at or above: a queue at the engine


class SerializationConfig(LoadSettings):
    """The probe's settings (the one declaration); ``base`` bound to an endpoint or not (a local server)."""

    level: int = option(8, "--level", "The loaded concurrency level K (compared with c=1).", ge=2, le=MAX_REQUESTS)
    requests_single: int = option(6, "--requests-single", "Requests at c=1.", ge=1, le=MAX_REQUESTS)
    requests_level: int = option(24, "--requests-level", "Requests at c=K.", ge=1, le=MAX_REQUESTS)
    staircase: int = option(4, "--staircase", "Independent OS processes started together.", ge=2, le=256)
    solo_runs: int = option(2, "--solo-runs", ge=1, le=64)
    warmup: int = option(2, "--warmup", ge=0, le=MAX_REQUESTS)  # uncounted: a cold server must not flatter
    thresholds: VerdictThresholds = VerdictThresholds()

    def model_post_init(self, _context: Any) -> None:
        if self.requests_level < self.level:
            raise InputError("need ≥ 1 request at c=1 and at least --level requests at c=level", field="--requests")


# -- staircase --------------------------------------------------------------------------

def request_body(cfg: EvalConfig, question: str) -> dict[str, Any]:
    """The eval's structured-output request as a plain JSON body (non-streaming)."""
    wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
    prompt = load_prompt(cfg.prompt, cfg.style, wh)
    kw = request_kwargs(cfg.model, prompt.messages(question), bind_sampling(cfg.sampling, wh.catalog))
    extra = kw.pop("extra_body", {}) or {}
    kw.pop("stream_options", None)
    kw["stream"] = False
    return kw | extra


def launch_together(url: str, body_path: Path, n: int, key_env: str | None,
                    lead_s: float = 1.5, timeout_s: float = 600) -> list[Shot]:
    """Start ``n`` independent processes that each send one request at the same moment."""
    start_at = time.time() + lead_s + 0.1 * n
    args = [sys.executable, "-m", "nlq2sql.load.oneshot", url, str(body_path), f"{start_at:.6f}"]
    if key_env:
        args.append(key_env)
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    results = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        try:
            results.append(Shot.of_line(so.strip().splitlines()[-1]))
        except (json.JSONDecodeError, IndexError, KeyError, TypeError):
            results.append(Shot(start_at=start_at, error=f"worker failed: {se.strip()[-300:]}"))
    return results


def staircase_index(completions: list[float], service_s: float) -> float | None:
    """Least-squares slope of sorted completion times against rank, in single service times.

    ≈ 1 when the k-th request finishes at ≈ k × the single service time (serialized);
    ≈ 0 when all finish together (served in parallel).
    """
    xs = sorted(completions)
    n = len(xs)
    if n < 2 or service_s <= 0:
        return None
    ranks = list(range(1, n + 1))
    mx, my = sum(ranks) / n, sum(xs) / n
    num = sum((r - mx) * (x - my) for r, x in zip(ranks, xs, strict=True))
    den = sum((r - mx) ** 2 for r in ranks)
    return num / den / service_s


def run_staircase(url: str, body: dict[str, Any], n: int, solo_runs: int, workdir: Path,
                  key_env: str | None) -> Staircase:
    workdir.mkdir(parents=True, exist_ok=True)
    body_path = workdir / "staircase-body.json"
    body_path.write_text(json.dumps(body))
    solo: list[float] = []

    def solo_run(k: int) -> None:
        for _ in range(k):
            r = launch_together(url, body_path, 1, key_env, lead_s=0.8)[0]
            if r.status == 200 and (took := r.took_s()) is not None:
                solo.append(took)

    # Single service time measured before *and* after the group; the fastest is used, since
    # other work on the machine can only add time (a stall would otherwise flatten the index).
    before = max(1, solo_runs // 2)
    solo_run(before)
    together = launch_together(url, body_path, n, key_env)
    solo_run(max(1, solo_runs - before))
    ok = [r for r in together if r.status == 200]
    errors = [r.error or f"HTTP {r.status}" for r in together if r.status != 200]
    if not solo or len(ok) < 2:
        return Staircase(n=n, ok=len(ok), errors=errors, solo_n=len(solo), index=None,
                         note="too few successful requests to judge")
    service = min(solo)
    start_at = ok[0].start_at
    comp = sorted(r.done - start_at for r in ok if r.done is not None)  # a worker's line has both
    sent = [r.sent for r in ok if r.sent is not None]
    send_spread = max(sent) - min(sent)
    return Staircase(n=n, ok=len(ok), errors=errors, solo_n=len(solo), service_s=service, solo_s=solo,
                     solo_spread=max(solo) / service if service > 0 else None, completion_s=comp,
                     ratios=[c / service for c in comp], send_spread_s=send_spread,
                     index=staircase_index(comp, service))


# -- verdict (pure) -----------------------------------------------------------------------

def decide(ev: Evidence, th: VerdictThresholds) -> Verdict:
    """Evidence → verdict, the rule that fired, and caveats (any figure of ``ev`` may be None)."""
    k = ev.level
    sp = ev.speedup
    scaled = sp is not None and sp >= th.scaled_speedup
    flat = sp is not None and sp < th.flat_speedup
    st = ev.staircase_index
    stair = st is not None and st >= th.staircase_serial
    parallel = st is not None and st <= th.staircase_parallel
    cpu = ev.client_cpu_share
    infl = ev.inflight_mean
    caveats: list[str] = []

    def out(verdict: str, rule: str) -> Verdict:
        serial = verdict.startswith("serialized")
        if verdict == "batched" and stair:
            caveats.append(f"the process staircase (index {st:.2f}) says serialized")
            return Verdict("inconclusive", rule + "; but the staircase disagrees", caveats)
        if serial and scaled:
            caveats.append(f"the load curve disagrees (throughput ×{sp:.2f} from c=1 to c={k}): the c=1 level "
                           "may have been slowed by other work; the server's own gauges decided")
        if serial and parallel:
            caveats.append(f"the process staircase (index {st:.2f}) says parallel")
            return Verdict("inconclusive", rule + "; but the staircase disagrees", caveats)
        return Verdict(verdict, rule, caveats)

    if infl is not None and infl < 0.5 * k:
        return out("client-bound", f"the client held only {infl:.1f} requests in flight on average at "
                                   f"c={k}: it did not issue the concurrency")
    if cpu is not None and cpu >= th.client_cpu_share and not scaled:
        return out("client-bound", f"the harness used {cpu:.0%} of a core at c={k} while throughput "
                                   f"gained only ×{sp:.2f}")
    if cpu is not None and cpu >= th.client_cpu_share:
        caveats.append(f"the harness used {cpu:.0%} of a core: it may cap the measured throughput")
    if ev.server_observed:
        rp, rm = ev.running_peak or 0, ev.running_mean or 0.0
        wm = ev.waiting_mean or 0.0
        if rp <= 1:
            if wm >= th.engine_queue_mean:
                return out("serialized-at-engine",
                           f"the server ran at most {rp:.0f} request while {wm:.1f} waited on average "
                           f"inside it (client in flight {infl:.1f}): the engine admits one at a time")
            if infl is not None and infl >= 2 and rm + wm < 0.5 * infl:
                return out("serialized-upstream",
                           f"the client kept {infl:.1f} requests in flight but the server saw only "
                           f"{rm + wm:.1f} (running ≤ {rp:.0f}, waiting {wm:.1f}): the queue is in "
                           "front of the engine")
            return out("inconclusive", f"the server ran at most {rp:.0f} request but neither a queue "
                                       "at the engine nor one in front of it is clear")
        if scaled or rm >= 2:
            if not scaled:
                caveats.append(f"the engine batched (running mean {rm:.1f}) but throughput gained only "
                               f"×{sp:.2f}: the engine itself is the limit, not admission")
            return out("batched", f"the server ran up to {rp:.0f} requests at once (mean {rm:.1f}) "
                                  f"and throughput rose ×{sp:.2f} from c=1 to c={k}")
        return out("inconclusive", f"the server ran up to {rp:.0f} at once but only {rm:.1f} on average "
                                   f"and throughput rose ×{sp:.2f}")
    caveats.append("server /metrics not observed: running/waiting unknown")
    if scaled and not stair:
        return out("batched", f"throughput rose ×{sp:.2f} from c=1 to c={k} (endpoint-level evidence)")
    if flat and (stair or st is None):
        return Verdict("inconclusive", f"throughput flat (×{sp:.2f}) and the process staircase "
                       f"{'index ' + format(st, '.2f') if st is not None else 'not run'}: serialized "
                       "somewhere beyond the client, but where (engine or upstream) is not observed", caveats)
    return out("inconclusive", f"throughput rose ×{sp:.2f}; staircase index "
                               f"{'n/a' if st is None else format(st, '.2f')}")


def evidence(single: LevelStats, loaded: LevelStats, stair: Staircase | None) -> Evidence:
    """The verdict's inputs from two level stats (as written in ``level.json``) and the staircase."""
    t1, tk = single.req_per_s, loaded.req_per_s
    p1, pk = single.p95(), loaded.p95()
    sv, c = loaded.server, loaded.client
    return Evidence(
        level=loaded.concurrency,
        thr_1=t1, thr_k=tk, n_1=single.n, n_k=loaded.n,
        speedup=tk / t1 if t1 and tk else None,
        p95_1=p1, p95_k=pk, p95_ratio=pk / p1 if p1 and pk else None,
        inflight_mean=c.inflight_mean, inflight_peak=c.inflight_peak,
        server_observed=sv.observed, server_samples=sv.samples,
        running_peak=sv.running.peak, running_mean=sv.running.mean, running_n=sv.running.n,
        waiting_peak=sv.waiting.peak, waiting_mean=sv.waiting.mean, waiting_n=sv.waiting.n,
        client_cpu_share=c.cpu_share_of_core, client_cpu_ms_per_request=c.cpu_ms_per_request,
        staircase_index=stair.index if stair else None,
    )


# -- run + render -------------------------------------------------------------------------

@register
class SerializationMode(LoadMode[SerializationConfig, SerializationResult, int, LevelStats]):
    """Two levels (c=1 and c=K, each on its own expanded set), then the staircase and the verdict."""

    name: ClassVar[str] = "serialization"
    stem: ClassVar[str] = "serialization"
    settings_model: ClassVar[type[LoadSettings]] = SerializationConfig

    def evalsets(self, settings: SerializationConfig) -> dict[str, int]:
        return {"c1": settings.requests_single, f"c{settings.level}": settings.requests_level}

    def next_level(self, settings: SerializationConfig, done: list[LevelStats]) -> int | None:
        levels = (1, settings.level)
        return levels[len(done)] if len(done) < len(levels) else None

    def run_level(self, ctx: LevelContext[SerializationConfig], level: int) -> LevelStats:
        return run_level(ctx.settings.base, ctx.evalsets[f"c{level}"], level, ctx.out / f"c{level}" / "run")

    def describe(self, level: int, stats: LevelStats) -> str:
        return f"c={level}: {stats.req_per_s or 0:.2f} req/s (n={stats.n})"

    def analyse(self, ctx: LevelContext[SerializationConfig], done: list[LevelStats]) -> SerializationResult:
        cfg, base, out, info = ctx.settings, ctx.settings.base, ctx.out, ctx.server_info
        single, loaded = done
        question = load_evalset(base.evalset, load_catalog(base.semantic_model)).cases[0].question
        stair = run_staircase(str(base.endpoint).rstrip("/") + "/chat/completions", request_body(base, question),
                              cfg.staircase, cfg.solo_runs, out / "staircase", base.api_key_env)
        ev = evidence(single, loaded, stair)
        verdict = decide(ev, cfg.thresholds)
        if (stair.solo_spread or 1) > 2:
            verdict.caveats.append(f"single service times varied ×{stair.solo_spread:.1f} during the "
                                      "staircase (other work on the machine?): the fastest was used")
        return SerializationResult(
            kind="serialization", created=time.time(), elapsed_s=time.time() - ctx.started,
            endpoint=str(base.endpoint) if not info.started_by_us else "local", model=base.model, server=info,
            config=SerializationSettings(level=cfg.level, requests_single=cfg.requests_single, warmup=cfg.warmup,
                                         requests_level=cfg.requests_level, staircase=cfg.staircase,
                                         max_tokens=base.sampling.max_tokens, structured=base.sampling.structured),
            thresholds=asdict(cfg.thresholds), verdict=verdict.verdict, rule=verdict.rule, caveats=verdict.caveats,
            evidence=ev,
            levels=[single, loaded], staircase=stair)

    def render(self, result: SerializationResult) -> str:
        return render_markdown(result)


def render_markdown(r: SerializationResult) -> str:
    """The report, from the typed result (a dict is validated into it first)."""
    ev, st, th, cfg = r.evidence, r.staircase, r.thresholds, r.config
    k = ev.level
    md = [f"# Serialization probe · {r.model} · {r.endpoint}", "",
          f"**Verdict: {r.verdict}** — {r.rule}.", ""]
    md += [f"- caveat: {c}" for c in r.caveats]
    if cfg.warmup:
        md.append(f"\n{cfg.warmup} uncounted warm-up request(s) at c=1 ran first; "
                  f"max_tokens {cfg.max_tokens}, structured {cfg.structured}.")
    md += ["", "## Evidence", "",
           "| evidence | value |", "|---|---|",
           f"| throughput c=1 (n={ev.n_1}) → c={k} (n={ev.n_k}) | "
           f"{fmt_num(ev.thr_1)} → {fmt_num(ev.thr_k)} req/s "
           f"(×{fmt_num(ev.speedup)}; scaled ≥ ×{th['scaled_speedup']}, flat < ×{th['flat_speedup']}) |",
           f"| p95 c=1 → c={k} | {fmt_num(ev.p95_1)} → {fmt_num(ev.p95_k)} s (×{fmt_num(ev.p95_ratio)}) |",
           f"| client in flight at c={k} (n={ev.n_k} requests) | mean {fmt_num(ev.inflight_mean, '{:.1f}')}, "
           f"peak {ev.inflight_peak} |"]
    if ev.server_observed:
        md += [f"| server running at c={k} | peak {fmt_num(ev.running_peak, '{:.0f}')}, mean "
               f"{fmt_num(ev.running_mean, '{:.1f}')} (samples {ev.running_n}) |",
               f"| server waiting at c={k} | peak {fmt_num(ev.waiting_peak, '{:.0f}')}, mean "
               f"{fmt_num(ev.waiting_mean, '{:.1f}')} (samples {ev.waiting_n}) |"]
    else:
        md.append("| server running / waiting | not observed (no readable /metrics) |")
    if st is not None and st.index is not None and st.service_s is not None and st.send_spread_s is not None:
        md.append(f"| process staircase ({st.ok}/{st.n} processes, single service "
                  f"{st.service_s:.2f} s: the fastest of {st.solo_n} solo run(s) before and after, "
                  f"{', '.join(f'{x:.2f}' for x in st.solo_s)} s) | completions "
                  f"{', '.join(f'{x:.2f}' for x in st.completion_s)} s = "
                  f"{', '.join(f'{x:.1f}×' for x in st.ratios)}; index {st.index:.2f} "
                  f"(serialized ≥ {th['staircase_serial']}, parallel ≤ {th['staircase_parallel']}); "
                  f"sends spread {st.send_spread_s * 1000:.0f} ms |")
    else:
        md.append(f"| process staircase | {(st.note if st else None) or 'not run'} "
                  f"({st.ok if st else None}/{st.n if st else None} ok; "
                  f"errors: {', '.join(st.errors if st else []) or 'none'}) |")
    md.append(f"| harness CPU at c={k} | {fmt_num(ev.client_cpu_share, '{:.0%}')} of a core, "
              f"{fmt_num(ev.client_cpu_ms_per_request, '{:.1f}')} ms/request (client-bound ≥ "
              f"{th['client_cpu_share']:.0%}) |")
    m = r.levels[1].machine if len(r.levels) > 1 else None
    if m:
        md.append(f"| machine load average (1 min) around c={k} | {m.loadavg_1m_start:.1f} → "
                  f"{m.loadavg_1m_end:.1f} on {m.cpus} CPUs |")
    md += ["", "The staircase index is the slope of the sorted completion times against their rank, in "
           "single service times: ≈ 1 when the k-th request finishes at ≈ k× the single service time "
           "(serialized), ≈ 0 when all finish together (batched)."]
    return "\n".join(md) + "\n"


__all__ = ["VERDICTS", "SerializationConfig", "SerializationMode", "Verdict", "VerdictThresholds", "decide", "evidence",
           "render_markdown", "run_staircase", "staircase_index"]
