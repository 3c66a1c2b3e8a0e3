"""Concurrency sweep: throughput, goodput and tail latency per level; knee, saturation, SLO, cost.

Levels are eval runs on the real prompts under the structured-output contract. Figures: efficiency
``thr(N) / (N · thr(1))`` (baseline the lowest level); marginal gain ``Δthr / (Δc · thr(1))``; the
**knee**, the first level where either falls below its threshold; **saturation**, the first level
after which throughput is flat (< ``flat_pct``) while p95 rises (> ``p95_rise_pct``); per p95 target
the highest-throughput level meeting it; cost per 1,000 queries ``hourly / (req/s · 3600) · 1000``.
Arithmetic in :mod:`.analysis`, rendering in :mod:`.render`, both usable on ``sweep.json``."""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import field_validator, model_validator

from nlq2sql.errors import InputError
from nlq2sql.inputs import MAX_NUM_SEQS
from nlq2sql.load.analysis import Thresholds, analyse
from nlq2sql.load.contract import ClientSeen, LevelStats, Machine, endpoint_labels
from nlq2sql.load.driver import (
    LevelContext,
    LoadMode,
    LoadSettings,
    Mode,
    ModeSettings,
    Progress,
    drive,
    next_in,
    option,
    prepare_out,
    register,
)
from nlq2sql.load.levels import load_level_dirs, run_level
from nlq2sql.load.output import write_outputs
from nlq2sql.load.render import fmt_num, plot, render_markdown
from nlq2sql.load.results import ServerSweepResult, SettingRow, SweepResult, SweepSettings, load_result
from nlq2sql.load.slo import Slo, correct_goodput, parse_slos
from nlq2sql.records.rundir import RunDir
from nlq2sql.run.endpoint_facts import EndpointFacts
from nlq2sql.run.live import bound_endpoint

__all__ = ["ReanalyseMode", "ServerSweepMode", "ServerSweepSettings", "SweepConfig", "SweepMode",
           "assemble", "parse_server_sweep", "render_server_sweep", "summarise_setting"]


class SweepConfig(LoadSettings):
    """A concurrency sweep's settings (the one declaration: CLI, library and ``job.json`` read it)."""

    levels: tuple[int, ...] = option((1, 2, 4, 8, 16, 32), "--concurrency", min_length=1)
    slo_p95: tuple[float, ...] = option((), "--slo-p95")
    gpu_cost_per_hour: float | None = option(None, "--gpu-cost-per-hour", ge=0)
    thresholds: Thresholds = Thresholds()
    duration_s: float | None = option(None, "--duration", gt=0, allow_inf_nan=False)
    slo: tuple[Slo, ...] = option((), "--slo")  # per-request SLO of correct goodput

    _slos = field_validator("slo", mode="before")(parse_slos)

    @model_validator(mode="after")
    def _checks(self) -> SweepConfig:
        if any(c < 1 for c in self.levels):
            raise InputError("every level must be at least 1", field="--concurrency")
        if any(not (t > 0 and math.isfinite(t)) for t in self.slo_p95):
            raise InputError("p95 targets must be positive, finite seconds", field="--slo-p95")
        th = self.thresholds
        for name, v in (("--efficiency-threshold", th.efficiency), ("--marginal-threshold", th.marginal),
                        ("--flat-pct", th.flat_pct), ("--flat-pct", th.p95_rise_pct)):
            if not 0 <= v <= 1:  # also refuses NaN
                raise InputError(f"must be between 0 and 1, got {v}", field=name)
        return self


