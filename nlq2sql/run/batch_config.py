"""What a batch is asked (:class:`BatchConfig`) and what each engine can apply of it.

Below the other batch modules, so each reads the configuration without importing another.
``local`` and ``ray`` answer with ``item.ItemRunner``, so their records are ``eval``'s. ``ray-vllm``
runs vLLM inside Ray Data and sends no request of ours: no condition, the v1 intent schema and v1
golds only; what it cannot apply is refused by name before anything starts."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from pathlib import Path

from nlq2sql.answers.kinds import KINDS
from nlq2sql.errors import InputError
from nlq2sql.inputs import at_most
from nlq2sql.run.batch_out import BatchOut
from nlq2sql.run.batch_shards import FORMATS
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.endpoints import check_address

__all__ = ["ENGINES", "RAY_ENGINES", "RAY_EXTRA", "BatchConfig", "check", "item_config", "require_ray"]

#: ``local``: this process; ``ray``: Ray Data actors (both over HTTP); ``ray-vllm``: vLLM inside Ray Data.
ENGINES = ("local", "ray", "ray-vllm")
RAY_ENGINES = ("ray", "ray-vllm")
#: What ``nlq2sql[ray]`` brings that a Ray batch needs (Ray Data, and pyarrow for the shards and ``--out``).
RAY_EXTRA = ("ray", "pyarrow")
#: What a batch's model writes: the v1 intent, the v2 MetricFlow query, or DuckDB SQL (free, or under the
#: warehouse's grammar).


@dataclass(frozen=True)
class BatchConfig:
    base: EvalConfig = field(default_factory=EvalConfig)  # endpoint(s), model, prompt, guardrails, limit…
    input: str = "heldout"  # an eval set (name or path), or with ``questions`` a question file
    questions: bool = False  # ``input`` is JSONL {"id", "question"}: answered, not scored
    out: Path | str = Path("runs/batch")  # a directory, or a file:// s3:// gs:// URI (batch_out)
    shard_rows: int = 1000  # at most this many records per shard (one Ray Data batch)
    format: str = "parquet"  # parquet | jsonl
    engine: str = "ray"  # local (this process) | ray (HTTP from Ray Data actors) | ray-vllm (vLLM inside Ray Data)
    ray_address: str | None = None  # an existing cluster; default a local Ray
    concurrency: int = 8  # requests in flight per actor (local: in this process)
    actors: int = 1
    force: bool = False
    resume: bool = False  # continue an interrupted batch in ``out`` (nothing there: start it)


def item_config(cfg: BatchConfig) -> EvalConfig:
    """The EvalConfig each item is answered with (its concurrency is the actor's; its eval set the
    batch's input, so the item runner knows a gold-SQL set as ``eval``'s does)."""
    evalset = cfg.base.evalset if cfg.questions else cfg.input
    return replace(cfg.base, evalset=evalset, concurrency=cfg.concurrency, out=Path(str(cfg.out)), workers=1,
                   engine="local", ray_address=None, resume=False, force=False)


def require_ray(engine: str = "ray") -> None:
    """Refuse a batch when what its engine needs is absent: one line naming it, before any input is
    read (``local`` needs pyarrow only, for the shards and ``--out``).

    Looked up with ``find_spec`` (nothing imported), so a bad input is not met by a traceback
    from the first ``import pyarrow.fs`` on the way."""
    for name in RAY_EXTRA if engine != "local" else ("pyarrow",):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            what = "a batch writes its shards with pyarrow" if name == "pyarrow" else "a batch runs on Ray Data"
            raise InputError(f"{what}, and {name} is not installed: pip install 'nlq2sql[ray]'", field="--engine")


def check(cfg: BatchConfig) -> None:
    """The batch's own options (``live.validate`` checks the rest); what the engine needs first."""
    if cfg.engine not in ENGINES:
        raise InputError(f"unknown engine {cfg.engine!r} (known: {', '.join(ENGINES)})", field="--engine")
    require_ray(cfg.engine)
    if cfg.format not in FORMATS:
        raise InputError(f"unknown format {cfg.format!r} (known: {', '.join(FORMATS)})", field="--format")
    if cfg.shard_rows < 1:
        raise InputError(f"must be at least 1, got {cfg.shard_rows}", field="--shard-rows")
    at_most(cfg.shard_rows, 1_000_000, "--shard-rows")
    if cfg.actors < 1:
        raise InputError(f"must be at least 1, got {cfg.actors}", field="--actors")
    base = cfg.base
    if base.load.rate is not None or base.load.duration_s is not None:
        raise InputError("a batch answers every item: no open loop or duration", field="--rate")
    if cfg.engine == "local" and cfg.actors != 1:
        raise InputError("--engine local answers in this process: drop --actors (or use --engine ray)",
                         field="--actors")
    if cfg.engine == "local" and cfg.ray_address is not None:
        raise InputError("--engine local starts no Ray: drop --ray-address (or use --engine ray)",
                         field="--ray-address")
    if cfg.engine in ("local", "ray") and base.endpoint is None:
        raise InputError(f"--engine {cfg.engine} sends requests to an endpoint: give --endpoint (or use --engine "
                         "ray-vllm to run the model inside Ray Data)", field="--endpoint")
    kind = KINDS[base.answer]  # an unknown kind: refused naming the known ones
    if cfg.engine == "ray-vllm":
        if base.endpoint is not None or base.replicas:
            raise InputError("--engine ray-vllm runs the model inside Ray Data: drop --endpoint", field="--endpoint")
        if not kind.implicit:
            raise InputError(f"--engine ray-vllm generates v1 intents only (its vLLM engine decodes under the "
                             f"intent schema and scores v1 golds): --answer {base.answer} needs --engine local or "
                             "ray", field="--answer")
        base.conditions.refuse("--engine ray-vllm")  # it sends no request of ours: no hook could run
    if not kind.implicit and cfg.questions:
        raise InputError(f"not available with --answer {base.answer}: --questions (a question file is answered "
                         "as v1 intents)", field="--answer")
    if cfg.resume and cfg.force:
        raise InputError("--resume keeps what is there, --force replaces it: give one", field="--resume")
    if cfg.resume and cfg.engine == "ray-vllm":
        raise InputError("--engine ray-vllm writes through Ray Data's own writers and cannot resume: "
                         "use --engine ray or local (or --force to start again)", field="--resume")
    BatchOut.open(cfg.out)  # an unsupported scheme is refused before anything starts
    check_address(cfg.ray_address)  # ray:// refused, HOST:PORT must answer
