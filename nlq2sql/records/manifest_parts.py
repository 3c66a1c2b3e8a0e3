"""The sections of a run's ``manifest.json`` as types: sampling asked, server facts measured
(structured-output backend, canary verdict), load, retry budget, replicas and client engine, a
learned guardrail's artefact.

Apart from :mod:`nlq2sql.records.results` so the code building a section imports its type without
the contracts. Only keys the builder set are written (``to_json``), so a key absent in some runs
stays absent and a manifest's bytes are its run's; reading is tolerant (such keys have defaults)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from nlq2sql.records.store import RECORD_VERSION
from nlq2sql.records.summary_parts import Part as Section

__all__ = ["CanaryPart", "ContextPart", "EngineArgs", "EnginePart", "ExcludedPart", "GuardrailArtefact",
           "GuidedDecoding", "LoadPart", "Origin", "Part", "ReplicaPart", "RetryBudgetPart", "SamplingPart",
           "ServerFacts", "SpecPart", "StructuredOutputs"]


class Part(Section):
    """A manifest section: a results section whose keys may have aliases (``schema``/``schema_json``
    in sampling): read by field name too, written by alias (:meth:`~nlq2sql.records.typed.Typed.to_json`)."""


class SamplingPart(Part):
    """What every request asked for (``transport.client.Sampling`` as recorded)."""

    max_tokens: int
    temperature: float
    seed: int | None
    structured: str
    regex: str | None = None
    ignore_eos: bool | None = None  # written only when set
    top_logprobs: int | None = None  # written only when asked (--abstain's confidence)
    schema_mode: str | None = Field(default=None, alias="schema")  # the schema's mode, with its text
    schema_text: str | None = Field(default=None, alias="schema_json")  # the JSON Schema sent
    grammar: str | None = None  # the sql-grammar answer: the grammar's text and sha256
    grammar_sha256: str | None = None


class ServerFacts(Part):
    """Measured facts of an endpoint (``run.config.probe_endpoint``)."""

    base_url: str
    served_models: list[str | None] = []
    max_model_len: int | None = None
    server_version: str | None = None


class ContextPart(Part):
    """The context the run's prompts were checked against (``run.context``): a local server's
    ``--max-model-len`` as sized from the prompts (``source: sized``) or given, or an endpoint's
    ``max_model_len``; the longest prompt in the model's tokens and its item."""

    max_model_len: int | None
    source: str  # sized | given | default (nothing could count the prompts) | endpoint
    longest_prompt_tokens: int | None = None
    longest_item: str | None = None
    max_tokens: int
    model_limit: int | None = None  # the model's max_position_embeddings (a local folder)
    prompts_counted: int | None = None
    counted_by: str  # tokenizer | endpoint /tokenize | not counted (…)
    checked: bool | None = None  # False where the prompts could not be counted (``note`` says why)
    note: str | None = None


class LoadPart(Part):
    """How the load was offered: closed loop (no rate) or Poisson arrivals at ``rate``."""

    rate: float | None
    duration_s: float | None
    arrival_seed: int | None
    order_seed: int | None = None  # a repeat's own order (written only then)


class RetryBudgetPart(Part):
    """The whole run's retry budget: the fraction asked and the retries it allows; in the summary
    (one declaration for both files) also the retries its records took."""

    fraction: float
    total: int
    used: int | None = None  # the summary's only (set there, never in the manifest)


class ReplicaPart(Part):
    """One replica of a fleet, as the records label it."""

    label: str
    url: str
    model: str
    server: ServerFacts


class EnginePart(Part):
    """The client engine that sent the requests: worker processes or Ray actors, and where."""

    name: str
    workers: int
    ray_address: str | None = None


class StructuredOutputs(Part):
    """The structured-output backend: asked (a server we started) and effective (its log, or an
    endpoint's ``/server_info``; ``source`` None where nothing said)."""

    requested_backend: str | None = None  # a server we started only
    requested_compact: bool | None = None
    backend: str | None = None
    disable_any_whitespace: bool | None = None
    source: str | None = None


