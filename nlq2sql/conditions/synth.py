"""A bank of solved examples for a warehouse nobody has labelled: made from the semantic layer.

Retrieved examples are the v2 answer's main lever and a new warehouse has no dev set, so this
writes one from the layer and its data (labels, accepted group-bys per metric, known values, years)
in the v2 shapes. Every gold is compiled and executed; failures and empty results are dropped and
duplicates removed, except that a metric with no gold returning rows keeps its compiling ones last,
tagged :data:`EMPTY_TAG` (:func:`synthesize_report` says why a metric produced nothing). It never
reads an eval set, so it cannot leak the set under test; the same seed, layer and data give the same bytes."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nlq2sql.errors import InputError, Nlq2SqlError
from nlq2sql.paths import cache_dir
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.query import MetricQuery, OrderBy, Where
from nlq2sql.stages.execute import Executor

__all__ = ["DEFAULT_N", "DEFAULT_SEED", "EMPTY_TAG", "GENERATOR_VERSION", "SYNTHETIC", "SYNTHETIC_TAG", "Example",
           "MetricYield", "cached_bank", "synthesize", "synthesize_report", "to_jsonl", "write_bank"]

DEFAULT_N, DEFAULT_SEED = 200, 0
#: Part of the cache key: a cached bank made by an older generator is never reused.
GENERATOR_VERSION = 2
#: ``--example-bank synthetic``: the generated bank (also the default when a warehouse has no dev set).
SYNTHETIC = "synthetic"
#: Every synthetic line is tagged so, and ``seed:S``: a bank file says what made it.
SYNTHETIC_TAG = "synthetic"
#: A fallback example whose gold compiles but returns no rows on this data (tiny or empty tables).
EMPTY_TAG = "empty-result"
#: Filter values are drawn from dimensions with at most this many known values.
FILTER_VALUES_MAX = 50
_ATTEMPTS_PER_EXAMPLE = 25
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Example:
    """One generated question with its checked gold."""

    question: str
    gold: MetricQuery
    category: str
    tags: tuple[str, ...]


@dataclass(frozen=True)
class _Dim:
    name: str  # the group-by name valid for the metric(s)
    label: str
    values: tuple[str, ...]  # filterable values (empty: too many, or a yes/no flag)
    few: bool = True  # at most FILTER_VALUES_MAX values: a readable breakdown
    flag: bool = False  # a yes/no dimension: grouped by, never ranked or filtered


def _norm(q: str) -> str:
    return _SPACE.sub(" ", q.lower()).strip(" ?.!")


def _plural(word: str) -> str:
    if word.endswith("y") and not word.endswith(("ay", "ey", "oy")):
        return word[:-1] + "ies"
    return word + ("es" if word.endswith(("s", "x", "ch")) else "s")


class _Layer:
    """What the generator may say about a warehouse, read once: labels, group-bys per metric, values."""

    def __init__(self, wh: Warehouse) -> None:
        cat = wh.catalog
        self.eng = cat.engine
        self.metrics = list(cat.metrics.values())
        self.years = [y for y in wh.years if y.isdigit()]
        self.dims: list[tuple[str, _Dim]] = []  # (own name, template) of each categorical dimension
        for d in cat.dimensions.values():
            vals = wh.values(d.name) or ()
            few = 0 < len(vals) <= FILTER_VALUES_MAX
            flag = few and {v.lower() for v in vals} <= {"true", "false"}
            label = d.label.replace("_", " ")
            if flag:
                label = "whether " + label.removeprefix("is ") if label.startswith("is ") else label + " (yes/no)"
            self.dims.append((d.group_by.rsplit("__", 1)[-1],
                              _Dim("", label, tuple(vals) if few and not flag else (), few, flag)))
        own: dict[str, set[str]] = {}  # metric -> primary entities of the models its measures live in
        primary = {e.name: sm.name for sm in cat.manifest.semantic_models for e in sm.entities
                   if str(getattr(e.type, "value", e.type)).lower() == "primary"}
        measure_model = {ms.name: sm.name for sm in cat.manifest.semantic_models for ms in sm.measures}
        for m in cat.manifest.metrics:
            models = {measure_model.get(i.name) for i in m.input_measures}
            own[m.name] = {e for e, sm in primary.items() if sm in models}
        self.own = own

    def label(self, metric: str) -> str:
        m = next(x for x in self.metrics if x.name == metric)
        text = m.label.replace("_", " ")
        return text if text.isupper() else text[0].lower() + text[1:]

    def described(self, metric: str) -> str:
        """The metric as its description says it (first clause), else its label."""
        m = next(x for x in self.metrics if x.name == metric)
        first = re.split(r"[,(;]|\. ", m.description.strip().rstrip("."))[0].strip()
        return first[0].lower() + first[1:] if 3 <= len(first) <= 60 else self.label(metric)

    def group_dims(self, metrics: tuple[str, ...], *, few: bool = False, flags: bool = True) -> list[_Dim]:
        """Categorical dimensions the metrics reach together, each by its shortest group-by name
        (``few``: only those with a short list of values; ``flags``: yes/no dimensions too)."""
        valid = self.eng.group_bys(metrics)
        out = []
        for own, t in self.dims:
            if (few and not t.few) or (t.flag and not flags):
                continue
            names = sorted((g for g in valid if g.endswith("__" + own)), key=lambda g: (len(g), g))
            if names:
                out.append(_Dim(names[0], t.label, t.values, t.few, t.flag))
        return out

    def entities(self, metric: str) -> list[_Dim]:
        """Entities to rank (``customer``), never one of the metric's own rows or the thing it counts."""
        valid = self.eng.group_bys((metric,))
        words = self.label(metric).lower() + " " + metric
        out = []
        for e in sorted(self.eng.entities):
            label = e.removesuffix("_id").replace("_", " ")
            if e in valid and e not in self.own.get(metric, set()) and label not in words:
                out.append(_Dim(e, label, (), False))
        return out


