"""What a run evaluates, how a local server is started and the load shape, and the checks made before
anything is written (options, API key, endpoint): ``run_eval`` and every load mode call
:func:`validate` or :func:`preflight`, so a library caller is checked as the CLI is."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from nlq2sql.answers.kinds import KINDS
from nlq2sql.conditions.registry import ConditionSet
from nlq2sql.errors import InputError
from nlq2sql.inputs import at_most
from nlq2sql.records.manifest_parts import ServerFacts
from nlq2sql.run.canary import require_constraints, run_modes
from nlq2sql.run.endpoints import ROUTINGS, ReplicaSpec, check_address, check_endpoint_url
from nlq2sql.run.models import DEFAULT_MODEL
from nlq2sql.run.server import ServerConfig, check_server_settings
from nlq2sql.semantic.catalog import DEFAULT_WAREHOUSE
from nlq2sql.semantic.dbt_project import DbtOptions
from nlq2sql.stages.prompt import load_prompt
from nlq2sql.stages.rulesets import load_guardrails
from nlq2sql.transport.client import CLIENTS, Sampling

#: Largest --max-tokens: far above any model's context (a typo such as 99999999999999999999 is
#: refused here, not sent to the server or used to size buffers).
MAX_TOKENS = 1_000_000
#: Sampling temperature range, as OpenAI's API defines it.
MAX_TEMPERATURE = 2.0

__all__ = ["EvalConfig", "LoadShape", "LocalServerSettings", "api_key", "check_local_out", "preflight",
           "probe_endpoint", "targets", "validate"]


@dataclass(frozen=True)
class LocalServerSettings:
    """How the harness starts a local vLLM for a run: used only when no endpoint is given
    (``bound_endpoint``)."""

    compact: bool = True  # whitespace-free structured outputs (--compact-server)
    max_num_seqs: int | None = None  # vLLM --max-num-seqs (default: vLLM's)
    port: int | None = None  # default: a free port
    structured_backend: str = "auto"  # vLLM's structured-output backend (server.STRUCTURED_BACKENDS)
    batch_invariant: bool = False  # VLLM_BATCH_INVARIANT=1 (refused where the platform has no kernels)
    max_model_len: int | None = 2048  # vLLM --max-model-len; None: sized from the run's prompts (run.context)
    startup_timeout_s: float = 600.0  # how long the server may take to become healthy


@dataclass(frozen=True)
class LoadShape:
    """How requests are offered beyond a plain closed-loop eval (the load tools set these;
    the defaults are a closed loop over every item)."""

    rate: float | None = None  # open loop: Poisson arrivals per second; concurrency caps in-flight
    duration_s: float | None = None  # start no request after this many seconds (the rest: not sent)
    arrival_seed: int = 0
    context_suffix: str = ""  # text after every question (length classes for `grid`)
    metrics_interval_s: float = 0.25  # how often the server's /metrics is sampled during the run
    order_seed: int | None = None  # shuffle the items with this seed (eval --repeats: one order per repeat)


@dataclass(frozen=True)
class EvalConfig:
    """What is evaluated and where (``concurrency`` included); ``server``: how a local server
    is started when there is no endpoint; ``load``: the load shape."""

    evalset: str = "heldout"
    out: Path = Path("runs/eval")
    endpoint: str | None = None
    model: str = DEFAULT_MODEL
    # Further replicas of the same model (a fleet): ``endpoint`` is the first; items are
    # routed over all of them and every record names the replica that answered.
    replicas: tuple[ReplicaSpec, ...] = ()
    routing: str = "least-inflight"  # pool.ROUTINGS
    # Client processes: items go out from one queue to ``workers`` processes (each with its own
    # event loop and connections; the concurrency cap is split over them, so it stays global).
    workers: int = 1
    engine: str = "local"  # local (this machine's processes) | ray (Ray actors; --ray-address)
    ray_address: str | None = None  # an existing Ray cluster (default: a local Ray)
    api_key_env: str | None = None
    prompt: str = "baseline"
    style: str = "default"
    guardrails: tuple[str, ...] = ("ranking",)
    concurrency: int = 8
    limit: int | None = None
    sampling: Sampling = field(default_factory=Sampling)
    timeout_s: float = 120.0
    retry_budget: float = 0.2
    client: str = "aiohttp"  # aiohttp | sdk (client.CLIENTS)
    resume: bool = False
    force: bool = False
    warehouse: Path | None = None  # the database (--db); default: the semantic model's shipped build
    semantic_model: str = DEFAULT_WAREHOUSE  # name or path of the warehouse's semantic model (the CLI's default)
    dbt: DbtOptions | None = None  # --db-schema, --profiles-dir, --target: where the layer's relations live
    # The conditions applied (examples, planner, value linking, self-consistency, abstention…):
    # their settings by name, from the registry (``conditions.registry``; none by default).
    conditions: ConditionSet = field(default_factory=ConditionSet)
    answer: str = "intent"  # intent (v1 intent JSON) | query (v2: a MetricFlow query or "unanswerable") | sql
    sql_timeout_s: float = 10.0  # --answer sql: the per-query time limit of the sandbox
    # The schemas unqualified names in SQL (gold and model) resolve in (--search-path); None: the layer's.
    search_path: tuple[str, ...] | None = None
    server: LocalServerSettings = field(default_factory=LocalServerSettings)  # only when endpoint is None
    load: LoadShape = field(default_factory=LoadShape)  # the defaults: a plain closed-loop eval


def _check_answer(cfg: EvalConfig) -> None:
    """The answer kind (``answers.kinds``) takes the conditions that name it, guardrails where its answers
    have fields to rewrite, more workers or engines where it is declared parallel; the rest are refused by name."""
    kind = KINDS[cfg.answer]  # an unknown kind: one message naming the known ones
    cfg.conditions.validate(cfg.answer, cfg.sampling)  # each condition names the answer kinds it applies to
    refused = [(not kind.takes_guardrails and bool(cfg.guardrails),
                "--guardrails (they rewrite intent and query fields; pass --guardrails none)"),
               (not kind.parallel and (cfg.workers > 1 or cfg.engine != "local"), "--workers / --engine")]
    for bad, what in refused:
        if bad:
            raise InputError(f"not available with --answer {cfg.answer} yet: {what}", field="--answer")


def check_local_out(out: Path | str) -> None:
    """A run that appends ``records.jsonl`` item by item needs a local or mounted directory: an
    object store cannot append, and ``Path`` would turn ``s3://b/x`` into a local ``s3:/b/x``."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]+:/", str(out)):
        raise InputError("eval appends records.jsonl item by item, which object storage cannot: give a local or "
                         "mounted directory (nlq2sql batch writes to s3:// or gs://)", field="--out")


