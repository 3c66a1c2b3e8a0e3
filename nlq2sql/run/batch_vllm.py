"""``batch --engine ray-vllm``: the model runs inside Ray Data (``ray.data.llm``), no server.

Answers are generated under per-row guided JSON (the warehouse's intent schema) and scored with
``score.intent_record`` into the same record keys. To run on vLLM's CPU build: without GPUs a
one-CPU placement group (else the engine waits for a GPU bundle forever); ``log_engine_metrics=False``
(the metrics need ``ray[serve]``); the schema as JSON text (Arrow turns a dict's lists into arrays).
What Ray Data does not report is ``null`` (``ttft_s``, ``itl_*``, ``started``, ``http_status``);
``latency_s`` is the engine's time for the row; ``finish_reason`` is ``length`` when all of
``max_tokens`` was used. Ray Data rows and ``sampling_params`` are JSON edges (plain dicts)."""

from __future__ import annotations

import functools
import json
import os
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from nlq2sql.answers.kinds import bind_sampling
from nlq2sql.errors import InputError
from nlq2sql.paths import cache_dir
from nlq2sql.records.batch_parts import BatchManifest
from nlq2sql.records.manifest_parts import EngineArgs, GuidedDecoding
from nlq2sql.records.run_parts import ServerMetrics
from nlq2sql.run.batch_config import BatchConfig
from nlq2sql.run.batch_out import BatchOut
from nlq2sql.run.batch_shards import BatchSession, encode_record, parse_item, write_shards
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.item import request_part, whitespace_outside_strings
from nlq2sql.run.models import resolve_model
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.evalset import EvalCase
from nlq2sql.stages.pipeline import make_executor
from nlq2sql.stages.prompt import Prompt, load_prompt
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.stages.score import intent_record
from nlq2sql.transport.stream import Completion

if TYPE_CHECKING:
    from nlq2sql.semantic.binding import Warehouse
    from nlq2sql.stages.execute import Executor
    from nlq2sql.stages.guardrail import RuleSet
    from nlq2sql.transport.client import Sampling

__all__ = ["answer_with_vllm", "engine_args", "sampling_params"]

#: Stages other than the engine are light: a fraction of a CPU each, so that a 2-CPU local
#: Ray has room for the engine (1 CPU), them, the scoring step and the shard writer.
LIGHT = {"num_cpus": 0.1, "concurrency": 1}


def _engine_env() -> dict[str, str]:
    """What ``server.LocalServer`` sets for a local vLLM, for the engine's Ray workers."""

    return {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "VLLM_CACHE_ROOT": str(cache_dir() / "vllm"), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "VLLM_DISABLE_COMPILE_CACHE": os.environ.get("VLLM_DISABLE_COMPILE_CACHE", "1")}


def engine_args(cfg: BatchConfig, wcfg: EvalConfig, gpus: float) -> EngineArgs:
    """vLLM's engine arguments for the batch: its context, dtype and ``concurrency`` sequences; a
    compact server's structured outputs; eager without GPUs."""
    args = EngineArgs(max_model_len=2048, dtype="bfloat16", max_num_seqs=cfg.concurrency)
    if wcfg.server.compact:  # as the local server: whitespace-free structured outputs
        args.structured_outputs_config = GuidedDecoding(backend="xgrammar", disable_any_whitespace=True)
    if not gpus:
        args.enforce_eager = True  # as the CPU server runs (no graph capture to do)
    return args