def _year_range(rng: random.Random, years: list[str], grain: str = "day") -> tuple[str, tuple[Where, ...]]:
    """A date range as analysts say it, with its ``metric_time__day`` filter (longer than ``grain``)."""
    y = rng.choice(years)
    kinds = {"week": ["year", "half", "quarter", "month"], "month": ["year", "year", "half", "quarter"],
             "quarter": ["year", "half"]}.get(grain, ["year", "year", "half", "quarter", "month"])
    kind = rng.choice(kinds)
    day = "metric_time__day"
    if kind == "year":
        return f"in {y}", (Where(field=day, op="between", values=(f"{y}-01-01", f"{y}-12-31")),)
    if kind == "half":
        h = rng.choice([1, 2])
        lo, hi = ("01-01", "06-30") if h == 1 else ("07-01", "12-31")
        return (f"in the {'first' if h == 1 else 'second'} half of {y}",
                (Where(field=day, op="between", values=(f"{y}-{lo}", f"{y}-{hi}")),))
    if kind == "quarter":
        q = rng.randint(1, 4)
        end = f"{int(y) + 1}-01-01" if q == 4 else f"{y}-{3 * q + 1:02d}-01"
        return (f"in Q{q} {y}", (Where(field=day, op="gte", values=(f"{y}-{3 * q - 2:02d}-01",)),
                                 Where(field=day, op="lt", values=(end,))))
    mo = rng.randint(1, 12)
    names = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
             "October", "November", "December"]
    end = f"{int(y) + 1}-01-01" if mo == 12 else f"{y}-{mo + 1:02d}-01"
    return (f"in {names[mo - 1]} {y}", (Where(field=day, op="gte", values=(f"{y}-{mo:02d}-01",)),
                                        Where(field=day, op="lt", values=(end,))))


