"""Benchmark grid: concurrency × request-length class, each cell one eval run on the real questions.

Long prompts make prefill expensive and long outputs hold slots and KV longer, so: the **prompt**
grows by a block of *other questions of the set* (about ``pad_tokens``, estimated at 4 characters a
token; measured tokens are reported), placed *after* the question so prefix caching cannot share
it; the **output** is the real intent (``out_tokens`` 0) or exactly ``out_tokens`` free-text tokens
(``ignore_eos``), checked on measured completion tokens. Per cell: req/s, output tok/s, p95 latency
and TTFT, peak KV usage from ``/metrics``, each with its sample count."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from nlq2sql.errors import InputError
from nlq2sql.inputs import MAX_REQUESTS
from nlq2sql.load.contract import LevelStats, endpoint_labels
from nlq2sql.load.driver import LevelContext, LoadMode, LoadSettings, next_in, option, register
from nlq2sql.load.levels import run_level
from nlq2sql.load.render import fmt_num
from nlq2sql.load.results import GridCell, GridClass, GridResult, GridSettings
from nlq2sql.run.config import EvalConfig
from nlq2sql.semantic import load_catalog
from nlq2sql.stages.evalset import load_evalset


@dataclass(frozen=True)
class LengthClass:
    name: str
    pad_tokens: int  # context added before each question (≈ tokens)
    out_tokens: int  # 0 = the structured intent; N = exactly N free-text tokens

    def describe(self) -> str:
        out = "structured intent" if self.out_tokens == 0 else f"{self.out_tokens} free-text tokens (ignore_eos)"
        return f"+{self.pad_tokens} context tokens, {out}"


DEFAULT_CLASSES = (LengthClass("short", 0, 0), LengthClass("median", 256, 64), LengthClass("long", 1024, 128))


def parse_classes(text: str) -> tuple[LengthClass, ...]:
    """``short,long`` picks defaults; ``name:pad:out`` defines one (e.g. ``huge:1500:256``)."""
    known = {c.name: c for c in DEFAULT_CLASSES}
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if ":" not in part:
            if part not in known:
                raise InputError(f"unknown class {part!r} (known: {', '.join(known)}; or name:pad:out)",
                                 field="--classes")
            out.append(known[part])
            continue
        bits = part.split(":")
        try:
            name, pad, tok = bits[0], int(bits[1]), int(bits[2])
        except (IndexError, ValueError):
            raise InputError(f"expected name:pad_tokens:out_tokens, got {part!r}", field="--classes") from None
        if not name or pad < 0 or tok < 0 or len(bits) != 3:
            raise InputError(f"expected name:pad_tokens:out_tokens ≥ 0, got {part!r}", field="--classes")
        out.append(LengthClass(name, pad, tok))
    if not out or len({c.name for c in out}) != len(out):
        raise InputError("give at least one class, each name once", field="--classes")
    return tuple(out)


def context_block(evalset: str, pad_tokens: int, semantic_model: str) -> str:
    """About ``pad_tokens`` tokens of context built from the eval set's own questions."""
    if pad_tokens <= 0:
        return ""
    questions = [c.question for c in load_evalset(evalset, load_catalog(semantic_model)).cases]
    lines, chars, i = [], 0, 0
    while chars < pad_tokens * 4:
        q = questions[i % len(questions)]
        lines.append(f"- {q}")
        chars += len(q) + 3
        i += 1
    return ("\n\nFor context only (answer the question above), earlier questions in this session:\n"
            + "\n".join(lines))


class GridConfig(LoadSettings):
    """A grid's settings (the one declaration)."""

    levels: tuple[int, ...] = option((1, 4, 16), "--concurrency", min_length=1)
    classes: tuple[LengthClass, ...] = option(DEFAULT_CLASSES, "--classes", min_length=1)
    requests: int = option(16, "--requests", "Requests per cell (eval items cycled).", ge=1, le=MAX_REQUESTS)
    warmup: int = option(1, "--warmup", "Uncounted warm-up requests at c=1 first.", ge=0, le=MAX_REQUESTS)

    def model_post_init(self, _context: Any) -> None:
        if any(c < 1 for c in self.levels):
            raise InputError("every level must be at least 1", field="--concurrency")


def cell_config(base: EvalConfig, cls: LengthClass) -> EvalConfig:
    sampling = base.sampling
    if cls.out_tokens:
        sampling = replace(sampling, structured="none", max_tokens=cls.out_tokens, ignore_eos=True)
    suffix = context_block(base.evalset, cls.pad_tokens, base.semantic_model)
    return replace(base, sampling=sampling, load=replace(base.load, context_suffix=suffix))


def cell(st: LevelStats, cls: LengthClass) -> GridCell:
    kv = st.server.kv_cache_usage
    return GridCell(  # type: ignore[call-arg]  # ``class`` given by its field name (populate_by_name)
        cls=cls.name, concurrency=st.concurrency, n=st.n, ok=st.ok, req_per_s=st.req_per_s,
        output_tok_per_s=st.output_tok_per_s, p95_s=st.latency_s.p95, ttft_p95_s=st.ttft_s.p95,
        prompt_tokens_p50=st.prompt_tokens.p50, completion_tokens_p50=st.completion_tokens.p50, kv_peak=kv.peak,
        kv_samples=kv.n, errors=st.errors, finish_reasons=st.finish_reasons, run_dir=str(st.run_dir))


