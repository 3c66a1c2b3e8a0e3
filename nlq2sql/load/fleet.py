"""A sweep over a fleet: the whole (items routed over every replica) and each replica alone; the
fleet's peak beside the sum of the replicas' peaks is its scaling efficiency."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from nlq2sql.load.driver import Mode, ModeSettings, Progress, drive, prepare_out, register
from nlq2sql.load.output import write_outputs
from nlq2sql.load.results import FleetReplica, FleetRow, FleetSweepResult, SweepResult
from nlq2sql.load.sweep import SweepConfig, SweepMode
from nlq2sql.run.config import preflight
from nlq2sql.run.endpoint_facts import EndpointFacts

if TYPE_CHECKING:
    from nlq2sql.run.config import EvalConfig

__all__ = ["FleetSweepMode", "members", "render_markdown"]


def members(cfg: SweepConfig) -> list[tuple[str, EvalConfig]]:
    """(label, EvalConfig pinned to that replica) for every replica of ``cfg.base``."""
    b = cfg.base
    urls = [(b.endpoint, b.model, b.api_key_env)] + [
        (r.url, r.model or b.model, r.api_key_env or b.api_key_env) for r in b.replicas]
    return [(f"r{i}", replace(b, endpoint=u, model=m, api_key_env=k, replicas=(), out=b.out / f"replica{i}"))
            for i, (u, m, k) in enumerate(urls)]


def _peak(res: SweepResult) -> FleetRow:
    ok = [s for s in res.levels if s.req_per_s]
    best = max(ok, key=lambda s: s.req_per_s or 0.0) if ok else None
    p95s = [s.latency_s.p95 for s in res.levels]
    return FleetRow(peak_req_per_s=best.req_per_s if best else None, at_concurrency=best.concurrency if best else None,
                    knee=res.analysis.knee.level, lowest_p95_s=min((p for p in p95s if p is not None), default=None),
                    errors=sum(sum(s.errors.values()) for s in res.levels))


@register
class FleetSweepMode(Mode[SweepConfig, FleetSweepResult]):
    """The sweep for the whole fleet (``out/whole``), then for each replica (``out/replicaK``)."""

    name: ClassVar[str] = "fleet-sweep"
    stem: ClassVar[str] = "fleet-sweep"
    settings_model: ClassVar[type[ModeSettings]] = SweepConfig

    def run(self, settings: SweepConfig, progress: Progress | None = None) -> FleetSweepResult:
        cfg = settings
        if not cfg.base.replicas:
            raise ValueError("a fleet sweep needs several endpoints")
        preflight(cfg.base)  # every replica reachable and serving the model before anything is written
        out = cfg.base.out
        prepare_out(out, cfg.force)  # refuses a used directory unless --force
        whole = EndpointFacts.model_validate({"endpoint": "fleet", "started_by_us": False})
        results = {"whole": drive(SweepMode(), cfg.but(base=replace(cfg.base, out=out / "whole")), progress,
                                  server_info=whole)}
        for label, pinned in members(cfg):
            if progress:
                progress(f"replica {label} alone: {pinned.endpoint}")
            facts = EndpointFacts.model_validate({"endpoint": pinned.endpoint})
            results[label] = drive(SweepMode(), cfg.but(base=pinned), progress, server_info=facts)
        rows = {k: _peak(v) for k, v in results.items()}
        alone = [rows[k].peak_req_per_s for k in rows if k != "whole"]
        top = rows["whole"].peak_req_per_s
        total = sum(a for a in alone if a) if all(alone) else None
        result = FleetSweepResult(kind="fleet-sweep", routing=cfg.base.routing,
                                  replicas=[FleetReplica(label=k, endpoint=p.endpoint) for k, p in members(cfg)],
                                  rows=rows, sum_of_replica_peaks=total,
                                  fleet_scaling_efficiency=top / total if top and total else None)
        return write_outputs(out, "fleet-sweep", result, render_markdown)

    def render(self, result: FleetSweepResult) -> str:
        return render_markdown(result)

    def wrote(self, out: Path) -> str:
        return f"{out / 'fleet-sweep.json'}, {out / 'fleet-sweep.md'} and one sweep per replica"


def render_markdown(r: FleetSweepResult) -> str:
    """The report, from the typed result as written."""

    def f(v: float | None, fmt: str = ".2f") -> str:
        return format(v, fmt) if v is not None else "n/a"

    lines = [f"# Fleet sweep ({len(r.replicas)} replicas, routing {r.routing})", "",
             "| who | peak req/s | at c | knee | lowest p95 (s) | errors |", "|---|---:|---:|---:|---:|---:|"]
    for k, row in r.rows.items():
        lines.append(f"| {k} | {f(row.peak_req_per_s)} | {row.at_concurrency or 'n/a'} | "
                     f"{row.knee or 'none'} | {f(row.lowest_p95_s)} | {row.errors} |")
    eff = r.fleet_scaling_efficiency
    lines += ["", f"Whole fleet's peak ÷ sum of the replicas' own peaks ({f(r.sum_of_replica_peaks)} "
                  f"req/s): **{f(eff * 100 if eff is not None else None, '.0f')} %**. Each replica's sweep and the "
                  "whole's are in their own folders (sweep.md, plots, level runs).",
              "", "Replicas: " + ", ".join(f"{x.label} = {x.endpoint}" for x in r.replicas) + "."]
    return "\n".join(lines) + "\n"