@register
class SweepMode(LoadMode[SweepConfig, SweepResult, int, LevelStats]):
    """Closed loop: one level per concurrency, lowest first."""

    name: ClassVar[str] = "sweep"
    stem: ClassVar[str] = "sweep"
    settings_model: ClassVar[type[LoadSettings]] = SweepConfig
    plot = ("plots", plot)

    def who(self) -> str:
        return "run_sweep"  # what job.json said before the driver: older sweeps still resume

    def next_level(self, settings: SweepConfig, done: list[LevelStats]) -> int | None:
        return next_in(sorted(set(settings.levels)), done)

    def run_level(self, ctx: LevelContext[SweepConfig], level: int) -> LevelStats:
        s = ctx.settings
        base = replace(s.base, load=replace(s.base.load, duration_s=s.duration_s))
        d = ctx.out / "levels" / f"c{level}"
        st = run_level(base, ctx.evalset_path, level, d, reuse=s.resume)
        if s.slo:
            st.correct_goodput_per_s = correct_goodput(list(RunDir(d).records()), st.wall_s, s.slo)
        return st

    def describe(self, level: int, stats: LevelStats) -> str:
        return (f"c={level}: {stats.ok}/{stats.n} ok, {fmt_num(stats.req_per_s)} req/s, "
                f"p95 {fmt_num(stats.p95())} s")

    def analyse(self, ctx: LevelContext[SweepConfig], done: list[LevelStats]) -> SweepResult:
        cfg, notes = ctx.settings, ctx.notes
        stats: list[LevelStats] = done
        for st in stats:
            if st.not_sent:
                notes.append(f"c={st.concurrency}: the {cfg.duration_s:g} s duration ended the level; "
                             f"{st.n} requests sent, {st.not_sent} of the {cfg.requests}-request cap not sent.")
        for c in sorted(set(cfg.levels)):
            if cfg.duration_s is None and cfg.requests < 4 * c:
                notes.append(f"c={c}: {cfg.requests} requests = {cfg.requests / c:.1f}× the concurrency, so "
                             "ramp-up and drain are a large part of the level (≥ 4× recommended).")
        loads = [v for s in stats if (m := s.machine) for v in (m.loadavg_1m_start, m.loadavg_1m_end)]
        if loads:
            notes.append(f"Machine load average (1 min) ranged {min(loads):.1f}–{max(loads):.1f} on "
                         f"{os.cpu_count()} CPUs at level starts and ends (it includes the harness and a local "
                         "server; more means other processes competed for the CPU).")
        errs = sum(sum(s.errors.values()) for s in stats)
        if errs:
            notes.append(f"{errs} request(s) failed across levels; see the errors column.")
        if not stats[0].server.observed:
            notes.append("The endpoint exposes no readable /metrics: server running/waiting, KV usage and "
                         "prefix hits are not observed (not zero).")
        return assemble(cfg, stats, ctx.server_info, notes)

    def render(self, result: SweepResult) -> str:
        return render_markdown(result)

    def wrote(self, out: Path) -> str:
        return f"{out / 'sweep.json'}, {out / 'sweep.md'} and plots"


def assemble(cfg: SweepConfig, stats: list[LevelStats], server_info: EndpointFacts, notes: list[str]
             ) -> SweepResult:
    """``sweep.json`` as the sweep builds it (the driver adds ``elapsed_s``, the output layer the rest)."""
    base = cfg.base
    seqs = server_info.max_num_seqs
    label, cpu = endpoint_labels("local vLLM started for the sweep" + (f" (max-num-seqs {seqs})" if seqs else "")
                                 if server_info.started_by_us else None, server_info.endpoint)
    return SweepResult(
        kind="sweep", created=time.time(), model=base.model, evalset=base.evalset, endpoint_label=label,
        cpu_label=cpu, server=server_info,
        config=SweepSettings(levels=sorted(set(cfg.levels)), requests=cfg.requests, slo_p95=list(cfg.slo_p95),
                             gpu_cost_per_hour=cfg.gpu_cost_per_hour, max_tokens=base.sampling.max_tokens,
                             structured=base.sampling.structured, prompt=base.prompt, warmup=cfg.warmup,
                             duration_s=cfg.duration_s, **({"slo": [x.text for x in cfg.slo]} if cfg.slo else {})),
        levels=stats,
        analysis=analyse(stats, cfg.thresholds, cfg.slo_p95, cfg.gpu_cost_per_hour),
        notes=notes,
    )


