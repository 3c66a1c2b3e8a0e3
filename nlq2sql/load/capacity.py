"""Capacity and context budget: can KV be what limits the batch, and how much room is left?

KV: the served model's config (attention layers, KV heads, head dim, dtype) → KV bytes per token →
what a concurrency × context needs, against the server's KV budget (``vllm:cache_config_info``) and
the peak ``kv_cache_usage_perc`` of recorded runs. Context: the recorded ISL / OSL distributions, a
recommended ``max_tokens`` (largest valid output plus a stated margin), headroom to
``max_model_len``, and ``length`` / overflow counts. Pure functions on recorded data: no requests."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar

from nlq2sql.errors import InputError
from nlq2sql.inputs import parse_json, read_text
from nlq2sql.load.driver import Mode, ModeSettings, Progress, option, register
from nlq2sql.load.output import write_outputs
from nlq2sql.load.results import SweepResult, load_result
from nlq2sql.load.server_results import CapacityResult, ContextBudget, KvBudget, KvNeed, KvPeak, KvPerToken
from nlq2sql.records.item import ItemRecord
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import RECORDS, output_dir
from nlq2sql.records.summary_parts import Percentiles
from nlq2sql.run.endpoints import check_endpoint_url
from nlq2sql.run.models import DEFAULT_MODEL, resolve_model
from nlq2sql.stages.score import spread

__all__ = ["DTYPE_BYTES", "CapacityMode", "CapacitySettings", "analyse", "context_budget", "dtype_bytes",
           "fetch_metrics", "kv_need", "kv_per_token", "load_model_config", "render_markdown", "run_dirs",
           "server_budget"]

DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "float16": 2.0, "half": 2.0, "bfloat16": 2.0,
               "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8_inc": 1.0, "int8": 1.0}


def dtype_bytes(name: str | None) -> float | None:
    return DTYPE_BYTES.get(str(name).lower().removeprefix("torch.")) if name else None


def kv_per_token(config: dict[str, Any], kv_dtype: str | None = None) -> KvPerToken:
    """KV-cache bytes per token from a Hugging Face ``config.json`` (dense, GQA or MLA)."""
    c = config.get("text_config") or config
    layers = c.get("num_hidden_layers")
    heads = c.get("num_attention_heads")
    if not layers or not heads:
        raise InputError("config lacks num_hidden_layers / num_attention_heads", field="--model-config")
    kinds = c.get("layer_types")
    attn_layers = (sum(1 for k in kinds if "attention" in str(k) and "linear" not in str(k))
                   if isinstance(kinds, list) and kinds else layers)
    dtype = kv_dtype if kv_dtype and kv_dtype != "auto" else (c.get("torch_dtype") or c.get("dtype")
                                                              or config.get("torch_dtype") or config.get("dtype"))
    nbytes = dtype_bytes(dtype)
    if nbytes is None:
        raise InputError(f"unknown KV dtype {dtype!r} (known: {', '.join(DTYPE_BYTES)})", field="--kv-dtype")
    if c.get("kv_lora_rank"):  # MLA: one compressed latent plus the rope part per layer
        per_layer = c["kv_lora_rank"] + c.get("qk_rope_head_dim", 0)
        formula = f"{attn_layers} layers × ({c['kv_lora_rank']} + {c.get('qk_rope_head_dim', 0)}) × {nbytes:g} B"
        kv_heads: int | None = None
        head_dim: int | None = None
    else:
        kv_heads = c.get("num_key_value_heads") or heads
        head_dim = c.get("head_dim") or c["hidden_size"] // heads
        per_layer = 2 * kv_heads * head_dim
        formula = f"2 (K,V) × {attn_layers} layers × {kv_heads} KV heads × {head_dim} head dim × {nbytes:g} B"
    return KvPerToken(bytes_per_token=attn_layers * per_layer * nbytes, formula=formula, attention_layers=attn_layers,
                      layers=layers, kv_heads=kv_heads, head_dim=head_dim, attention_heads=heads, kv_dtype=str(dtype),
                      dtype_bytes=nbytes)


def server_budget(metrics_text: str | None) -> KvBudget:
    """KV budget in tokens from ``vllm:cache_config_info`` (num_gpu_blocks × block_size)."""
    if not metrics_text:
        return KvBudget(observed=False, note="no /metrics: KV budget not observed")
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(metrics_text):
        if fam.name == "vllm:cache_config_info":
            for s in fam.samples:
                lab = s.labels
                blocks, size = lab.get("num_gpu_blocks"), lab.get("block_size")
                if blocks not in (None, "None") and size not in (None, "None"):
                    return KvBudget(observed=True, blocks=int(float(blocks)), block_size=int(float(size)),
                                    tokens=int(float(blocks)) * int(float(size)),
                                    cache_dtype=lab.get("cache_dtype"))
    return KvBudget(observed=False, note="vllm:cache_config_info not found in /metrics")


def kv_need(per_token: float, concurrency: int, context: int, budget_tokens: int | None) -> KvNeed:
    need_tokens = concurrency * context
    out = KvNeed(concurrency=concurrency, context_tokens=context, tokens=need_tokens,
                 bytes=need_tokens * per_token, gib=need_tokens * per_token / 2**30)
    if budget_tokens:
        out.share_of_budget = need_tokens / budget_tokens
        out.max_sequences_at_context = budget_tokens // context if context else None
        out.kv_can_limit = need_tokens > budget_tokens
    return out


def _with_max(values: list[float]) -> Percentiles:
    """Token lengths' percentiles and their max (None: none recorded)."""
    p = spread(values)
    p.max = max(values) if values else None  # (an assignment counts as set: written, after the rest)
    return p


