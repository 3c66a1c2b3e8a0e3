"""Structured-output backends side by side: one local vLLM per backend, the same items each.

The backend is server-wide, so only a run per backend shows which keywords each enforces (schema-valid
rate on the bytes), its effect on accuracy and tokens, and its cost (TTFT/e2e; first-request compile
as the first item's TTFT over the median of the rest, at concurrency 1). Backends run one after
another; one that cannot start, or whose canary shows it does not enforce, is reported with its error."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jsonschema

from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.errors import Nlq2SqlError
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.records.results import Manifest
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import output_dir, write_json_atomic
from nlq2sql.records.summary_parts import Percentiles, Rate
from nlq2sql.records.typed import Num, Typed
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.run.serving import COMPACT_BACKENDS, STRUCTURED_BACKENDS
from nlq2sql.stages.score import rate, spread

__all__ = ["BackendError", "BackendRow", "BackendsConfig", "BackendsResult", "backend_config", "backend_row",
           "clean_error", "render_markdown", "run_backends", "summarise_backends", "write_result"]


@dataclass(frozen=True)
class BackendsConfig:
    base: EvalConfig  # no endpoint: each backend gets its own local server, started and stopped here
    backends: tuple[str, ...] = STRUCTURED_BACKENDS
    compact: bool = False  # whitespace-free grammar (only xgrammar and guidance take it)


def backend_config(cfg: BackendsConfig, backend: str) -> EvalConfig:
    server = replace(cfg.base.server, structured_backend=backend, compact=cfg.compact)
    return replace(cfg.base, server=server, out=cfg.base.out / backend, force=True, resume=False)


def run_backends(cfg: BackendsConfig) -> BackendsResult:
    """Run every backend; one that fails is recorded with its error and the rest still run."""
    if cfg.base.endpoint is not None:
        raise ValueError("the backends experiment starts its own servers (no endpoint)")
    errors: dict[str, str] = {}
    for backend in cfg.backends:
        if cfg.compact and backend not in (*COMPACT_BACKENDS, "auto"):
            errors[backend] = f"cannot start with the compact grammar ({backend} cannot drop whitespace)"
            continue
        try:
            run_eval(backend_config(cfg, backend))
        except Nlq2SqlError as exc:  # a server that does not start, a canary that trips
            errors[backend] = clean_error(str(exc))
    return summarise_backends(cfg.base.out, cfg.backends, errors)


def clean_error(message: str) -> str:
    """An error as a report may keep it: one line, bounded, paths relative to the project (a log
    path or a traceback line must not carry this machine's directories)."""
    message = message.replace(str(PROJECT_ROOT) + "/", "").replace(str(PROJECT_ROOT), ".")
    return " ".join(message.split())[:600]


# ``backends.json`` as built.

class BackendError(Typed):
    """A backend that did not run: its error as a report may keep it (``clean_error``)."""

    backend: str
    error: str


class BackendRow(Typed):
    """One backend's figures from its finished run."""

    backend: str
    run: str
    n: int
    effective_backend: str | None
    whitespace_free: bool | None
    canary: bool | None
    json_schema_valid: Rate
    schema_valid_rate: Rate
    accuracy: Rate
    finish_length: int
    completion_tokens: Percentiles
    ttft_s: Percentiles | None
    latency_s: Percentiles | None
    first_request_compile_s: float | None
    canary_latency_s: Num | None
    server_startup_s: float | None
    concurrency: int | None
    model: str | None
    evalset: str
    git_commit: str | None


class BackendsResult(Typed):
    backends: list[BackendRow | BackendError]


def summarise_backends(out: Path, backends: tuple[str, ...], errors: dict[str, str]) -> BackendsResult:
    """The comparison, from the run directories' records (re-runnable on recorded runs)."""
    rows: list[BackendRow | BackendError] = []
    for backend in backends:
        if backend in errors:
            rows.append(BackendError(backend=backend, error=clean_error(errors[backend])))
            continue
        rows.append(backend_row(out / backend, backend))
    return BackendsResult(backends=rows)


def _schema_of(manifest: Manifest) -> dict[str, Any] | None:  # a JSON Schema document: JSON by nature
    raw = manifest.sampling.schema_text if manifest.sampling is not None else None
    return json.loads(raw) if raw else None


def backend_row(run: Path, backend: str) -> BackendRow:
    """One backend's figures from its finished run."""
    rd = RunDir(run)
    manifest, summary = rd.manifest(REGISTRY.manifest_model()), rd.summary()
    schema = _schema_of(manifest)
    recs = sorted(rd.records(), key=lambda r: r.request.started or 0.0)
    ok = [r for r in recs if r.outcome == "ok"]
    valid = 0
    for r in ok:
        try:
            value = json.loads(r.answer.raw_text or "")
            if schema is not None:
                jsonschema.validate(value, schema)
            valid += 1
        except (json.JSONDecodeError, jsonschema.ValidationError):
            pass
    ttfts = [t for r in ok if (t := r.request.ttft_s) is not None]
    compile_s = (ttfts[0] - statistics.median(ttfts[1:])) if len(ttfts) >= 3 else None
    so, canary = manifest.structured_outputs, manifest.structured_canary
    return BackendRow(
        backend=backend, run=run.name, n=summary.n, effective_backend=so.backend if so else None,
        whitespace_free=so.disable_any_whitespace if so else None, canary=canary.passed if canary else None,
        json_schema_valid=rate(valid, len(recs)), schema_valid_rate=summary.schema_valid_rate,
        accuracy=summary.final_accuracy, finish_length=summary.finish_reasons.get("length", 0),
        completion_tokens=spread([t for r in ok if (t := r.request.completion_tokens) is not None]),
        ttft_s=summary.timing.get("ttft_s"), latency_s=summary.timing.get("latency_s"),
        first_request_compile_s=compile_s, canary_latency_s=canary.latency_s if canary else None,
        server_startup_s=manifest.server_startup_s, concurrency=manifest.concurrency, model=manifest.model,
        evalset=manifest.evalset, git_commit=manifest.git_commit)


def _rate(r: Rate) -> str:
    if r.value is None:
        return "n/a"
    lo, hi = r.ci95 or (None, None)
    ci = f" [{lo:.0%}, {hi:.0%}]" if lo is not None else ""
    return f"{r.value:.0%} ({r.k}/{r.n}){ci}"


def _s(d: Percentiles | None, k: str) -> str:
    v = getattr(d, k) if d is not None else None
    return f"{v:.2f}" if isinstance(v, int | float) else "n/a"


def render_markdown(result: BackendsResult) -> str:
    lines = ["| backend (asked → logged) | n | canary | JSON-schema-valid | harness schema-valid | accuracy | "
             "cut at max_tokens | tokens p50 | TTFT p50 / p95 s | e2e p50 / p95 s | first-request compile s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    errors = []
    for row in result.backends:
        if isinstance(row, BackendError):
            errors.append(f"- **{row.backend}** did not run: {row.error}")
            continue
        compile_s = row.first_request_compile_s
        lines.append(
            f"| {row.backend} → {row.effective_backend or 'unknown'}"
            f"{' (whitespace-free)' if row.whitespace_free else ''} | {row.n} | "
            f"{'passed' if row.canary else row.canary} | {_rate(row.json_schema_valid)} | "
            f"{_rate(row.schema_valid_rate)} | {_rate(row.accuracy)} | {row.finish_length} | "
            f"{_s(row.completion_tokens, 'p50')} | {_s(row.ttft_s, 'p50')} / {_s(row.ttft_s, 'p95')} | "
            f"{_s(row.latency_s, 'p50')} / {_s(row.latency_s, 'p95')} | "
            f"{f'{compile_s:.2f}' if compile_s is not None else 'n/a'} |")
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def write_result(out: Path, result: BackendsResult) -> None:
    output_dir(out)
    write_json_atomic(out / "backends.json", result.to_json())
    (out / "backends.md").write_text(render_markdown(result))