_GRAIN_WORD = {"week": "weekly", "month": "monthly", "quarter": "quarterly", "year": "yearly"}
Shape = Callable[[random.Random, _Layer], Example | None]


def _by(rng: random.Random, L: _Layer) -> Example | None:
    m = rng.choice(L.metrics).name
    dims = L.group_dims((m,))
    if not dims:
        return None
    d = rng.choice(dims)
    what = rng.choice([L.label(m), L.described(m)])
    q = rng.choice(["{w} for each {d}", "What is the {w} for every {d}?", "Break down {w} by {d}",
                    "Show {w} split by {d}", "How does {w} vary across {d} values?"]).format(w=what, d=d.label)
    tags: list[str] = [f"hops:{d.name.count('__')}"]
    where: tuple[Where, ...] = ()
    if L.years and rng.random() < 0.4:
        when, where = _year_range(rng, L.years)
        q = q.rstrip("?") + f" {when}" + ("?" if q.endswith("?") else "")
        tags.append("date-range")
    return Example(q, MetricQuery(metrics=(m,), group_by=(d.name,), where=where or None), "breakdown", tuple(tags))


def _two_dims(rng: random.Random, L: _Layer) -> Example | None:
    m = rng.choice(L.metrics).name
    dims = L.group_dims((m,), few=True)
    if len(dims) < 2:
        return None
    a, b = rng.sample(dims, 2)
    q = rng.choice(["{w} by {a} and {b}", "Show {w} for every combination of {a} and {b}",
                    "What is the {w} per {a} and {b}?"]).format(w=L.label(m), a=a.label, b=b.label)
    return Example(q, MetricQuery(metrics=(m,), group_by=(a.name, b.name)), "breakdown", ("two-group-bys",))


def _two_metrics(rng: random.Random, L: _Layer) -> Example | None:
    m1, m2 = (x.name for x in rng.sample(L.metrics, 2))
    dims = L.group_dims((m1, m2), few=True)
    if not dims:
        return None
    d = rng.choice(dims)
    q = rng.choice(["{a} and {b} by {d}", "Show both {a} and {b} for each {d}",
                    "Compare {a} with {b} across {d}"]).format(a=L.label(m1), b=L.label(m2), d=d.label)
    return Example(q[0].upper() + q[1:], MetricQuery(metrics=(m1, m2), group_by=(d.name,)), "breakdown",
                   ("several-metrics",))


def _series(rng: random.Random, L: _Layer) -> Example | None:
    m = rng.choice(L.metrics).name
    grain = rng.choice(["week", "month", "month", "quarter", "year"])
    tags = [f"grain:{grain}"]
    where: tuple[Where, ...] = ()
    when = ""
    if L.years and grain != "year" and rng.random() < 0.7:
        when, where = _year_range(rng, L.years, grain)
        when = " " + when
        tags.append("date-range")
    q = rng.choice(["{G} figures for {w}{t}", "{w}, {g} by {g}{t}", "How did {w} develop {g} by {g}{t}?",
                    "Trend of {w} by {g}{t}"]).format(G=_GRAIN_WORD[grain].capitalize(), g=grain, w=L.label(m),
                                                      t=when)
    return Example(q[0].upper() + q[1:], MetricQuery(metrics=(m,), group_by=(f"metric_time__{grain}",),
                                                     where=where or None), "time_series", tuple(tags))