class SpecPart(Part):
    """The run specification the run was asked (``run.spec.RunSpec``, resolved): what ``eval --like``
    repeats.  Conditions are their settings that are not at their defaults, by setting name."""

    model: str
    answer: str
    prompt: str
    guardrails: list[str]
    conditions: dict[str, str | int | float | bool | None] = {}
    temperature: float
    max_tokens: int
    structured: str
    schema_mode: str = Field(default="flat", alias="schema")  # --schema
    semantic_model: str
    db: str | None = None
    db_schema: str | None = None
    profiles_dir: str | None = None
    target: str | None = None
    search_path: list[str] | None = None


class CanaryPart(Part):
    """The structured-output canary's reply and verdict (``run.canary``)."""

    passed: bool
    reason: str | None
    text: str | None
    finish_reason: str | None
    structured: str
    compact_checked: bool
    latency_s: float | None
    also: list[CanaryPart] | None = None  # the run's other constraint modes (written only when any)


class GuardrailArtefact(Part):
    """Which learned model a learned guardrail applied (``stages.learned_guardrail``)."""

    path: str
    artefact_sha256: str
    training_sha256: str
    training_n: int
    threshold: float
    sklearn_version: str


class GuidedDecoding(Part):
    """vLLM's ``structured_outputs_config`` as ``batch --engine ray-vllm`` sets it (compact outputs)."""

    backend: str
    disable_any_whitespace: bool


class EngineArgs(Part):
    """The keyword arguments of vLLM's engine inside Ray Data (``batch --engine ray-vllm``): built
    once as this type, passed to vLLM as :meth:`written` and recorded as the manifest's ``engine_kwargs``
    (one value, so what the manifest says is what the engine got)."""

    max_model_len: int
    dtype: str
    max_num_seqs: int
    structured_outputs_config: GuidedDecoding | None = None  # a compact server's: no whitespace
    enforce_eager: bool | None = None  # without GPUs, as the CPU server runs


class ExcludedPart(Part):
    """One object a partial semantic layer left out (``semantic.prune.Exclusion``): its manifest
    path (``semantic_models.M.dimensions.D``, ``metrics.N`` …) and the data problem or dependency
    that excluded it."""

    object: str
    reason: str


class Origin(Part):
    """The keys every manifest opens with, in their order: what was scored (an eval set's three
    keys; a batch over a question file has none), by which harness, under which guardrails, against
    which warehouse.  Built once (``stages.origin.manifest_base``); ``Manifest`` and the batch's
    manifest extend it, so these keys are declared here only."""

    record_version: int = RECORD_VERSION
    kind: str
    harness_version: str
    git_commit: str | None
    git_dirty: bool | None
    evalset: str | None = None
    evalset_path: str | None = None
    evalset_sha256: str | None = None
    n_items: int
    guardrails: list[str]
    guardrail_artefacts: dict[str, GuardrailArtefact] | None = None  # by rule set
    semantic_model: str | None = None
    semantic_model_path: str | None = None
    semantic_model_sha256: str | None = None
    time_spine: str | None = None  # declared | legacy | generated: what MetricFlow compiled against
    db: str | None = None
    db_sha256: str | None = None
    db_schema: str | None = None  # --db-schema: the schema every relation was read from
    excluded: list[ExcludedPart] | None = None  # what data problems left out of the layer (empty: nothing)
    layer_sha256: str | None = None  # the layer by content, whatever path or release read it

    def given(self) -> dict[str, Any]:
        """The keys set, as values (sections stay models), in order: a manifest model's keyword
        arguments (``Manifest(**origin.given(), …)``), so a key not set stays absent there too."""
        return {k: getattr(self, k) for k in Origin.model_fields if k in self.model_fields_set}
