"""The learned guardrail's artefact as a type: what ``guardrail train`` writes and the loader reads.

Its own module because training and loader both need it. The file is the artefact as compact JSON
(:meth:`Artefact.to_json`), hashed with sorted keys; a value of another JSON type is refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import AliasChoices, ConfigDict, Field

from nlq2sql.records.typed import Typed

if TYPE_CHECKING:
    from nlq2sql.records.summary_parts import Rate

__all__ = ["Artefact", "ArtefactRule", "CrossValidation", "FeatureSpec", "HeadSpec", "ModelInfo", "OutOfFold",
           "Proportion", "TrainingInfo"]


class _Spec(Typed):
    model_config = ConfigDict(strict=True)


class ArtefactRule(_Spec):
    """One rule the classifier gates: ``field`` from one of ``from`` to ``to``."""

    id: str
    field: str
    from_values: list[str] = Field(validation_alias=AliasChoices("from", "from_values"), serialization_alias="from")
    to: str
    description: str = ""


class TrainingInfo(_Spec):
    """The training set (path, sha256, size) and each head's class counts, sorted by class."""

    path: str
    sha256: str
    n: int
    kind: dict[str, int]
    sort_breakdown: dict[str, int]
    sort_ranking: dict[str, int]
    count: dict[str, int]


class ModelInfo(_Spec):
    """The heads' hyper-parameters, and their accuracy on the training set (set after fitting)."""

    C: float
    solver: str
    random_state: int
    significant_digits: int
    train_accuracy: dict[str, float] | None = None


class Proportion(_Spec):
    """``stages.score.rate``'s figures: the value, k of n, and its 95 % Wilson interval."""

    value: float | None
    k: int
    n: int
    ci95: list[float] | None

    @classmethod
    def of(cls, rate: Rate) -> Proportion:
        """``score.rate``'s result as this type; a NumPy float becomes the Python float of the same
        value (JSON writes both alike)."""
        value, ci95 = rate.value, rate.ci95
        return cls(value=None if value is None else float(value), k=int(rate.k), n=int(rate.n),
                   ci95=None if ci95 is None else [float(x) for x in ci95])


class OutOfFold(_Spec):
    """A rule's gate, out of fold, at the stored threshold."""

    precision: Proportion
    recall: Proportion


class CrossValidation(_Spec):
    """Stratified k-fold cross-validation: each head's accuracy and each rule's gate, out of fold."""

    folds: int
    stratified: bool
    shuffle: bool
    random_state: int
    kind_accuracy: Proportion
    oof_learned_false_ranking: OutOfFold
    oof_learned_false_breakdown: OutOfFold
    sort_breakdown_accuracy: Proportion
    sort_ranking_accuracy: Proportion
    count_accuracy: Proportion


class FeatureSpec(_Spec):
    """One TF-IDF vectoriser: its settings, vocabulary (in column order) and IDF weights."""

    lowercase: bool
    sublinear_tf: bool
    min_df: int
    analyzer: str
    ngram_range: list[int]
    vocabulary: list[str]
    idf: list[float]


class HeadSpec(_Spec):
    """One logistic-regression head: its classes, coefficients (one row per class, or one for two)
    and intercepts."""

    classes: list[str]
    coef: list[list[float]]
    intercept: list[float]


class Artefact(_Spec):
    """The whole artefact; ``artefact_sha256`` is set last, over everything else."""

    format: str
    format_version: int
    name: str
    description: str
    threshold: float
    rules: list[ArtefactRule]
    training: TrainingInfo
    sklearn_version: str
    preprocess: str
    model: ModelInfo
    cv: CrossValidation
    features: dict[str, FeatureSpec]
    heads: dict[str, HeadSpec]
    artefact_sha256: str | None = None