def _filtered(rng: random.Random, L: _Layer) -> Example | None:
    m = rng.choice(L.metrics).name
    dims = L.group_dims((m,))
    filt = [d for d in dims if len(d.values) >= 2]
    dims = [d for d in dims if d.few]
    if not filt or len(dims) < 2:
        return None
    f = rng.choice(filt)
    by = rng.choice([d for d in dims if d.name != f.name] + [_Dim(f"metric_time__{g}", g, ()) for g in ("month",
                                                                                                       "quarter")])
    if rng.random() < 0.5:
        v = rng.choice(f.values)
        cond, w, tag = f"where {f.label} is {v}", Where(field=f.name, op="eq", values=(v,)), "filter"
    else:
        vs = sorted(rng.sample(f.values, min(len(f.values), rng.choice([2, 3]))))
        listed = ", ".join(vs[:-1]) + f" or {vs[-1]}"
        cond, w, tag = f"for {f.label} {listed}", Where(field=f.name, op="in", values=tuple(vs)), "in"
    kind = "time_series" if by.name.startswith("metric_time") else "breakdown"
    q = rng.choice(["{w} by {b} {c}", "What was the {w} per {b} {c}?", "Only {c2}: {w} by {b}"]).format(
        w=L.label(m), b=by.label, c=cond, c2=cond.removeprefix("for ").removeprefix("where "))
    return Example(q[0].upper() + q[1:], MetricQuery(metrics=(m,), group_by=(by.name,), where=(w,)), kind, (tag,))


def _top(rng: random.Random, L: _Layer) -> Example | None:
    m = rng.choice(L.metrics).name
    choices = L.group_dims((m,), flags=False) + L.entities(m)
    if not choices:
        return None
    d = rng.choice(choices)
    n = rng.choice([3, 5, 10])
    low = rng.random() < 0.25
    tags = ["ranked"] + (["entity"] if "__" not in d.name else [])
    noun = _plural(d.label)
    if low:
        q = rng.choice(["The {n} {p} with the lowest {w}", "Bottom {n} {p} by {w}"])
    else:
        q = rng.choice(["Top {n} {p} by {w}", "Which {n} {p} have the highest {w}?", "The {n} {p} with the most {w}"])
    where: tuple[Where, ...] = ()
    text = q.format(n=n, p=noun, w=L.label(m))
    if L.years and rng.random() < 0.4:
        when, where = _year_range(rng, L.years)
        text = text.rstrip("?") + f" {when}" + ("?" if text.endswith("?") else "")
        tags.append("date-range")
    gold = MetricQuery(metrics=(m,), group_by=(d.name,), where=where or None, limit=n,
                       order_by=(OrderBy(field=m, descending=not low), OrderBy(field=d.name, descending=False)))
    return Example(text, gold, "top_n", tuple(tags))


_SHAPES: tuple[tuple[Shape, int], ...] = ((_by, 3), (_two_dims, 2), (_two_metrics, 2), (_series, 3),
                                          (_filtered, 3), (_top, 3))


@dataclass
class MetricYield:
    """What the generator got from one metric: golds with rows, compiled but empty, refused by
    MetricFlow or the database (the first such error kept)."""

    rows: int = 0
    empty: int = 0
    failed: int = 0
    first_error: str | None = None

    def why(self) -> str:
        """Why the metric gave no example with rows, in words."""
        if not (self.rows or self.empty or self.failed):
            return "no query drawn (no shape applies to it, or the bank filled first)"
        parts = []
        if self.empty:
            parts.append(f"{self.empty} compiled, no rows")
        if self.failed:
            parts.append(f"{self.failed} refused (first: {self.first_error})")
        return "; ".join(parts)


def synthesize(wh: Warehouse, n: int = DEFAULT_N, seed: int = DEFAULT_SEED) -> list[Example]:
    """Up to ``n`` examples whose golds compile and return rows; distinct by question and by query;
    compiled-but-empty ones (:data:`EMPTY_TAG`) only for metrics that returned rows for no shape."""
    return synthesize_report(wh, n, seed)[0]


