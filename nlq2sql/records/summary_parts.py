"""The sections of ``summary.json`` as types: the aggregator's figures (rates, per-rule and
per-category tables, timings, selective prediction) and a live run's (compactness, throughput,
load shape, retry budget), with the base :class:`Part` the other sections build on.

A model is built with the keys it has (never set: absent, not null); ints stay ints; a key a
recorded run lacks reads as ``None``."""

from __future__ import annotations

from nlq2sql.records.typed import Num, Typed

__all__ = ["Abstention", "AnswerFigures", "CategoryFigures", "Compactness", "ConfusionMatrix", "CurvePoint",
           "Digest", "EmptyGolds", "Figures", "Headline", "LabelledRate", "LoadShape", "Missing", "Part", "Percentiles",
           "Rate", "RuleFigures", "Selective", "Throughput", "WorkerFigures", "WorkerLoss", "WorkerPhases",
           "WorkerStartup"]


class Part(Typed):
    """A section of a run's results (:class:`~nlq2sql.records.typed.Typed`: undeclared keys refused,
    unset keys absent)."""


class Rate(Part):
    """A proportion with its sample: k of n, and the Wilson 95 % interval."""

    value: float | None
    k: int
    n: int
    ci95: list[float] | None  # None when n = 0


class LabelledRate(Part):
    """The majority baseline: the class it names, then its rate."""

    label: str | None = None
    value: float | None
    k: int
    n: int
    ci95: list[float] | None


class Percentiles(Part):
    """p50/p95/p99/mean with the sample count; none observed: ``n`` 0 and nulls (never zero).
    One declaration for the summaries' blocks and the load results' (``max``: capacity's
    token lengths); ints stay ints, as a load result read back holds them."""

    n: int
    mean: Num | None = None
    p50: Num | None = None
    p95: Num | None = None
    p99: Num | None = None
    max: Num | None = None


class Digest(Part):
    """What the records file must hold: its line count and SHA-256."""

    count: int
    sha256: str


class RuleFigures(Part):
    """One guardrail rule: how often it fired, how often rightly, and its recall in scope."""

    interventions: int
    precision: Rate
    recall: Rate
    scope: int


class ConfusionMatrix(Part):
    labels: list[str]
    rows_gold_cols_pred: list[list[int]] | None  # None: no records


class CategoryFigures(Part):
    n: int
    raw_accuracy: Rate
    final_accuracy: Rate


class CurvePoint(Part):
    """Answering only items at least this confident (``min_vote_share``: the old name, kept)."""

    min_confidence: float | None = None  # older runs: only min_vote_share
    min_vote_share: float
    coverage: Rate
    accuracy: Rate


class Selective(Part):
    """``--abstain`` and v2 answers: coverage, accuracy on answered items, the curve."""

    n: int
    abstained: int
    abstained_answerable: int | None = None  # older runs: absent
    abstained_unanswerable: int | None = None
    coverage: Rate
    accuracy_answered: Rate
    curve: list[CurvePoint]
    without_logprob_evidence: int | None = None


class Abstention(Part):
    """v2 answers: unanswerable precision and recall."""

    abstained: int
    unanswerable_items: int
    precision: Rate
    recall: Rate


class EmptyGolds(Part):
    """Items whose gold returned no rows (flagged, never silent)."""

    n: int
    first_ids: list[str]


class Missing(Part):
    """Offline scoring: items the responses file did not answer."""

    n: int
    allowed: bool
    first_ids: list[str]


class Compactness(Part):
    """Whitespace in the outputs, measured on the records."""

    n: int
    outputs_without_whitespace: int
    whitespace_chars: Percentiles
    chars: Percentiles


class Throughput(Part):
    """This session's rate; the span over every record of the run."""

    items_this_session: int
    wall_s: Num
    req_per_s: Num | None
    startup_s: Num | None = None  # client workers' start, counted in the wall time
    req_per_s_after_startup: Num | None = None
    span_s_all_records: Num | None
    completed_ok: int
    not_sent: int | None = None  # older runs: absent


class LoadShape(Part):
    """How load was offered: closed loop or open-loop Poisson, and the engine when not one local process."""

    mode: str
    offered_rate: Num | None
    max_in_flight: int
    duration_s: Num | None
    arrival_seed: int | None
    workers: int | None = None
    engine: str | None = None
    # several client workers: what became of them
    lost_workers: int | None = None
    restarted_workers: int | None = None
    requeued_items: int | None = None
    worker_losses: list[WorkerLoss] | None = None
    worker_startup_s: WorkerStartup | None = None


class WorkerLoss(Part):
    """A client worker that died: why, when, and the items it held (put back in the queue)."""

    worker: int
    why: str
    at_s: float
    requeued: int
    requeued_ids: list[str]


class WorkerPhases(Part):
    """Where a worker's start-up went."""

    interpreter_s: float | None = None
    import_s: float
    runner_s: float
    golds_s: float


class WorkerStartup(Part):
    """How long the client workers took to start, in all and each."""

    first_ready_s: float | None
    first_request_s: float | None
    per_worker_s: list[float]
    per_worker_phases: list[WorkerPhases | None]


class WorkerFigures(Part):
    """What became of several client workers in one session (``run.workers``)."""

    lost_workers: int
    restarted_workers: int
    requeued_items: int
    worker_losses: list[WorkerLoss]
    worker_startup_s: WorkerStartup


class Headline(Part):
    """A scored summary's first keys, in their order on disk: the figures a run is read by first
    (the viewer computes them itself for a run that has no summary yet)."""

    n: int
    raw_accuracy: Rate
    final_accuracy: Rate
    execution_accuracy: Rate
    schema_valid_rate: Rate
    interventions: int
    intervention_precision: Rate


class Figures(Headline):
    """What the aggregator counts from scored records (``stages.summary.Summary.result``): the
    first keys of every scored summary, in their order on disk."""

    intervention_recall: dict[str, Rate]
    rules: dict[str, RuleFigures]
    majority_baseline: LabelledRate
    field_accuracy: dict[str, Rate]
    status_counts: dict[str, int]
    error_taxonomy_raw: dict[str, int]
    error_taxonomy_final: dict[str, int]
    finish_reasons: dict[str, int]
    confusion_matrix: ConfusionMatrix
    per_category: dict[str, CategoryFigures]
    timing: dict[str, Percentiles]
    selective: Selective | None = None  # --abstain: coverage, accuracy answered, curve
    abstention: Abstention | None = None  # v2 answers: unanswerable precision and recall
    empty_golds: EmptyGolds | None = None  # items whose gold returned no rows (flagged)


class AnswerFigures(Part):
    """What the aggregator counts from records without a gold (``batch --questions``): how the
    answers came out, no accuracy."""

    n: int
    scored: bool = False
    schema_valid_rate: Rate
    executed_rate: Rate
    exec_errors: int
    interventions: int
    rules_fired: dict[str, int]
    status_counts: dict[str, int]
    final_status_counts: dict[str, int]
    final_intents: dict[str, int]
    finish_reasons: dict[str, int]
    timing: dict[str, Percentiles]