def context_budget(records: list[ItemRecord], max_model_len: int | None, margin: float = 0.25
                   ) -> ContextBudget:
    isl = [float(v) for r in records if (v := r.request.prompt_tokens) is not None]
    osl = [float(v) for r in records if (v := r.request.completion_tokens) is not None]
    valid = [float(v) for r in records if (v := r.request.completion_tokens) is not None
             and r.answer.finish_reason == "stop" and r.answer.raw_intent is not None]
    rec = int(math.ceil(max(valid) * (1 + margin) / 8) * 8) if valid else None
    out = ContextBudget(
        n=len(records), isl=_with_max(isl), osl=_with_max(osl), valid_osl=_with_max(valid),
        margin=margin, recommended_max_tokens=rec,
        finish_length=sum(1 for r in records if r.answer.finish_reason == "length"),
        context_overflow=sum(1 for r in records if r.outcome == "context_overflow"),
        max_model_len=max_model_len,
    )
    if rec is None:
        out.note = "no valid (finish_reason=stop, schema-valid) output to size max_tokens from"
    if max_model_len and isl and rec:
        out.headroom_tokens = int(max_model_len - (max(isl) + rec))
    return out


def run_dirs(runs: list[Path], sweep: Path | None) -> list[Path]:
    dirs = list(runs)
    if sweep is not None:
        dirs += [Path(s.run_dir) for s in load_result(sweep / "sweep.json", SweepResult).levels]
    for d in dirs:
        if not (d / RECORDS).is_file():
            raise InputError(f"{d} is not a run directory (no {RECORDS})", field="--run")
    return dirs