def render_markdown(res: GridResult) -> str:
    """The report, from the typed result as written."""
    cells = {(c.cls, c.concurrency): c for c in res.cells}
    levels = res.config.levels
    md = [f"# Benchmark grid · {res.model} · {res.evalset}", "",
          f"Endpoint: {res.endpoint_label}. {res.config.requests} requests per cell (closed loop); "
          "each cell: req/s · p95 end-to-end (s) · peak KV-cache usage (samples).", ""]
    if res.cpu_label:
        md += [f"**{res.cpu_label}**", ""]
    md += ["| class | measured prompt / output tokens (p50) | " + " | ".join(f"c={c}" for c in levels) + " |",
           "|---|---|" + "---|" * len(levels)]
    for k in res.config.classes:
        row = [cells.get((k.name, c)) for c in levels]
        some = next((x for x in row if x), None)
        toks = (f"{fmt_num(some.prompt_tokens_p50 if some else None, '{:.0f}')} / "
                f"{fmt_num(some.completion_tokens_p50 if some else None, '{:.0f}')}")
        txt = []
        for x in row:
            if not x:
                txt.append("n/a")
                continue
            kv = f"{x.kv_peak:.1%} (n={x.kv_samples})" if x.kv_samples and x.kv_peak is not None else "not observed"
            err = f", {x.n - x.ok} failed" if x.n != x.ok else ""
            txt.append(f"{fmt_num(x.req_per_s, '{:.3f}')} · {fmt_num(x.p95_s)} · {kv}{err}")
        md.append(f"| {k.name} ({k.describe}) | {toks} | " + " | ".join(txt) + " |")
    md += ["", "Classes: context is made of other questions from the same eval set, placed after the question "
           "(so prefix caching cannot share it); token counts above are "
           "measured by the server, not the 4-characters-per-token estimate used to build the context."]
    md += [f"\n- {n}" for n in res.notes]
    return "\n".join(md) + "\n"


def heatmap(res: GridResult, out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    levels, names = res.config.levels, [k.name for k in res.config.classes]
    cells = {(c.cls, c.concurrency): c for c in res.cells}
    fig, axes = plt.subplots(1, 2, figsize=(10, 1.2 + 0.8 * len(names)))
    for ax, key, title, fmt in ((axes[0], "req_per_s", "req/s", "{:.3f}"), (axes[1], "p95_s", "p95 (s)", "{:.1f}")):
        grid = np.array([[getattr(cells[(n, c)], key) if (n, c) in cells else None for c in levels]
                         for n in names], dtype=float)  # None → nan
        im = ax.imshow(grid, cmap="viridis" if key == "req_per_s" else "magma_r", aspect="auto")
        ax.set_xticks(range(len(levels)), [f"c={c}" for c in levels])
        ax.set_yticks(range(len(names)), names)
        for (i, j), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(j, i, fmt.format(v), ha="center", va="center", color="w", fontsize=8)
        ax.set_title(title)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(f"{res.model}: concurrency × length class")
    fig.tight_layout()
    path = out / "grid.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


@register
class GridMode(LoadMode[GridConfig, GridResult, tuple[LengthClass, int], GridCell]):
    """Every length class at every concurrency: class by class, lowest concurrency first."""

    name: ClassVar[str] = "grid"
    stem: ClassVar[str] = "grid"
    settings_model: ClassVar[type[LoadSettings]] = GridConfig

    plot = ("plot", heatmap)

    def who(self) -> str:
        return "run_grid"  # what job.json said before the driver: older grids still resume

    def next_level(self, settings: GridConfig, done: list[GridCell]) -> tuple[LengthClass, int] | None:
        return next_in([(k, c) for k in settings.classes for c in sorted(set(settings.levels))], done)

    def run_level(self, ctx: LevelContext[GridConfig], level: tuple[LengthClass, int]) -> GridCell:
        cls, c = level
        st = run_level(cell_config(ctx.settings.base, cls), ctx.evalset_path, c,
                       ctx.out / "cells" / f"{cls.name}-c{c}", reuse=ctx.settings.resume)
        if cls.out_tokens and st.ok:
            got = st.completion_tokens.p50
            if got is not None and got != cls.out_tokens:
                ctx.notes.append(f"{cls.name} c={c}: median output {got:.0f} tokens, not the {cls.out_tokens} "
                                 "asked (the endpoint may not honour ignore_eos).")
        return cell(st, cls)

    def describe(self, level: tuple[LengthClass, int], stats: GridCell) -> str:
        return (f"{level[0].name} c={level[1]}: {stats.ok}/{stats.n} ok, "
                f"{fmt_num(stats.req_per_s, '{:.3f}')} req/s")

    def analyse(self, ctx: LevelContext[GridConfig], done: list[GridCell]) -> GridResult:
        cfg, info = ctx.settings, ctx.server_info
        label, cpu = endpoint_labels("local vLLM started for the grid" if info.started_by_us else None,
                                     info.endpoint)
        return GridResult(
            kind="grid", created=time.time(), elapsed_s=time.time() - ctx.started,
            model=cfg.base.model, evalset=cfg.base.evalset, server=info, endpoint_label=label, cpu_label=cpu,
            config=GridSettings(levels=sorted(set(cfg.levels)), requests=cfg.requests,
                                classes=[GridClass(name=c.name, pad_tokens=c.pad_tokens,
                                                   out_tokens=c.out_tokens, describe=c.describe())
                                         for c in cfg.classes]),
            cells=done, notes=ctx.notes)

    def render(self, result: GridResult) -> str:
        return render_markdown(result)


__all__ = ["DEFAULT_CLASSES", "GridConfig", "GridMode", "LengthClass", "cell", "context_block", "heatmap",
           "parse_classes", "render_markdown"]
