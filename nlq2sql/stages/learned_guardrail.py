"""The learned guardrail (``--guardrails learned:NAME``): a classifier in place of word lists.

Logistic-regression heads over TF-IDF word (1–2) and character (``char_wb`` 2–5) n-grams of the
question (numbers and years as placeholders): ``kind`` (ranking vs breakdown; gates the rules),
``sort_breakdown`` / ``sort_ranking`` (order), ``count`` (none / literal: the first number written,
not a year or code / one: a singular superlative). Two rules, recorded as the lexical ones'
:class:`~nlq2sql.stages.guardrail.Intervention`: ``learned_false_ranking`` (``top_n_by_metric`` →
``breakdown``) and ``learned_false_breakdown`` (the reverse), each when its probability ≥ the
artefact's threshold, limit and order from the heads.
The artefact is **JSON, never pickle** (vocabularies, IDF weights, coefficients, training set
sha256, scikit-learn version, cross-validated accuracy), with its own sha256 over its canonical
content, which the loader verifies: an edited file is refused."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from nlq2sql.errors import GuardrailError
from nlq2sql.inputs import parse_json
from nlq2sql.records.manifest_parts import GuardrailArtefact
from nlq2sql.semantic.catalog import display_path
from nlq2sql.stages.guardrail import GUARDRAIL_DIR, NUMBER_WORDS, Intervention, Rule, RuleSet, propose
from nlq2sql.stages.intent import Intent
from nlq2sql.stages.learned_artefact import Artefact

__all__ = ["C", "COMMON", "COUNTS", "CV_FOLDS", "DEFAULT_NAME", "DEFAULT_THRESHOLD", "DEFAULT_TRAINING", "DIGITS",
           "FEATURES", "FORMAT", "FORMAT_VERSION", "HEADS", "LABELS", "LEARNED_DIR", "MEMO_SIZE", "NUMBER", "PREFIX",
           "PREPROCESS", "RANDOM_STATE", "RULE_TO_BREAKDOWN", "RULE_TO_RANKING", "SAFE_NAME", "TRAINING_DIR",
           "TRAIN_KEYS", "LearnedModel", "LearnedRuleSet", "Prediction", "artefact_path", "canonical_sha256",
           "load_learned", "load_model", "normalise_question", "numbers_in", "prepare", "read_artefact"]

PREFIX = "learned:"
LEARNED_DIR = GUARDRAIL_DIR / "learned"
TRAINING_DIR = GUARDRAIL_DIR / "training"
DEFAULT_NAME = "ranking"
DEFAULT_TRAINING = TRAINING_DIR / "ranking-train.jsonl"
FORMAT = "nlq2sql-learned-guardrail"
FORMAT_VERSION = 1
#: 0.5: the rule follows the classifier's decision (a tie never fires either rule).
DEFAULT_THRESHOLD = 0.5
RANDOM_STATE = 0
CV_FOLDS = 5
#: Inverse regularisation of every head and the n-gram document-frequency floor (fixed; chosen
#: once by 5-fold cross-validation over C ∈ {1, 10, 100} × min_df ∈ {1, 2}: all within a point,
#: min_df 2 halves the artefact).
C = 10.0
#: Weights are stored to this many significant digits (the artefact stays small; the stored,
#: rounded model is the model: its training accuracy is measured after rounding).
DIGITS = 4
LABELS = ("breakdown", "ranking")
COUNTS = ("literal", "none", "one")
#: The heads and their classes: the order a question asks for depends on its kind (a
#: breakdown is unordered unless it says so; a ranking is always ordered), so each kind has
#: its own sort head, trained on that kind's questions only.
HEADS = {"kind": LABELS, "sort_breakdown": ("asc", "desc", "none"), "sort_ranking": ("asc", "desc"),
         "count": COUNTS}
SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TRAIN_KEYS = {"id", "question", "label", "row_count", "sort", "source", "warehouse"}
MEMO_SIZE = 4096
RULE_TO_BREAKDOWN = "learned_false_ranking"
RULE_TO_RANKING = "learned_false_breakdown"
FEATURES = {"word": {"analyzer": "word", "ngram_range": [1, 2]},
            "char": {"analyzer": "char_wb", "ngram_range": [2, 5]}}
COMMON = {"lowercase": True, "sublinear_tf": True, "min_df": 2}

_NUM_WORDS = "|".join(sorted((re.escape(w) for w in NUMBER_WORDS), key=len, reverse=True))
#: A number written in a question: digits (not part of a year, ``Brand#12``, ``1-URGENT``,
#: ``Q3``) or a number word.
NUMBER = re.compile(rf"(?<![\w#.])(\d{{1,3}}|{_NUM_WORDS})(?![\w#]|-[a-z]|\.\d)")
_PUNCT = re.compile(r"[^0-9a-z#]+")
_YEAR = re.compile(r"(?<![\w#])(19|20)\d\d(?!\w)")
#: How a question is prepared for the vectorisers (recorded in the artefact; the loader
#: refuses another): lower case, a year → ``qyear``, a number that could be a row count →
#: ``qnum`` — the word tokenizer drops one-character tokens, so "top 3" and "top products"
#: looked alike, and "top 3" / "top 12" / "top ten" are one pattern.
PREPROCESS = "lower; years -> qyear; row-count numbers -> qnum; v1"


def prepare(question: str) -> str:
    """The text the vectorisers see."""
    text = _YEAR.sub(" qyear ", question.lower())
    return NUMBER.sub(" qnum ", text)


def normalise_question(text: str) -> str:
    """Lower case, every run of punctuation or space → one space: the disjointness key
    (stricter than the example bank's: "top-line" and "top line" are the same question)."""
    return _PUNCT.sub(" ", text.lower()).strip()


def numbers_in(question: str) -> list[int]:
    """The numbers written in a question that could be a row count (1..100), in order."""
    out = []
    for m in NUMBER.finditer(question.lower()):
        tok = m.group(1)
        n = int(tok) if tok.isdigit() else NUMBER_WORDS[tok]
        if 1 <= n <= 100:
            out.append(n)
    return out


# --- the model ----------------------------------------------------------------------------


def _decide(head: str, proba: Any, texts: list[str]) -> list[str]:
    """Each row's class from its probabilities; a written count needs a number in the text
    (without one: the likelier of none / one)."""
    proba = np.array(proba, dtype=float)
    if head == "count":
        for i, text in enumerate(texts):
            if "qnum" not in text.split():
                proba[i, COUNTS.index("literal")] = -1.0
    return [HEADS[head][j] for j in np.argmax(proba, axis=1)]


def canonical_sha256(payload: dict[str, Any]) -> str:
    """sha256 of an artefact's canonical JSON, without its own ``artefact_sha256`` key (the JSON
    object as read from the file, or :meth:`~.learned_artefact.Artefact.to_json`)."""
    body = {k: v for k, v in payload.items() if k != "artefact_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Prediction:
    p_breakdown: float
    p_ranking: float
    breakdown_sort: str | None  # desc / asc / None: the order asked for, read as a breakdown
    ranking_sort: str  # desc / asc: the direction, read as a ranking
    count: str  # literal / one / none
    number: int | None  # the first number written in the question

    @property
    def ranking_limit(self) -> int | None:
        """The row count of a ranking: the written number, 1, or None (→ default top N)."""
        return self.number if self.count == "literal" else 1 if self.count == "one" else None

    @property
    def breakdown_limit(self) -> int | None:
        """The row count of a breakdown: only a number the question writes."""
        return self.number if self.count == "literal" else None


class LearnedModel:
    """The loaded artefact: rebuilt scikit-learn objects, predictions memoised per question."""

    def __init__(self, artefact: Artefact, source: str) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import FeatureUnion

        self.artefact, self.source = artefact, source
        self.name: str = artefact.name
        self.threshold = float(artefact.threshold)
        try:
            parts = []
            width = 0
            for fname in FEATURES:
                feat = artefact.features[fname]
                vocab, idf = feat.vocabulary, feat.idf
                if len(vocab) != len(idf) or len(set(vocab)) != len(vocab):
                    raise ValueError(f"features.{fname}: vocabulary and idf do not match")
                vec = TfidfVectorizer(vocabulary={t: i for i, t in enumerate(vocab)}, lowercase=feat.lowercase,
                                      sublinear_tf=feat.sublinear_tf, min_df=feat.min_df, analyzer=feat.analyzer,
                                      ngram_range=tuple(feat.ngram_range))
                vec.idf_ = np.asarray(idf, dtype=float)
                parts.append((fname, vec))
                width += len(vocab)
            self.features = FeatureUnion(parts)
            self.heads: dict[str, LogisticRegression] = {}
            for head, classes in HEADS.items():
                spec = artefact.heads[head]
                if tuple(spec.classes) != classes:
                    raise ValueError(f"heads.{head}.classes must be {list(classes)}")
                clf = LogisticRegression()
                clf.classes_ = np.asarray(spec.classes)
                clf.coef_ = np.asarray(spec.coef, dtype=float)
                clf.intercept_ = np.asarray(spec.intercept, dtype=float)
                rows = 1 if len(classes) == 2 else len(classes)
                if clf.coef_.shape != (rows, width) or clf.intercept_.shape != (rows,):
                    raise ValueError(f"heads.{head}: coefficients of shape {clf.coef_.shape}, expected "
                                     f"({rows}, {width})")
                clf.n_features_in_ = width
                self.heads[head] = clf
        except (KeyError, TypeError, ValueError) as exc:
            raise GuardrailError(f"malformed learned guardrail artefact: {exc}", path=source) from None
        self._memo: dict[str, Prediction] = {}

    def gate(self, pred: Prediction) -> str | None:
        """The rule the classifier's answer opens: its label's probability reaches the threshold
        (and beats the other's, so a tie opens neither)."""
        if pred.p_breakdown >= self.threshold and pred.p_breakdown > pred.p_ranking:
            return RULE_TO_BREAKDOWN
        if pred.p_ranking >= self.threshold and pred.p_ranking > pred.p_breakdown:
            return RULE_TO_RANKING
        return None

    def predict(self, question: str) -> Prediction:
        try:
            return self._memo[question]
        except KeyError:
            pass
        text = prepare(question)
        x = self.features.transform([text])
        kind = self.heads["kind"].predict_proba(x)[0]
        label = {head: _decide(head, self.heads[head].predict_proba(x), [text])[0]
                 for head in ("sort_breakdown", "sort_ranking", "count")}
        nums = numbers_in(question)
        sort_b = label["sort_breakdown"]
        pred = Prediction(float(kind[0]), float(kind[1]), None if sort_b == "none" else sort_b,
                          label["sort_ranking"], label["count"], nums[0] if nums else None)
        if len(self._memo) >= MEMO_SIZE:
            self._memo.clear()
        self._memo[question] = pred
        return pred


@dataclass(frozen=True)
class LearnedRuleSet(RuleSet):
    """A rule set whose rules are gated by the classifier instead of cues; same contract:
    :meth:`apply` returns the new intent and its interventions."""

    model: LearnedModel | None = field(default=None, compare=False, repr=False)

    def provenance(self) -> GuardrailArtefact:
        """What a run's manifest records of the artefact (its section's type)."""

        assert self.model is not None
        a = self.model.artefact
        assert isinstance(a.artefact_sha256, str)  # (set when an artefact is loaded)
        return GuardrailArtefact(path=display_path(Path(self.model.source)), artefact_sha256=a.artefact_sha256,
                                 training_sha256=a.training.sha256, training_n=a.training.n,
                                 threshold=self.model.threshold, sklearn_version=a.sklearn_version)

    def apply(self, intent: Intent, question: str) -> tuple[Intent, list[Intervention]]:
        assert self.model is not None
        found: list[Intervention] = []
        current = intent.model_dump(mode="json")
        for rule in self.rules:
            if current[rule.field] not in rule.from_values:
                continue
            pred = self.model.predict(question)
            if self.model.gate(pred) != rule.id:
                continue
            if rule.to == "breakdown":
                update: dict[str, Any] = {"intent": "breakdown", "limit": pred.breakdown_limit,
                                          "order": pred.breakdown_sort}
            else:
                update = {"intent": "top_n_by_metric", "limit": pred.ranking_limit, "order": pred.ranking_sort}
            # never an invalid intent, nor an inconsistent one (a ranking needs a dimension)
            step = propose(rule.id, current, update, consistent=True)
            if step is not None:
                intent, current = step[0], step[1]
                found.append(step[2])
        return intent, found


def artefact_path(ref: str) -> Path:
    """``NAME`` → ``guardrails/learned/NAME.json``; a path (``…/x.json``) as given."""
    if SAFE_NAME.match(ref):
        path = LEARNED_DIR / f"{ref}.json"
        if not path.is_file():
            known = sorted(p.stem for p in LEARNED_DIR.glob("*.json"))
            raise GuardrailError(f"no learned guardrail '{ref}' in {LEARNED_DIR} (known: "
                                 f"{', '.join(known) or 'none'}); train one with: nlq2sql guardrail train "
                                 f"--name {ref}")
        return path
    path = Path(ref)
    if path.suffix != ".json":
        raise GuardrailError(f"learned guardrail {ref!r}: give a name or a path to a .json artefact")
    if not path.is_file():
        raise GuardrailError("no such learned guardrail artefact", path=ref)
    return path


def read_artefact(path: Path) -> Artefact:
    """Read and verify an artefact: format, version and its sha256 over the canonical content (of the
    JSON object as read: the edge), then the object as an :class:`~.learned_artefact.Artefact`."""
    src = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GuardrailError(f"cannot read the artefact: {exc}", path=src) from None
    try:
        data = parse_json(text, path=src, cls=GuardrailError)
    except json.JSONDecodeError as exc:
        raise GuardrailError(f"malformed JSON ({exc.msg})", path=src, line=exc.lineno) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GuardrailError(f"not a learned guardrail artefact (format must be {FORMAT!r})", path=src,
                             field="format")
    if data.get("format_version") != FORMAT_VERSION:
        raise GuardrailError(f"format_version {data.get('format_version')!r} is not supported (this "
                             f"nlq2sql reads {FORMAT_VERSION}); retrain", path=src, field="format_version")
    try:
        actual = canonical_sha256(data)
    except ValueError as exc:  # NaN / infinity
        raise GuardrailError(f"malformed artefact: {exc}", path=src) from None
    if data.get("artefact_sha256") != actual:
        raise GuardrailError(f"sha256 mismatch: the artefact records {data.get('artefact_sha256')!r} but its "
                             f"content hashes to {actual!r}: it was changed after training; refusing to "
                             f"load it (retrain with nlq2sql guardrail train)", path=src, field="artefact_sha256")
    threshold = data.get("threshold")
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0.5 <= threshold < 1:
        raise GuardrailError("must be a number in [0.5, 1)", path=src, field="threshold")
    if data.get("preprocess") != PREPROCESS:
        raise GuardrailError(f"preprocess {data.get('preprocess')!r} is not this version's ({PREPROCESS!r}); "
                             f"retrain", path=src, field="preprocess")
    if not isinstance(data.get("name"), str):
        raise GuardrailError("missing", path=src, field="name")
    try:
        return Artefact.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise GuardrailError(f"malformed learned guardrail artefact: {first['msg']}", path=src,
                             field=".".join(str(x) for x in first["loc"])) from None


def load_model(ref: str) -> LearnedModel:
    path = artefact_path(ref)
    return LearnedModel(read_artefact(path), str(path))


def load_learned(ref: str) -> LearnedRuleSet:
    """The rule set ``learned:REF`` (REF a name under ``guardrails/learned/`` or a path)."""
    model = load_model(ref)
    rules = []
    for spec in model.artefact.rules:
        rules.append(Rule(id=spec.id, field=spec.field, from_values=tuple(spec.from_values), to=spec.to,
                          description=spec.description))
    known = {(RULE_TO_BREAKDOWN, "top_n_by_metric", "breakdown"), (RULE_TO_RANKING, "breakdown", "top_n_by_metric")}
    for r in rules:
        if r.field != "intent" or len(r.from_values) != 1 or (r.id, r.from_values[0], r.to) not in known:
            raise GuardrailError(f"rule {r.id!r} is not a rule this version knows", path=model.source,
                                 field="rules")
    return LearnedRuleSet(f"{PREFIX}{ref}", tuple(rules), {}, model.artefact.description,
                          model=model)