def analyse(config: dict[str, Any], dirs: list[Path], *, kv_dtype: str | None = None,
            metrics_text: str | None = None, concurrency: int | None = None, context: int | None = None,
            margin: float = 0.25) -> CapacityResult:
    kv = kv_per_token(config, kv_dtype)
    budget = server_budget(metrics_text)
    records: list[ItemRecord] = []
    peaks: list[KvPeak] = []
    max_len, levels = None, []
    for d in dirs:
        run = RunDir(d)
        m, s = run.manifest_json(), run.summary_json()
        records += run.records()
        max_len = max_len or (m.get("server") or {}).get("max_model_len")
        kvu = ((s.get("server_metrics") or {}).get("kv_cache_usage") or {})
        if kvu.get("n"):
            peaks.append(KvPeak(run=str(d), concurrency=m.get("concurrency"), peak=kvu["peak"], n=kvu["n"]))
        levels.append(m.get("concurrency") or 0)
    ctx = context_budget(records, max_len, margin)
    conc = concurrency or (max(levels) if levels else 1)
    context_tokens = context or (int((ctx.isl.max or 0) + (ctx.recommended_max_tokens or ctx.osl.max or 0))
                                 or None)
    tokens = budget.tokens
    need = kv_need(kv.bytes_per_token, conc, context_tokens, tokens) if context_tokens else None
    verdict = None
    if need and budget.observed:
        verdict = ("KV can limit the batch: the need exceeds the budget" if need.kv_can_limit is True else
                   f"KV cannot be what limits the batch at c={conc}: the need is "
                   f"{need.share_of_budget:.1%} of the budget")
    if peaks:
        top = max(peaks, key=lambda p: p.peak)
        note = f"measured peak KV usage {top.peak:.1%} (c={top.concurrency}, n={top.n} samples)"
        verdict = f"{verdict}; {note}" if verdict else note
    return CapacityResult(
        kind="capacity", kv=kv, budget=budget,
        budget_bytes=tokens * kv.bytes_per_token if budget.observed and tokens is not None else None,
        need=need, measured_kv_peaks=peaks, context=ctx, runs=[str(d) for d in dirs], verdict=verdict)


class CapacitySettings(ModeSettings):
    """What ``nlq2sql capacity`` is asked: the runs, the model's shape, the server, the margins
    (checked when run, in the command's order: the output directory, the endpoint, the numbers)."""

    runs: tuple[Path, ...] = option((), "--run", "Recorded run directories (repeat).")
    sweep: Path | None = option(None, "--sweep", "A sweep directory: all its levels.")
    model: str = option(DEFAULT_MODEL, "--model", "Local model alias or folder (its config.json).")
    config_json: Path | None = option(None, "--model-config", "A Hugging Face config.json (for remote models).")
    kv_dtype: str = option("auto", "--kv-dtype", "KV-cache dtype: auto (the model's), bfloat16, fp8, …")
    endpoint: str | None = option(None, "--endpoint", "Read the KV budget from this server's /metrics.")
    concurrency: int | None = option(None, "--concurrency", "Concurrency for the KV need (default: the highest "
                                     "recorded).")
    context: int | None = option(None, "--context", "Tokens per sequence (default: largest prompt + recommended "
                                 "max_tokens).")
    margin: float = option(0.25, "--margin", "Margin over the largest valid output for max_tokens.")
    out: Path | None = option(None, "--out", "Write capacity.json and capacity.md here.")


def load_model_config(model: str, model_config: Path | None, kv_dtype: str) -> dict[str, Any]:
    """The model's config.json (given, or the local model's), checked to give a KV size."""
    if model_config is None:
        path = Path(resolve_model(model)[0]) / "config.json"
        if not path.is_file():
            raise InputError(f"no local config.json for {model!r}; pass --model-config", field="--model")
        model_config = path
    text = read_text(model_config, "model config")
    try:
        config = parse_json(text, path=str(model_config))
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON ({exc.msg})", path=str(model_config), line=exc.lineno) from None
    if not isinstance(config, dict):
        raise InputError("a model config.json must be a JSON object", path=str(model_config))
    try:
        kv_per_token(config, kv_dtype)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise InputError(f"not a usable model config ({type(exc).__name__}: {exc})",
                         path=str(model_config)) from None
    return config


