"""Typed, versioned run results: ``summary.json`` and ``manifest.json`` as pydantic models.

They are contracts other tools read (``compare``, ``gate``, the viewer, reports, a team's CI), so
keys are declared (``extra="forbid"``): an undeclared key fails the write, not a reader later. Both
carry ``record_version``; every recorded run loads (keys some runs lack are optional).
JSON Schemas: ``schemas/summary.schema.json``, ``schemas/manifest.schema.json``."""

from __future__ import annotations

from typing import Any

from nlq2sql.records.manifest_parts import (
    CanaryPart,
    ContextPart,
    EnginePart,
    LoadPart,
    Origin,
    ReplicaPart,
    RetryBudgetPart,
    SamplingPart,
    ServerFacts,
    SpecPart,
    StructuredOutputs,
)
from nlq2sql.records.run_parts import Fleet, Harness, ServerMetrics
from nlq2sql.records.store import RECORD_VERSION
from nlq2sql.records.summary_parts import (
    Compactness,
    Digest,
    Figures,
    LoadShape,
    Missing,
    Throughput,
)

__all__ = ["LEGACY_WAREHOUSE", "Manifest", "Summary",
           "manifest_warehouse"]

#: The warehouse of a run recorded before manifests named their semantic model: ``retail``, then
#: the only one.  A fact about old records, not a default for new runs.
LEGACY_WAREHOUSE = "retail"


def manifest_warehouse(manifest: dict[str, Any]) -> str:
    """The semantic model a recorded run ran on: its path, else its name, else :data:`LEGACY_WAREHOUSE`."""
    return str(manifest.get("semantic_model_path") or manifest.get("semantic_model") or LEGACY_WAREHOUSE)


class Summary(Figures):
    """``summary.json``: the aggregator's figures, then what the run adds, in that order on disk
    (a live run: its answer kind, outcomes, compactness, throughput, load, harness, server metrics,
    fleet, retries, compiles; offline scoring: queries executed, compiles, missing items), then the
    records' digest and ``record_version``.  Built once by the run and written by :meth:`Part.to_json`."""

    distinct_queries_executed: int | None = None  # offline re-scoring
    answer: str | None = None  # the answer kind (v2: "query"); older runs: absent (v1 intents)
    # live runs
    outcomes: dict[str, int] | None = None
    errors_by_class: dict[str, int] | None = None
    compactness: Compactness | None = None
    throughput: Throughput | None = None
    load: LoadShape | None = None
    harness: Harness | None = None  # client CPU share, loop lag, saturated
    server_metrics: ServerMetrics | None = None
    fleet: Fleet | None = None  # several replicas: per-replica figures
    retries_used: int | None = None
    retry_budget: RetryBudgetPart | None = None
    compiles: int | None = None  # distinct MetricFlow compiles the run needed
    column_rule: str | None = None  # gold-SQL sets: how answer columns are matched to the gold's
    missing: Missing | None = None  # offline re-scoring
    records: Digest | None = None  # since the summary hash (older runs: absent)
    record_version: int = RECORD_VERSION

    @classmethod
    def of(cls, figures: Figures, **added: Any) -> Summary:
        """The summary of ``figures`` (its keys as set) with what the run ``added``, checked against
        the contract (an undeclared key fails here, before anything is written)."""
        return cls.model_validate({**{k: getattr(figures, k) for k in figures.model_fields_set}, **added})


class Manifest(Origin):
    """The keys every run writes; each condition's own keys are added by the condition registry
    (``nlq2sql.conditions.registry.REGISTRY.manifest_model()``: validate a whole manifest with that).

    A live run builds its manifest as this model and writes it with :meth:`to_json`: the keys it set."""

    evalset: str  # (a run's manifest always names its eval set)
    evalset_path: str
    evalset_sha256: str
    # live runs
    endpoint: str | None = None
    model: str | None = None
    prompt: str | None = None
    prompt_style: str | None = None
    prompt_sha256: str | None = None
    sampling: SamplingPart | None = None
    answer: str | None = None  # the answer kind (v2: "query"); older runs: absent (v1 intents)
    gold: str | None = None  # gold-SQL sets: "sql" (absent: golds are intents or MetricFlow queries)
    column_rule: str | None = None  # gold-SQL sets: how answer columns are matched to the gold's
    search_path: list[str] | None = None  # the schemas unqualified names in gold and model SQL resolved in
    engine: EnginePart | None = None
    concurrency: int | None = None
    limit: int | None = None
    server: ServerFacts | None = None
    context: ContextPart | None = None  # the context the prompts were checked against (run.context)
    client: str | None = None
    # (each condition's keys are written here)
    timeout_s: float | None = None  # per-request timeout (absent: older runs, 120 s)
    load: LoadPart | None = None
    context_suffix_chars: int | None = None
    context_suffix_sha256: str | None = None
    context_prefix_chars: int | None = None  # runs from before the suffix (grid)
    context_prefix_sha256: str | None = None
    server_started_by_us: bool | None = None
    server_args: list[str] | None = None
    server_startup_s: float | None = None
    structured_outputs: StructuredOutputs | None = None  # a server we started: backend asked and logged
    batch_invariant: bool | None = None  # a server we started: VLLM_BATCH_INVARIANT
    api_key_env: str | None = None
    routing: str | None = None
    replicas: list[ReplicaPart] | None = None
    retry_budget: RetryBudgetPart | None = None
    structured_canary: CanaryPart | None = None  # the canary's reply and verdict (run.canary)
    spec: SpecPart | None = None  # the run specification asked (run.spec; older runs: absent)
    # offline re-scoring
    responses: str | None = None  # relative to the project, else the file's name
    responses_sha256: str | None = None
    resumed_at: float | None = None
    started: float | None = None
    finished: float | None = None