@register
class ReanalyseMode(Mode[SweepConfig, SweepResult]):
    """Re-analyse the sweep recorded in ``out`` (new thresholds, SLOs or cost) without re-querying."""

    name: ClassVar[str] = "reanalyse"
    stem: ClassVar[str] = "sweep"
    settings_model: ClassVar[type[ModeSettings]] = SweepConfig

    def run(self, settings: SweepConfig, progress: Progress | None = None) -> SweepResult:
        cfg, out = settings, settings.base.out
        typed: SweepResult = load_result(out / "sweep.json", SweepResult)
        stats = load_level_dirs([Path(s.run_dir) for s in typed.levels])
        for s, o in zip(stats, sorted(typed.levels, key=lambda x: x.concurrency), strict=False):
            # measured live (a re-read run cannot measure it again): every field given, so all are written
            s.client = ClientSeen(**o.client.model_dump())
            if (m := o.machine) is not None:  # a re-analysis writes the load averages as floats
                s.machine = Machine(loadavg_1m_start=float(m.loadavg_1m_start),
                                    loadavg_1m_end=float(m.loadavg_1m_end), cpus=m.cpus)
        # The file as read (every declared field), with the levels and analysis redone.
        old = typed.model_dump(mode="json", exclude={"levels", "analysis", "plots"})
        old["config"].update({"slo_p95": list(cfg.slo_p95), "gpu_cost_per_hour": cfg.gpu_cost_per_hour})
        old["server"] = typed.server.to_json()  # how the endpoint came to be: the keys recorded
        redone = SweepResult.model_validate(old | {"levels": stats, "analysis": analyse(
            stats, cfg.thresholds, cfg.slo_p95, cfg.gpu_cost_per_hour)})
        return write_outputs(out, "sweep", redone, render_markdown, ("plots", plot))

    def render(self, result: SweepResult) -> str:
        return render_markdown(result)

    def wrote(self, out: Path) -> str:
        return SweepMode().wrote(out)


# -- server sweep -----------------------------------------------------------------------

SERVER_KNOBS = {"max-num-seqs": "max_num_seqs"}