def synthesize_report(wh: Warehouse, n: int = DEFAULT_N, seed: int = DEFAULT_SEED
                      ) -> tuple[list[Example], dict[str, MetricYield]]:
    """:func:`synthesize`, and per metric what its golds gave (rows, empty, refused and why)."""
    if n <= 0:
        raise InputError(f"must be at least 1, got {n}", field="--n")
    layer = _Layer(wh)
    rng = random.Random(seed)
    shapes, weights = zip(*_SHAPES, strict=True)
    out: list[Example] = []
    empty: list[Example] = []  # compiled, no rows: the fallback for a metric that never returns rows
    questions: set[str] = set()
    queries: set[str] = set()
    yields = {m.name: MetricYield() for m in layer.metrics}
    with Executor(wh.db_path) as ex:
        for _ in range(n * _ATTEMPTS_PER_EXAMPLE):
            if len(out) >= n:
                break
            shape = rng.choices(shapes, weights)[0]
            e = shape(rng, layer)
            if e is not None:
                e = Example(e.question[0].upper() + e.question[1:], e.gold, e.category, e.tags)
            if e is None or _norm(e.question) in questions or e.gold.key() in queries:
                continue
            try:
                rows = ex.run(wh.catalog.engine.compile(e.gold))
            except Nlq2SqlError as exc:  # a metric that needs metric_time, a path MetricFlow refuses, …
                for m in e.gold.metrics:
                    y = yields[m]
                    y.failed += 1
                    y.first_error = y.first_error or str(exc).splitlines()[0][:200]
                continue
            for m in e.gold.metrics:
                if rows:
                    yields[m].rows += 1
                else:
                    yields[m].empty += 1
            if not rows:
                if len(empty) < n and not any(_norm(e.question) == _norm(x.question) or e.gold.key() == x.gold.key()
                                              for x in empty):
                    empty.append(e)
                continue
            questions.add(_norm(e.question))
            queries.add(e.gold.key())
            out.append(e)
    for e in empty:  # after every example with rows, in the order generated: the same bytes for a seed
        if len(out) >= n:
            break
        if any(yields[m].rows for m in e.gold.metrics) or _norm(e.question) in questions \
                or e.gold.key() in queries:
            continue
        questions.add(_norm(e.question))
        queries.add(e.gold.key())
        out.append(Example(e.question, e.gold, e.category, (*e.tags, EMPTY_TAG)))
    return out, yields


def to_jsonl(examples: list[Example], seed: int) -> str:
    """The bank as a v2 eval set's JSONL (usable as ``--example-bank`` and by ``evalset check``)."""
    lines = []
    for i, e in enumerate(examples, start=1):
        gold = {k: v for k, v in e.gold.model_dump(mode="json").items() if v is not None}
        lines.append(json.dumps({"id": f"syn-{seed}-{i:04d}", "question": e.question, "gold": gold,
                                 "answerable": True, "category": e.category, "pair_id": None,
                                 "tags": [SYNTHETIC_TAG, f"seed:{seed}", *e.tags]}, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def write_bank(wh: Warehouse, out: Path, n: int = DEFAULT_N, seed: int = DEFAULT_SEED) -> int:
    """Generate and write atomically (nothing half-written); returns how many examples."""
    examples, yields = synthesize_report(wh, n, seed)
    if not examples:
        why = "; ".join(f"{m}: {y.why()}" for m, y in sorted(yields.items())) or "the layer has no metric"
        raise InputError(f"no example could be generated (no metric's query compiled for any shape): {why}",
                         path=wh.catalog.path, field="--semantic-model")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(to_jsonl(examples, seed), encoding="utf-8")
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return len(examples)


def cached_bank(wh: Warehouse, n: int = DEFAULT_N, seed: int = DEFAULT_SEED) -> Path:
    """The generated bank in the cache, keyed by semantic model, data fingerprint, seed and n."""
    key = hashlib.sha256(f"{GENERATOR_VERSION}|{wh.catalog.sha256}|{wh.fingerprint}|{seed}|{n}".encode()
                         ).hexdigest()[:16]
    path = cache_dir() / "banks" / f"synthetic-{wh.catalog.name}-{key}.jsonl"
    if not path.is_file():
        write_bank(wh, path, n, seed)
    return path