def answer_with_vllm(ray: Any, cfg: BatchConfig, wcfg: EvalConfig, rows: list[dict[str, str]], dest: BatchOut,
                     manifest: BatchManifest) -> BatchSession:
    """Generate, score and write every row; returns the session's part of the summary, and records
    the model, the engine's arguments and the GPUs in ``manifest``."""
    try:
        from ray.data.llm import build_processor, vLLMEngineProcessorConfig
    except ImportError as exc:
        raise InputError(f"ray.data.llm is not available ({exc}): pip install 'nlq2sql[ray]' vllm",
                         field="--engine") from None

    if wcfg.sampling.structured not in ("json", "response_format", "none"):
        raise InputError(f"--engine ray-vllm sends json or no structured outputs, not {wcfg.sampling.structured!r}",
                         field="--structured")
    model_path, name = resolve_model(wcfg.model)
    gpus = ray.cluster_resources().get("GPU", 0)
    args = engine_args(cfg, wcfg, gpus)
    pcfg = vLLMEngineProcessorConfig(
        model_source=model_path, engine_kwargs=args.to_json(), batch_size=cfg.shard_rows,
        concurrency=cfg.actors, log_engine_metrics=False, runtime_env={"env_vars": _engine_env()},
        placement_group_config=None if gpus else {"bundles": [{"CPU": 1}]},
        chat_template_stage=dict(LIGHT), tokenize_stage=dict(LIGHT), detokenize_stage=dict(LIGHT))
    processor = build_processor(
        pcfg, preprocess=functools.partial(_prepare, wcfg), postprocess=functools.partial(_finish, wcfg),
        preprocess_map_kwargs={"num_cpus": 0.1}, postprocess_map_kwargs={"num_cpus": 0.1})
    manifest.model, manifest.engine_kwargs, manifest.gpus = name, args, gpus
    t0 = time.time()
    write_shards(processor(ray.data.from_items(rows)), cfg.format, cfg.shard_rows, dest)
    return BatchSession(wall_s=time.time() - t0, items_this_session=len(rows),
                        server_metrics=ServerMetrics(observed=False, note="no server: vLLM ran inside Ray Data"))


class _Context(NamedTuple):
    """What a worker process scores with, made once per process (``_context``)."""

    wh: Warehouse
    prompt: Prompt
    rulesets: list[RuleSet]
    executor: Executor
    sampling: Sampling  # bound to the warehouse's schema


@functools.cache
def sampling_params(s: Sampling) -> dict[str, Any]:
    """vLLM's ``SamplingParams`` keywords for a row (the JSON edge: a Ray Data column); the schema
    as its JSON text, since Arrow would turn a nested schema's lists into numpy arrays.  Made once
    per sampling (every row's are the same): a row takes a copy."""
    return {"temperature": s.temperature, "max_tokens": s.max_tokens,
            **({"seed": s.seed} if s.seed is not None else {}),
            **({"structured_outputs": {"json": json.dumps(s.json_schema(), separators=(",", ":"))}}
               if s.structured != "none" else {})}


@functools.cache
def _context(cfg: EvalConfig) -> _Context:
    """Per worker process: warehouse, prompt, guardrails, executor and the bound sampling."""

    wh = open_warehouse(cfg.semantic_model, cfg.warehouse, dbt=cfg.dbt)
    rulesets = load_guardrails(cfg.conditions.guardrails(cfg.guardrails), wh.catalog, wh)
    return _Context(wh, load_prompt(cfg.prompt, cfg.style, wh), rulesets, make_executor(wh),
                    bind_sampling(cfg.sampling, wh.catalog))


def _prepare(cfg: EvalConfig, row: dict[str, Any]) -> dict[str, Any]:
    """A Ray Data row (``id``, ``item``) with the chat messages and sampling the engine stage reads."""
    ctx = _context(cfg)
    case = parse_item(row["item"])
    return {"id": row["id"], "item": row["item"],
            "messages": ctx.prompt.messages(case.question + cfg.load.context_suffix),
            "sampling_params": dict(sampling_params(ctx.sampling))}


def _finish(cfg: EvalConfig, row: dict[str, Any]) -> dict[str, Any]:
    """The engine's row scored: its record built as an ``ItemRecord`` and handed back to Ray Data
    as the row ``id``, ``record`` (the line the shard writer stores)."""

    ctx = _context(cfg)
    case = parse_item(row["item"])
    text = str(row["generated_text"])
    generated = int(row.get("num_generated_tokens") or 0)
    latency = row.get("time_taken_llm")
    comp = Completion(outcome="ok", text=text, attempts=1,
                      finish_reason="length" if generated >= ctx.sampling.max_tokens else "stop",
                      latency_s=float(latency) if latency is not None and latency >= 0 else None,
                      prompt_tokens=int(row.get("num_input_tokens") or 0), completion_tokens=generated)
    gold = case if isinstance(case, EvalCase) else None  # a question (no gold) is answered, not scored
    rec = intent_record(case.id, case.question, text, ctx.rulesets, ctx.executor,
                        gold=gold.gold if gold else None, category=gold.category if gold else None,
                        pair_id=gold.pair_id if gold else None, finish_reason=comp.finish_reason,
                        catalog=ctx.wh.catalog)
    rec.request = request_part(comp)
    req = rec.request
    req.started = None
    req.concurrency = cfg.concurrency
    req.whitespace_chars = whitespace_outside_strings(text)
    req.chars = len(text)
    return {"id": row["id"], "record": encode_record(rec)}