def validate(cfg: EvalConfig) -> None:
    _check_answer(cfg)
    if cfg.concurrency < 1:
        raise InputError(f"must be at least 1, got {cfg.concurrency}", field="--concurrency")
    if cfg.limit is not None and cfg.limit < 1:
        raise InputError(f"must be at least 1, got {cfg.limit}", field="--limit")
    if cfg.sampling.max_tokens < 1:
        raise InputError(f"must be at least 1, got {cfg.sampling.max_tokens}", field="--max-tokens")
    at_most(cfg.sampling.max_tokens, MAX_TOKENS, "--max-tokens")
    if not (cfg.timeout_s > 0 and math.isfinite(cfg.timeout_s)):
        raise InputError(f"must be positive and finite, got {cfg.timeout_s}", field="--timeout")
    if not (0 <= cfg.sampling.temperature <= MAX_TEMPERATURE):
        raise InputError(f"must be between 0 and {MAX_TEMPERATURE:g}, got {cfg.sampling.temperature:g}",
                         field="--temperature")
    if cfg.client not in CLIENTS:
        raise InputError(f"unknown client {cfg.client!r} (known: {', '.join(CLIENTS)})", field="--client")
    load = cfg.load
    if load.rate is not None and not (load.rate > 0 and math.isfinite(load.rate)):
        raise InputError(f"must be positive and finite, got {load.rate}", field="--rate")
    if load.duration_s is not None and not (load.duration_s > 0 and math.isfinite(load.duration_s)):
        raise InputError(f"must be positive and finite, got {load.duration_s}", field="--duration")
    if not (cfg.retry_budget >= 0 and math.isfinite(cfg.retry_budget)):
        raise InputError(f"must be a finite fraction ≥ 0, got {cfg.retry_budget}", field="retry_budget")
    if cfg.resume and cfg.force:
        raise InputError("--resume continues the run in --out and --force replaces it: pass one of them",
                         field="--force")
    if cfg.endpoint is not None:
        check_endpoint_url(cfg.endpoint)
    else:  # the local server's settings, refused before it starts (batch-invariant asks vLLM's platform)
        local = cfg.server
        check_server_settings(ServerConfig(compact=local.compact, structured_backend=local.structured_backend,
                                           batch_invariant=local.batch_invariant))
    if cfg.workers < 1:
        raise InputError(f"must be at least 1, got {cfg.workers}", field="--workers")
    if cfg.engine not in ("local", "ray"):
        raise InputError(f"unknown engine {cfg.engine!r} (known: local, ray)", field="--engine")
    if cfg.workers > 1 or cfg.engine != "local":
        if load.rate is not None:
            raise InputError("an open loop (--rate) runs in one process; drop --workers / --engine",
                             field="--workers")
        if cfg.workers > cfg.concurrency:
            raise InputError(f"{cfg.workers} workers need a concurrency of at least {cfg.workers}, "
                             f"got {cfg.concurrency}", field="--workers")
    if cfg.ray_address is not None and cfg.engine != "ray":
        raise InputError("only with --engine ray", field="--ray-address")
    if cfg.engine == "ray":
        check_address(cfg.ray_address)  # ray:// refused, HOST:PORT must answer: before --out exists
    if cfg.routing not in ROUTINGS:
        raise InputError(f"unknown routing {cfg.routing!r} (known: {', '.join(ROUTINGS)})", field="--routing")
    if cfg.replicas and cfg.endpoint is None:
        raise InputError("several endpoints need the first one as --endpoint", field="--endpoint")
    seen = {cfg.endpoint}
    for spec in cfg.replicas:
        check_endpoint_url(spec.url)
        if spec.url in seen:
            raise InputError(f"{spec.url} is given twice", field="--endpoint")
        seen.add(spec.url)