def parse_server_sweep(text: str) -> tuple[str, tuple[int, ...]]:
    """``max-num-seqs=1,4,16`` → ("max_num_seqs", (1, 4, 16))."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or key not in SERVER_KNOBS:
        raise InputError(f"expected NAME=V1,V2,… with NAME one of {', '.join(SERVER_KNOBS)}; got {text!r}",
                         field="--server-sweep")
    try:
        vals = tuple(int(v) for v in values.split(",") if v.strip())
    except ValueError:
        raise InputError(f"values must be integers, got {values!r}", field="--server-sweep") from None
    if not vals or any(not 1 <= v <= MAX_NUM_SEQS for v in vals):
        raise InputError(f"every value must be between 1 and {MAX_NUM_SEQS:,}, got {values.strip()!r}",
                         field="--server-sweep")
    return SERVER_KNOBS[key], vals


class ServerSweepSettings(ModeSettings):
    """A server sweep: the concurrency sweep run once per value of one local-server knob."""

    sweep: SweepConfig
    knob: str = option("max_num_seqs", "--server-sweep")  # an EvalConfig.server field (SERVER_KNOBS' values)
    values: tuple[int, ...] = option((), "--server-sweep", min_length=1)

    @field_validator("knob")
    @classmethod
    def _known(cls, knob: str) -> str:
        if knob not in SERVER_KNOBS.values():
            raise InputError(f"unknown server setting {knob!r} (known: {', '.join(SERVER_KNOBS.values())})",
                             field="--server-sweep")
        return knob


@register
class ServerSweepMode(Mode[ServerSweepSettings, ServerSweepResult]):
    """Restart a local server per setting and sweep each; a combined table compares them."""

    name: ClassVar[str] = "server-sweep"
    stem: ClassVar[str] = "server-sweep"
    settings_model: ClassVar[type[ModeSettings]] = ServerSweepSettings

    def run(self, settings: ServerSweepSettings, progress: Progress | None = None) -> ServerSweepResult:
        cfg, knob = settings.sweep, settings.knob
        if cfg.base.endpoint is not None:
            raise InputError("--server-sweep restarts a local server; it cannot be used with --endpoint",
                             field="--server-sweep")
        prepare_out(cfg.base.out, cfg.force)
        rows = []
        for v in settings.values:
            sub = cfg.base.out / f"{knob.replace('_', '-')}-{v}"
            if progress:
                progress(f"starting a local server with {knob.replace('_', '-')}={v}")
            setting: dict[str, Any] = {knob: v}  # one server knob, chosen by name
            with bound_endpoint(replace(cfg.base, server=replace(cfg.base.server, **setting))) as (bound, facts):
                res = drive(SweepMode(), cfg.but(base=replace(bound, out=sub), force=True), progress,
                            server_info=facts)
            rows.append(summarise_setting(v, str(sub), res))
        combined = ServerSweepResult(kind="server-sweep", knob=knob, values=list(settings.values), settings=rows)
        return write_outputs(cfg.base.out, "server-sweep", combined, render_server_sweep)

    def render(self, result: ServerSweepResult) -> str:
        return render_server_sweep(result)

    def wrote(self, out: Path) -> str:
        return f"{out / 'server-sweep.md'} and one sweep per setting"


def summarise_setting(value: int, sub: str, res: SweepResult) -> SettingRow:
    """One setting's row: its sweep's peak (and where), knee, saturation and the server's own peaks."""
    lv = [s for s in res.levels if s.req_per_s]
    peak = max(lv, key=lambda s: s.req_per_s or 0.0) if lv else None
    return SettingRow(value=value, dir=sub,
                      peak_req_per_s=peak.req_per_s if peak else None,
                      peak_at=peak.concurrency if peak else None,
                      p95_at_peak=peak.latency_s.p95 if peak else None,
                      n_at_peak=peak.n if peak else None,
                      knee=res.analysis.knee.level,
                      saturation=res.analysis.saturation.level,
                      running_peak=max((s.server.running.peak or 0 for s in res.levels), default=None),
                      waiting_peak=max((s.server.waiting.peak or 0 for s in res.levels), default=None),
                      levels=[(s.concurrency, s.req_per_s, s.latency_s.p95) for s in res.levels])


def render_server_sweep(combined: ServerSweepResult) -> str:
    knob = combined.knob.replace("_", "-")
    md = [f"# Server sweep over {knob}", "",
          "Each setting restarted the local CPU vLLM and ran the full concurrency sweep "
          "(its own sweep.md in the sub-directory).", "",
          f"| {knob} | peak req/s (at c, n) | p95 at peak | knee | saturation | server running peak | "
          "server waiting peak |", "|---:|---|---:|---:|---:|---:|---:|"]
    for s in combined.settings:
        md.append(f"| {s.value} | {fmt_num(s.peak_req_per_s)} (c={s.peak_at}, n={s.n_at_peak}) "
                  f"| {fmt_num(s.p95_at_peak)} s | {s.knee or 'none'} | {s.saturation or 'none'} "
                  f"| {s.running_peak} | {s.waiting_peak} |")
    levels = sorted({c for s in combined.settings for c, _, _ in s.levels})
    md += ["", "req/s by concurrency:", "", "| " + knob + " | " + " | ".join(f"c={c}" for c in levels) + " |",
           "|---:|" + "---:|" * len(levels)]
    for s in combined.settings:
        by = {c: r for c, r, _ in s.levels}
        md.append(f"| {s.value} | " + " | ".join(fmt_num(by.get(c)) for c in levels) + " |")
    md.append("\nCPU-only vLLM: these timings rank settings on this machine; they are not GPU numbers.")
    return "\n".join(md) + "\n"
