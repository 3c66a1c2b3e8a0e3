"""A batch's manifest: built once as :class:`~nlq2sql.records.batch_parts.BatchManifest` from every
part of the configuration, checked against the one on disk on ``--resume``, written by ``run.batch``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql.answers.kinds import KINDS, bind_sampling
from nlq2sql.answers.sql.gold import COLUMN_RULE
from nlq2sql.conditions.registry import REGISTRY, Condition, Settings
from nlq2sql.errors import RecordError
from nlq2sql.records.batch_parts import BatchManifest, BatchReplica
from nlq2sql.records.manifest_parts import RetryBudgetPart
from nlq2sql.records.store import MANIFEST, RESUME_KEYS
from nlq2sql.run.batch_config import BatchConfig
from nlq2sql.run.config import EvalConfig, probe_endpoint, targets
from nlq2sql.run.item import request_sampling
from nlq2sql.stages.goldsql import GoldSqlSet, resolve_search_path
from nlq2sql.stages.origin import manifest_base
from nlq2sql.stages.sets import AnySet

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.semantic.binding import Warehouse
    from nlq2sql.stages.guardrail import RuleSet
    from nlq2sql.stages.prompt import Prompt

__all__ = ["RESUME_BATCH", "build_manifest", "manifest_model", "resumed_manifest"]

#: Beyond eval's resume keys, what fixes a batch's shards: the same items cut the same way.
RESUME_BATCH = ("evalset_sha256", "questions_sha256", "n_items", "limit", "shard_rows", "format", "engine")


def manifest_model() -> type[BatchManifest]:
    """The batch manifest with every registered condition's keys declared (``None`` when off)."""
    return BatchManifest.with_conditions(REGISTRY.conditions_part())


def build_manifest(cfg: BatchConfig, wcfg: EvalConfig, evalset: AnySet | None, rulesets: list[RuleSet],
                   wh: Warehouse, sha: str, n: int, prompt: Prompt, conditions: list[Condition[Settings]], key: str,
                   total: int, grammar: str | None) -> BatchManifest:
    """What the batch is asked (items, cut, engine, model, prompt, sampling, conditions) and the
    server it measured; ``started`` now."""
    base = manifest_base("batch", evalset, rulesets, wh, n_items=n)  # a question file: no eval set keys
    manifest = manifest_model()(
        **base.given(), scored=evalset is not None, limit=wcfg.limit, engine=cfg.engine,
        ray_address=cfg.ray_address, actors=cfg.actors, concurrency_per_actor=cfg.concurrency,
        shard_rows=cfg.shard_rows, format=cfg.format, out=str(cfg.out) if "://" in str(cfg.out) else None,
        endpoint=wcfg.endpoint, model=wcfg.model, prompt=prompt.name, prompt_style=prompt.style,
        prompt_sha256=prompt.sha256, client=wcfg.client,
        sampling=bind_sampling(request_sampling(wcfg), wh, wcfg.answer, grammar=grammar).recorded(),
        server=asyncio.run(probe_endpoint(wcfg.endpoint, wcfg.model, key)) if wcfg.endpoint else None,
        retry_budget=RetryBudgetPart(fraction=wcfg.retry_budget, total=total), started=time.time())
    if evalset is None:  # a question file: its name and SHA-256 instead of the eval set's keys
        manifest.questions, manifest.questions_sha256 = Path(cfg.input).name, sha
    if wcfg.replicas:  # every replica the actors route over (labels as the records name them), as eval lists them
        manifest.routing = wcfg.routing
        manifest.replicas = [BatchReplica(label=f"r{i}", url=u, model=m)
                             for i, (u, m, _) in enumerate(targets(wcfg, wcfg.endpoint or "", wcfg.model, key))]
    if not KINDS[wcfg.answer].implicit:
        manifest.answer = wcfg.answer
    if isinstance(evalset, GoldSqlSet):  # as eval records a gold-SQL set: its golds' rule and search path
        manifest.gold, manifest.column_rule = "sql", COLUMN_RULE
        manifest.search_path = list(resolve_search_path(wh.catalog.manifest, wcfg.search_path))
    if wcfg.conditions:  # the conditions the actors apply (their keys only when some are on)
        for k, v in wcfg.conditions.manifest(conditions):
            setattr(manifest, k, v)
    return manifest


def resumed_manifest(old: JsonValue, new: BatchManifest, out: str) -> BatchManifest:
    """The manifest on disk (``old``, as read) continued by this session, once it is checked to
    describe the same batch as ``new`` (else one RecordError naming each key that differs)."""
    now = new.to_json()
    keys = (*RESUME_KEYS, *RESUME_BATCH, *REGISTRY.manifest_keys())
    if diffs := [k for k in keys if old.get(k) != now.get(k)]:
        detail = "; ".join(f"{k}: was {old.get(k)!r}, now {now.get(k)!r}" for k in diffs)
        raise RecordError(f"cannot resume: the batch differs ({detail})", path=f"{out}/{MANIFEST}")
    manifest = type(new).from_json(old, path=f"{out}/{MANIFEST}")
    manifest.resumed(new.started)
    return manifest