def preflight(cfg: EvalConfig) -> str:
    """What a run bound to ``cfg.endpoint`` checks before it writes anything: the options, the
    guardrails, the prompt, the API key and the endpoint itself (reachable, answers JSON,
    serves the model).  Multi-level commands call it before creating their output directory
    (their eval set is loaded next, before anything is measured).  Returns the API key."""
    validate(cfg)
    load_guardrails(cfg.conditions.guardrails(cfg.guardrails))
    load_prompt(cfg.prompt, cfg.style, None)  # the file only: rendered once the warehouse is open
    key = api_key(cfg)
    if cfg.endpoint is not None:
        # Every constraint mode the run sends: its own (sql-grammar: a grammar) and its conditions'.
        modes = run_modes(cfg.sampling.structured, cfg.answer,
                          [m for c in cfg.conditions.active() for m in c.constraint_modes])
        for url, model, k in targets(cfg, cfg.endpoint, cfg.model, key):
            asyncio.run(probe_endpoint(url, model, k))
            require_constraints(url, model, k, modes, compact=False, client=cfg.client)
    return key


def api_key(cfg: EvalConfig) -> str:
    if cfg.api_key_env is None:
        return os.environ.get("OPENAI_API_KEY", "EMPTY")
    value = os.environ.get(cfg.api_key_env)
    if not value:
        raise InputError(f"environment variable {cfg.api_key_env} is not set (it should hold the "
                         "API key)", field="--api-key-env")
    return value


async def probe_endpoint(base_url: str, model: str, key: str) -> ServerFacts:
    """Measured server facts: served models, max_model_len, version. Fails clearly."""
    check_endpoint_url(base_url)
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as sess:
        try:
            async with sess.get(base_url.rstrip("/") + "/models", headers=headers) as resp:
                if resp.status in (401, 403):
                    raise InputError(f"endpoint {base_url} refused the API key (HTTP {resp.status})",
                                     field="--api-key-env")
                body = await resp.json(content_type=None)
        except aiohttp.ClientError as exc:
            raise InputError(f"endpoint {base_url} is unreachable: {exc}", field="--endpoint") from None
        except json.JSONDecodeError:
            raise InputError(f"endpoint {base_url}/models did not return JSON",
                             field="--endpoint") from None
        served = [m.get("id") for m in body.get("data", [])] if isinstance(body, dict) else []
        if model not in served:
            raise InputError(f"model {model!r} is not served by {base_url}; served: "
                             f"{', '.join(map(str, served)) or '(none)'}", field="--model")
        info = next(m for m in body["data"] if m.get("id") == model)
        version: str | None
        try:
            async with sess.get(root + "/version") as resp:
                version = (await resp.json(content_type=None)).get("version") if resp.status == 200 else None
        except (aiohttp.ClientError, json.JSONDecodeError, AttributeError):
            version = None
    return ServerFacts(base_url=base_url, served_models=served, max_model_len=info.get("max_model_len"),
                       server_version=version)


def targets(cfg: EvalConfig, base_url: str, model: str, key: str) -> list[tuple[str, str, str]]:
    """(url, model, key) of every replica of the run: the bound endpoint first, then the others
    (each with its own model name and key variable where given, else the run's)."""
    out = [(base_url, model, key)]
    for spec in cfg.replicas:
        k = key
        if spec.api_key_env is not None:
            k = os.environ.get(spec.api_key_env, "")
            if not k:
                raise InputError(f"environment variable {spec.api_key_env} is not set (the API key of "
                                 f"{spec.url})", field="--endpoints-file")
        out.append((spec.url, spec.model or model, k))
    return out
