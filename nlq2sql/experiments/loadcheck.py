"""Quality under load: are outputs bit-identical at concurrency 1, 16 and 32?

The same items run at each level (temperature 0, fixed seed); identity is *measured* on raw bytes and
parsed intents, and a divergence is reported with the first differing position and both texts."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql.errors import InputError
from nlq2sql.experiments.common import read_run
from nlq2sql.experiments.identity import RunIdentity, difference
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import output_dir, write_json_atomic
from nlq2sql.records.summary_parts import Percentiles, Rate
from nlq2sql.records.typed import Num, Typed
from nlq2sql.run.config import EvalConfig, preflight
from nlq2sql.run.endpoint_facts import EndpointFacts
from nlq2sql.run.live import run_eval
from nlq2sql.stages.report import pct

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["Divergent", "Identity", "LoadCheck", "LoadCheckConfig", "ReplicaLabel", "RunFigures", "Split",
           "compare_runs", "render_markdown", "run_across_replicas", "run_levels", "split_identity", "write_result"]


@dataclass(frozen=True)
class LoadCheckConfig:
    base: EvalConfig
    levels: tuple[int, ...] = (1, 16, 32)
    repeats: int = 1
    across_replicas: bool = False  # every item to every replica of ``base`` (its endpoint + replicas)


def run_levels(cfg: LoadCheckConfig) -> list[Path]:
    """One eval run per (level, repeat) under ``base.out``; returns the run dirs."""
    dirs = []
    for level in cfg.levels:
        for rep in range(cfg.repeats):
            out = cfg.base.out / f"c{level}-r{rep}"
            run_eval(replace(cfg.base, out=out, concurrency=level, force=True, resume=False))
            dirs.append(out)
    return dirs


# ``loadcheck.json`` as built (a field some runs lack is unset: left out of the file).

class RunFigures(Typed):
    run: str
    concurrency: int | None
    n: int
    raw_accuracy: Rate | None
    final_accuracy: Rate | None
    req_per_s: Num | None
    latency_s: Percentiles | None
    ttft_s: Percentiles | None


class Divergent(Typed):
    """One item whose output differs between runs (or that some runs lack: ``reason``)."""

    id: str
    reason: str | None = None
    first_run: str | None = None
    other_run: str | None = None
    first_diff_at: int | None = None
    text_a: str | None = None
    text_b: str | None = None
    intents_equal: bool | None = None


class Identity(Typed):
    items: int
    runs: int
    identical_items: int
    intent_divergent_items: int
    divergent_ids: list[str]


class ReplicaLabel(Typed):
    label: str
    url: str | None
    model: str


class Split(Typed):
    run_to_run: dict[str, Identity] | None = None  # repeats of one level: plain nondeterminism
    across_levels_first_repeat: Identity | None = None  # batch effects


class LoadCheck(Typed):
    items: int
    runs: list[RunFigures]
    identical_items: int
    intent_divergent_items: int
    divergent: list[Divergent]
    run_to_run: dict[str, Identity] | None = None
    across_levels_first_repeat: Identity | None = None
    server: EndpointFacts | None = None  # the local server's facts (its keys as given)
    replicas: list[ReplicaLabel] | None = None
    across_replicas: dict[str, Identity] | None = None
    across_concurrency: dict[str, Identity] | None = None

    def with_split(self, split: Split) -> LoadCheck:
        """This comparison with the identity split of the same runs (``split_identity``)."""
        for name in split.model_fields_set:
            setattr(self, name, getattr(split, name))
        return self


def run_across_replicas(cfg: LoadCheckConfig) -> LoadCheck:
    """Every item on every replica, at every level: one run per (replica, level, repeat),
    each pinned to its replica.  Identity is then reported across replicas (same level) and
    across levels (same replica) beside the comparison of all runs."""
    base = cfg.base
    if base.endpoint is None or not base.replicas:
        raise InputError("needs at least two endpoints", field="--across-replicas")
    preflight(base)  # every replica reachable and serving the model before anything is written
    urls = [(base.endpoint, base.model, base.api_key_env)] + [
        (r.url, r.model or base.model, r.api_key_env or base.api_key_env) for r in base.replicas]
    dirs: dict[tuple[int, int], list[Path]] = {}
    for i, (url, model, key_env) in enumerate(urls):
        pinned = replace(base, endpoint=url, model=model, api_key_env=key_env, replicas=(),
                         out=base.out / f"replica{i}")
        for d in run_levels(replace(cfg, base=pinned, across_replicas=False)):
            level = int(d.name.split("-")[0].removeprefix("c"))
            dirs.setdefault((i, level), []).append(d)
    every = [d for ds in dirs.values() for d in ds]
    result = compare_runs(every)
    result.replicas = [ReplicaLabel(label=f"r{i}", url=u, model=m) for i, (u, m, _) in enumerate(urls)]
    result.across_replicas = {
        f"c{level}": _identity(compare_runs([d for i in range(len(urls)) for d in dirs[(i, level)]]))
        for level in cfg.levels}
    if len(cfg.levels) * cfg.repeats > 1:
        result.across_concurrency = {
            f"r{i}": _identity(compare_runs([d for lv in cfg.levels for d in dirs[(i, lv)]]))
            for i in range(len(urls))}
    return result


_RUN_NAME = re.compile(r"c(\d+)-r(\d+)")


def split_identity(dirs: list[Path]) -> Split:
    """Identity run-to-run at the same concurrency (repeats of one level: plain nondeterminism)
    beside identity across levels on the first repeat (batch effects), for runs named
    ``c{level}-r{repeat}``; only the groups with at least two runs."""
    by_level: dict[int, list[Path]] = {}
    first: dict[int, Path] = {}
    for d in dirs:
        m = _RUN_NAME.fullmatch(d.name)
        if m is None:
            continue
        level, rep = int(m.group(1)), int(m.group(2))
        by_level.setdefault(level, []).append(d)
        if rep == 0:
            first[level] = d
    out = Split()
    same = {f"c{lv}": _identity(compare_runs(ds)) for lv, ds in sorted(by_level.items()) if len(ds) > 1}
    if same:
        out.run_to_run = same
    if len(first) > 1:
        out.across_levels_first_repeat = _identity(compare_runs([first[lv] for lv in sorted(first)]))
    return out


def _identity(res: LoadCheck) -> Identity:
    return Identity(items=res.items, runs=len(res.runs), identical_items=res.identical_items,
                    intent_divergent_items=res.intent_divergent_items, divergent_ids=[d.id for d in res.divergent])


def _first_diff(a: str | None, b: str | None) -> int:
    a, b = a or "", b or ""
    return len(os.path.commonprefix([a, b]))


def compare_runs(dirs: list[Path]) -> LoadCheck:
    """Per-item identity across runs, plus per-run accuracy and latency figures."""
    runs = []
    texts: dict[str, list[str | None]] = {}
    intents: dict[str, list[JsonValue]] = {}
    if len(dirs) < 2:
        raise InputError(f"needs at least 2 runs to compare, got {len(dirs)}", field="--runs")
    first: RunIdentity | None = None
    for d in dirs:
        manifest, summary = read_run(d)
        ident = RunIdentity.of(manifest)  # the same data and layer by content, whatever path or release
        diff = difference(first, ident) if first is not None else None
        if diff is not None:
            raise InputError(diff.text(str(dirs[0]), "this run") + "; load-check compares "
                             "outputs on one warehouse", path=str(d / "manifest.json"), field=diff.field)
        first = first or ident
        for rec in RunDir(d).records():
            texts.setdefault(rec.id, []).append(rec.answer.raw_text)
            intents.setdefault(rec.id, []).append(rec.answer.raw_intent)
        t = summary.timing
        runs.append(RunFigures(run=str(d), concurrency=manifest.concurrency, n=summary.n,
                               raw_accuracy=summary.raw_accuracy,
                               final_accuracy=summary.final_accuracy,
                               req_per_s=summary.throughput.req_per_s if summary.throughput else None,
                               latency_s=t.get("latency_s"), ttft_s=t.get("ttft_s")))
    divergent: list[Divergent] = []
    intent_divergent = 0
    for item_id, vals in sorted(texts.items()):
        if len(vals) != len(dirs):
            divergent.append(Divergent(id=item_id, reason=f"present in {len(vals)} of {len(dirs)} runs"))
            continue
        if any(v != vals[0] for v in vals[1:]):
            j = next(i for i, v in enumerate(vals) if v != vals[0])
            divergent.append(Divergent(id=item_id, first_run=str(dirs[0]), other_run=str(dirs[j]),
                                       first_diff_at=_first_diff(vals[0], vals[j]), text_a=vals[0], text_b=vals[j],
                                       intents_equal=all(x == intents[item_id][0] for x in intents[item_id])))
        intent_divergent += any(x != intents[item_id][0] for x in intents[item_id])
    n = len(texts)
    return LoadCheck(items=n, runs=runs, identical_items=n - len(divergent), intent_divergent_items=intent_divergent,
                     divergent=divergent)


def render_markdown(res: LoadCheck) -> str:
    """The report, from the typed result (a written one is read into it first: ``LoadCheck.from_json``)."""
    lines = [f"## Quality under load: {res.identical_items} / {res.items} items "
             f"byte-identical across {len(res.runs)} runs "
             f"({res.intent_divergent_items} with differing parsed intents)", "",
             *_identity_lines(res),
             "| run | concurrency | n | raw accuracy | final accuracy | req/s | p50 | p95 | p99 | TTFT p50 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res.runs:
        lat, ttft = r.latency_s, r.ttft_s

        def s(d: Percentiles | None, k: str) -> str:
            v = getattr(d, k) if d is not None else None
            return f"{v:.2f} s" if v is not None else "n/a"
        rps = f"{r.req_per_s:.2f}" if r.req_per_s else "n/a"
        lines.append(f"| {_run_name(r.run)} | {r.concurrency} | {r.n} | {pct(r.raw_accuracy)} | "
                     f"{pct(r.final_accuracy)} | {rps} | {s(lat, 'p50')} | {s(lat, 'p95')} | "
                     f"{s(lat, 'p99')} | {s(ttft, 'p50')} |")
    if res.divergent:
        lines += ["", "### Divergent items", ""]
        for d in res.divergent:
            if "text_a" in d.model_fields_set:
                lines.append(f"- `{d.id}` differs at byte {d.first_diff_at} "
                             f"({Path(str(d.first_run)).name} vs {Path(str(d.other_run)).name}; intents "
                             f"{'equal' if d.intents_equal else 'differ'}):\n  - `{d.text_a}`\n"
                             f"  - `{d.text_b}`")
            else:
                lines.append(f"- `{d.id}`: {d.reason}")
    return "\n".join(lines) + "\n"


def _run_name(run: str) -> str:
    p = Path(run)
    return f"{p.parent.name}/{p.name}" if p.parent.name.startswith("replica") else p.name


def _identity_row(what: str, r: Identity) -> str:
    ids = ", ".join(r.divergent_ids[:5]) + (" …" if len(r.divergent_ids) > 5 else "")
    return (f"| {what} | {r.runs} | {r.identical_items} / {r.items} | "
            f"{r.intent_divergent_items} | {ids or 'none'} |")


def _split_lines(result: LoadCheck) -> list[str]:
    """Run-to-run at one level (nondeterminism) and across levels (batch effects), when measured."""
    rows = [(f"run to run at {key}", r) for key, r in (result.run_to_run or {}).items()]
    if (across := result.across_levels_first_repeat) is not None:
        rows.append(("across levels (first repeat)", across))
    if not rows:
        return []
    lines = ["| identity | runs | items byte-identical | intents differ | divergent ids |", "|---|---|---|---|---|"]
    lines += [_identity_row(what, r) for what, r in rows]
    server = result.server
    if server is not None and server.model_fields_set:
        backend = server.structured_outputs.backend if server.structured_outputs is not None else None
        lines.append("")
        lines.append(f"Server: batch-invariant {server.batch_invariant}, structured-output backend "
                     f"{backend or 'unknown'}.")
    return [*lines, ""]


def _identity_lines(result: LoadCheck) -> list[str]:
    """Across replicas (same level) and across concurrency (same replica), when measured."""
    if (replicas := result.across_replicas) is None:
        return _split_lines(result)
    lines = ["| identity | runs | items byte-identical | intents differ | divergent ids |", "|---|---|---|---|---|"]
    for what, table in (("across replicas at", replicas),
                        ("across concurrency on", result.across_concurrency or {})):
        lines += [_identity_row(f"{what} {key}", r) for key, r in table.items()]
    urls = ", ".join(f"{r.label} = {r.url}" for r in result.replicas or [])
    return [*lines, "", f"Replicas: {urls}.", ""]


def write_result(out: Path, result: LoadCheck) -> None:
    output_dir(out)
    write_json_atomic(out / "loadcheck.json", result.to_json())
    (out / "loadcheck.md").write_text(render_markdown(result))