def fetch_metrics(endpoint: str) -> str | None:
    """The server's Prometheus text, or None when it cannot be read (the budget is then unobserved)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(endpoint.rstrip("/").removesuffix("/v1") + "/metrics", timeout=10) as resp:
            return str(resp.read().decode())
    except (urllib.error.URLError, OSError, UnicodeDecodeError):
        return None


@register
class CapacityMode(Mode[CapacitySettings, CapacityResult]):
    """Read the recorded runs, analyse; write ``capacity.json`` and ``capacity.md`` when ``out`` is set."""

    name: ClassVar[str] = "capacity"
    stem: ClassVar[str] = "capacity"
    settings_model: ClassVar[type[ModeSettings]] = CapacitySettings

    def run(self, settings: CapacitySettings, progress: Progress | None = None) -> CapacityResult:
        cfg = settings
        if cfg.out is not None:
            output_dir(cfg.out, create=False)
        if cfg.endpoint is not None:
            check_endpoint_url(cfg.endpoint)
        for name, v in (("--concurrency", cfg.concurrency), ("--context", cfg.context)):
            if v is not None and v < 1:
                raise InputError(f"must be at least 1, got {v}", field=name)
        if not (math.isfinite(cfg.margin) and 0 <= cfg.margin <= 5):
            raise InputError(f"must be between 0 and 5, got {cfg.margin}", field="--margin")
        dirs = run_dirs(list(cfg.runs), cfg.sweep)
        config = load_model_config(cfg.model, cfg.config_json, cfg.kv_dtype)
        metrics_text = fetch_metrics(cfg.endpoint) if cfg.endpoint is not None else None
        res = analyse(config, dirs, kv_dtype=cfg.kv_dtype, metrics_text=metrics_text, concurrency=cfg.concurrency,
                      context=cfg.context, margin=cfg.margin)
        if cfg.out is not None:
            output_dir(cfg.out)
            write_outputs(cfg.out, "capacity", res, render_markdown)
        return res

    def render(self, result: CapacityResult) -> str:
        return render_markdown(result)


def render_markdown(r: CapacityResult) -> str:
    """The report, from the typed result."""
    kv, b, need, ctx = r.kv, r.budget, r.need, r.context
    md = ["# Capacity and context budget", "", "## KV math", "",
          f"- KV per token: **{kv.bytes_per_token:,.0f} B** ({kv.bytes_per_token / 1024:.1f} KiB) = "
          f"{kv.formula} (KV dtype {kv.kv_dtype})."]
    if b.observed and b.blocks is not None and b.tokens is not None and r.budget_bytes is not None:
        md.append(f"- Server KV budget (its /metrics): {b.blocks:,} blocks × {b.block_size} tokens = "
                  f"**{b.tokens:,} tokens** ≈ {r.budget_bytes / 2**30:.2f} GiB (cache dtype {b.cache_dtype}).")
    else:
        md.append(f"- Server KV budget: {b.note}.")
    if need:
        line = (f"- Need at c={need.concurrency} × {need.context_tokens} tokens of context: "
                f"{need.tokens:,} tokens = {need.gib:.3f} GiB")
        if need.share_of_budget is not None:
            line += (f" = **{need.share_of_budget:.1%} of the budget**; the budget holds "
                     f"{need.max_sequences_at_context} such sequences")
        md.append(line + ".")
    for p in r.measured_kv_peaks:
        md.append(f"- Measured peak KV usage at c={p.concurrency}: {p.peak:.1%} (n={p.n} samples).")
    if r.verdict:
        md += ["", f"**{r.verdict}.**"]
    md += ["", "## Context budget", "",
           f"From {ctx.n} recorded requests ({len(r.runs)} run(s)).", "",
           "| tokens | n | p50 | p95 | max |", "|---|---:|---:|---:|---:|"]
    for name, pct in (("input (ISL)", ctx.isl), ("output (OSL)", ctx.osl),
                      ("valid outputs (stop, schema-valid)", ctx.valid_osl)):
        md.append(f"| {name} | {pct.n} | {_n(pct.p50)} | {_n(pct.p95)} | {_n(pct.max)} |")
    md += ["", f"- Recommended max_tokens: **{ctx.recommended_max_tokens or 'n/a'}** (largest valid output + "
           f"{ctx.margin:.0%}, rounded up to 8){'; ' + ctx.note if ctx.note else ''}.",
           f"- max_model_len {ctx.max_model_len or 'not observed'}; headroom after the largest prompt and "
           f"the recommended max_tokens: {ctx.headroom_tokens if ctx.headroom_tokens is not None else 'n/a'} tokens.",
           f"- finish_reason=length: {ctx.finish_length} of {ctx.n}; context-overflow rejections: "
           f"{ctx.context_overflow}."]
    return "\n".join(md) + "\n"


def _n(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}"
