"""Training the learned guardrail (``nlq2sql guardrail train``): fit the heads deterministically on a
set sharing no question with any shipped eval set, cross-validate, write the JSON artefact. A run
that applies a learned guardrail never imports it."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nlq2sql.errors import InputError
from nlq2sql.inputs import decode_line, json_object, regular_file
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.semantic.catalog import display_path
from nlq2sql.stages.learned_artefact import (
    Artefact,
    ArtefactRule,
    CrossValidation,
    FeatureSpec,
    HeadSpec,
    ModelInfo,
    OutOfFold,
    Proportion,
    TrainingInfo,
)
from nlq2sql.stages.learned_guardrail import (
    COMMON,
    CV_FOLDS,
    DEFAULT_NAME,
    DEFAULT_THRESHOLD,
    DIGITS,
    FEATURES,
    FORMAT,
    FORMAT_VERSION,
    HEADS,
    LABELS,
    PREPROCESS,
    RANDOM_STATE,
    RULE_TO_BREAKDOWN,
    RULE_TO_RANKING,
    SAFE_NAME,
    TRAIN_KEYS,
    C,
    LearnedModel,
    _decide,
    canonical_sha256,
    normalise_question,
    numbers_in,
    prepare,
)
from nlq2sql.stages.score import rate

__all__ = ["Example", "artefact_text", "check_disjoint", "pipeline", "read_training", "save", "shipped_questions",
           "train"]


def shipped_questions() -> dict[str, str]:
    """Every question of every shipped eval set (``evalsets/`` and each warehouse's), by
    ``path:id``."""
    out: dict[str, str] = {}
    files = sorted((PROJECT_ROOT / "evalsets").glob("*.jsonl")) + \
        sorted((PROJECT_ROOT / "warehouses").glob("*/evalsets/*.jsonl"))
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip():
                obj = json.loads(line)
                out[f"{path.relative_to(PROJECT_ROOT)}:{obj['id']}"] = obj["question"]
    return out


# --- training data -----------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    id: str
    question: str
    label: str
    row_count: int | None = None
    sort: str | None = None

    @property
    def count_class(self) -> str:
        if self.row_count is None:
            return "none"
        return "literal" if self.row_count in numbers_in(self.question) else "one"


def read_training(path: Path) -> tuple[list[Example], str]:
    """The training set (sorted by id) and its sha256; bad lines name file, line and field."""
    src = str(path)
    try:
        data = regular_file(path, "training set").read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the training set: {exc.strerror}", path=src) from None
    examples: list[Example] = []
    ids: set[str] = set()
    texts: dict[str, str] = {}
    offset = 0
    for lineno, raw in enumerate(data.splitlines(keepends=True), start=1):
        line = decode_line(raw, path=src, line=lineno, offset=offset)
        offset += len(raw)
        if not line.strip():
            continue
        obj = json_object(line, path=src, line=lineno)
        extra = sorted(set(obj) - TRAIN_KEYS)
        if extra:
            raise InputError(f"unknown key(s) {', '.join(extra)} (known: {', '.join(sorted(TRAIN_KEYS))})",
                             path=src, line=lineno, field=extra[0])
        for key in ("id", "question"):
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise InputError("missing or not a non-empty string", path=src, line=lineno, field=key)
        if obj.get("label") not in LABELS:
            raise InputError(f"must be one of {', '.join(LABELS)}, got {obj.get('label')!r}", path=src,
                             line=lineno, field="label")
        rc = obj.get("row_count")
        if rc is not None and (not isinstance(rc, int) or isinstance(rc, bool) or not 1 <= rc <= 100):
            raise InputError(f"must be an integer 1..100 or absent, got {rc!r}", path=src, line=lineno,
                             field="row_count")
        sort = obj.get("sort")
        if sort is not None and sort not in ("desc", "asc"):
            raise InputError(f"must be desc, asc or absent, got {sort!r}", path=src, line=lineno, field="sort")
        ex = Example(obj["id"], obj["question"], obj["label"], rc, sort)
        if rc is not None and rc != 1 and ex.count_class != "literal":
            raise InputError(f"row_count {rc} is not written in the question (only 1, for a singular "
                             f"superlative, may be implied)", path=src, line=lineno, field="row_count")
        if ex.id in ids:
            raise InputError(f"duplicate id {ex.id!r}", path=src, line=lineno, field="id")
        key = normalise_question(ex.question)
        if key in texts:
            raise InputError(f"same question as {texts[key]!r}", path=src, line=lineno, field="question")
        ids.add(ex.id)
        texts[key] = ex.id
        examples.append(ex)
    if not examples:
        raise InputError("the training set is empty", path=src)
    return sorted(examples, key=lambda e: e.id), hashlib.sha256(data).hexdigest()


def check_disjoint(examples: list[Example], path: str) -> None:
    """Refuse a training set that asks any question of a shipped eval set."""
    shipped = {normalise_question(q): where for where, q in shipped_questions().items()}
    for ex in examples:
        where = shipped.get(normalise_question(ex.question))
        if where is not None:
            raise InputError(f"training question {ex.id!r} ({ex.question!r}) is a question of the shipped "
                             f"eval set item {where}: the training set must share no question with them",
                             path=path, field="question")


# --- fitting ------------------------------------------------------------------------------


def _features() -> Any:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import FeatureUnion

    return FeatureUnion([(name, TfidfVectorizer(**{**COMMON, **spec, "ngram_range": tuple(spec["ngram_range"])}))
                         for name, spec in FEATURES.items()])


def _head() -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, max_iter=5000, random_state=RANDOM_STATE)


def pipeline() -> Any:
    """One head's full pipeline (what cross-validation refits per fold)."""
    from sklearn.pipeline import Pipeline

    return Pipeline([("features", _features()), ("clf", _head())])


def _targets(examples: list[Example]) -> dict[str, tuple[list[int], list[str]]]:
    """Per head: the rows it is trained on and their labels."""
    bd = [i for i, e in enumerate(examples) if e.label == "breakdown"]
    rk = [i for i, e in enumerate(examples) if e.label == "ranking"]
    every = list(range(len(examples)))
    return {"kind": (every, [e.label for e in examples]),
            "sort_breakdown": (bd, [examples[i].sort or "none" for i in bd]),
            "sort_ranking": (rk, [examples[i].sort or "desc" for i in rk]),
            "count": (every, [e.count_class for e in examples])}


def _cv(texts: list[str], targets: dict[str, tuple[list[int], list[str]]], threshold: float) -> CrossValidation:
    from sklearn.model_selection import StratifiedKFold, cross_val_predict


    accuracy: dict[str, Proportion] = {}
    oof: dict[str, OutOfFold] = {}
    folds = StratifiedKFold(n_splits=CV_FOLDS, shuffle=True, random_state=RANDOM_STATE)
    for head, (rows, y) in targets.items():
        sub = [texts[i] for i in rows]
        proba = cross_val_predict(pipeline(), sub, y, cv=folds, method="predict_proba")
        pred = _decide(head, proba, sub)
        ok = sum(p == t for p, t in zip(pred, y, strict=True))
        accuracy[head] = Proportion.of(rate(ok, len(y)))
        if head == "kind":
            # Out-of-fold behaviour of each rule's gate at the stored threshold.
            for target, rule in (("breakdown", RULE_TO_BREAKDOWN), ("ranking", RULE_TO_RANKING)):
                p = proba[:, LABELS.index(target)]
                fired = (p >= threshold) & (p > 1 - p)
                truth = np.array([t == target for t in y])
                oof[rule] = OutOfFold(precision=Proportion.of(rate(int((fired & truth).sum()), int(fired.sum()))),
                                      recall=Proportion.of(rate(int((fired & truth).sum()), int(truth.sum()))))
    return CrossValidation(folds=CV_FOLDS, stratified=True, shuffle=True, random_state=RANDOM_STATE,
                           kind_accuracy=accuracy["kind"], oof_learned_false_ranking=oof[RULE_TO_BREAKDOWN],
                           oof_learned_false_breakdown=oof[RULE_TO_RANKING],
                           sort_breakdown_accuracy=accuracy["sort_breakdown"],
                           sort_ranking_accuracy=accuracy["sort_ranking"], count_accuracy=accuracy["count"])


def _floats(a: Any) -> list[float]:
    return [float(f"{x:.{DIGITS}g}") for x in np.asarray(a, dtype=float).ravel()]


def train(training: Path, name: str = DEFAULT_NAME, threshold: float = DEFAULT_THRESHOLD) -> Artefact:
    """Fit the heads and return the artefact (with its own sha256)."""
    import sklearn


    if not SAFE_NAME.match(name):
        raise InputError(f"must be letters, digits, '_' or '-', got {name!r}", field="--name")
    if not 0.5 <= threshold < 1.0:
        raise InputError(f"must be at least 0.5 and below 1, got {threshold}", field="--threshold")
    examples, sha = read_training(training)
    check_disjoint(examples, str(training))
    texts = [prepare(e.question) for e in examples]
    targets = _targets(examples)
    missing = [f"{h} {c}" for h, (_, y) in targets.items() for c in HEADS[h] if y.count(c) < CV_FOLDS]
    if missing:
        raise InputError(f"needs at least {CV_FOLDS} questions of each class of each head for {CV_FOLDS}-fold "
                         f"cross-validation; too few: {', '.join(missing)}", path=str(training))
    features = _features()
    x = features.fit_transform(texts)
    heads: dict[str, HeadSpec] = {}
    for head, (rows, y) in targets.items():
        clf = _head().fit(x[rows], y)
        heads[head] = HeadSpec(classes=[str(c) for c in clf.classes_], coef=[_floats(r) for r in clf.coef_],
                               intercept=_floats(clf.intercept_))
    feats = {}
    for fname, vec in features.transformer_list:
        vocab = sorted(vec.vocabulary_, key=vec.vocabulary_.__getitem__)
        feats[fname] = FeatureSpec.model_validate({**COMMON, **FEATURES[fname], "vocabulary": vocab,
                                                   "idf": _floats(vec.idf_)})
    counts = {head: dict(sorted(Counter(y).items())) for head, (_, y) in targets.items()}
    artefact = Artefact(
        format=FORMAT, format_version=FORMAT_VERSION, name=name,
        description="ranking vs breakdown (and row count / sort cues) from the question: logistic "
                    "regression on TF-IDF word 1-2 and char_wb 2-5 n-grams",
        threshold=threshold,
        rules=[ArtefactRule(id=RULE_TO_BREAKDOWN, field="intent", from_values=["top_n_by_metric"], to="breakdown",
                            description="model ranked; the classifier says breakdown (P >= threshold)"),
               ArtefactRule(id=RULE_TO_RANKING, field="intent", from_values=["breakdown"], to="top_n_by_metric",
                            description="model gave a breakdown; the classifier says ranking (P >= threshold)")],
        training=TrainingInfo(path=display_path(training), sha256=sha, n=len(examples), kind=counts["kind"],
                              sort_breakdown=counts["sort_breakdown"], sort_ranking=counts["sort_ranking"],
                              count=counts["count"]),
        sklearn_version=sklearn.__version__,
        preprocess=PREPROCESS,
        model=ModelInfo(C=C, solver="lbfgs", random_state=RANDOM_STATE, significant_digits=DIGITS),
        cv=_cv(texts, targets, threshold),
        features=feats,
        heads=heads,
    )
    stored = LearnedModel(artefact, str(training))
    xs = stored.features.transform(texts)
    artefact.model.train_accuracy = {
        head: round(float(np.mean(np.asarray(_decide(head, stored.heads[head].predict_proba(xs[rows]),
                                                     [texts[i] for i in rows])) == np.asarray(y))), 6)
        for head, (rows, y) in targets.items()}
    artefact.artefact_sha256 = canonical_sha256(artefact.to_json())
    return artefact


def artefact_text(artefact: Artefact) -> str:
    """The file's bytes: one compact JSON object, metadata first, then a newline."""
    return json.dumps(artefact.to_json(), separators=(",", ":"), ensure_ascii=True, allow_nan=False) + "\n"


def save(artefact: Artefact, out: Path) -> Path:
    if out.suffix != ".json":
        raise InputError("the artefact is JSON (never pickle): give a path ending in .json", field="--out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(artefact_text(artefact))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
