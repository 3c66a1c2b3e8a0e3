"""Answer arms side by side: does the semantic layer help, for which model, at what cost?

``query`` (a MetricFlow query under the manifest's JSON Schema), ``sql`` (free DuckDB SQL) and
``sql-grammar`` (the same under the warehouse's SQL grammar) answer the same items and are scored by
rows against the same gold: per arm accuracy with a Wilson CI, per pair an exact McNemar test paired
on item id, tokens, latency, cost per 1,000 questions and one error taxonomy. Read from finished
run directories only, so the report rebuilds offline."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path

from nlq2sql.answers.kinds import KINDS
from nlq2sql.errors import InputError
from nlq2sql.experiments.common import read_run, shared_endpoint
from nlq2sql.experiments.compare import cost_per_1k
from nlq2sql.records.results import Manifest, Summary
from nlq2sql.records.rundir import RunDir
from nlq2sql.records.store import output_dir, write_json_atomic
from nlq2sql.records.store import output_dir as check_out
from nlq2sql.records.summary_parts import Percentiles, Rate
from nlq2sql.records.typed import Num, Typed
from nlq2sql.run.config import EvalConfig, validate
from nlq2sql.run.live import run_eval
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import mcnemar_exact, rate, spread

__all__ = ["ARMS", "TAXONOMY", "Arm", "ArmPair", "ArmRow", "ArmsTable", "arms_table", "common_error", "load_arm",
           "matrix_arms", "parse_answers", "render_markdown", "run_arms", "write_result"]

#: The arms ``matrix --answers`` runs ("intent" is read as ``query``: the v2 sets' intent).
ARMS = ("query", "sql", "sql-grammar")
ALIASES = {"intent": "query"}
#: The issue's error taxonomy, shared by every arm (``common_error``).
TAXONOMY = ("unparsable", "refused", "timeout", "execution error", "wrong columns", "wrong rows", "wrong order",
            "abstention", "request failed")

_COMMON = {
    "unparsable": "unparsable", "truncated": "unparsable", "schema_invalid": "unparsable",
    "refused": "refused", "timeout": "timeout", "exec_error": "execution error", "too_many_rows": "execution error",
    "sql_error": "execution error",
    "wrong_columns": "wrong columns", "wrong_rows": "wrong rows", "wrong_order": "wrong order",
    # the query arm names the part of the query that differs: its rows differ accordingly
    "wrong_metrics": "wrong columns", "wrong_group_by": "wrong columns", "wrong_where": "wrong rows",
    "wrong_limit": "wrong rows", "wrong_order_by": "wrong order",
    "answered_unanswerable": "abstention", "false_abstention": "abstention",
    "request_error": "request failed", "missing": "request failed",
}


def common_error(error: str | None) -> str | None:
    """An arm's own ``error_final`` in the shared taxonomy (None: correct; unknown kinds kept)."""
    if error is None:
        return None
    return _COMMON.get(error, error)


def parse_answers(text: str) -> tuple[str, ...]:
    """``--answers`` as arms, ``intent`` read as ``query``; unknown or repeated ones refused."""
    names = [ALIASES.get(a.strip(), a.strip()) for a in text.split(",") if a.strip()]
    bad = [a for a in names if a not in ARMS]
    if not names or bad:
        raise InputError(f"unknown answer arm(s) {', '.join(bad) or repr(text)} (known: intent = query, sql, "
                         "sql-grammar)", field="--answers")
    if len(set(names)) < len(names):
        raise InputError(f"an arm is named twice in {text!r}", field="--answers")
    return tuple(names)


def run_arms(base: EvalConfig, answers: tuple[str, ...]) -> dict[str, Path]:
    """One live run per arm on the same endpoint, items and conditions; each arm its own prompt."""
    dirs: dict[str, Path] = {}
    for answer in answers:
        out = base.out / f"{base.evalset}-{answer}"
        prompt = KINDS[answer].prompt
        run_eval(replace(base, answer=answer, prompt=prompt, guardrails=(), out=out, force=True, resume=False))
        dirs[answer] = out
    return dirs


@dataclass
class Arm:
    """One recorded run, as the arm table needs it (``manifest`` and ``summary``: None for arms
    pooled over several runs)."""

    label: str
    answer: str
    model: str
    evalset: str
    manifest: Manifest | None
    summary: Summary | None
    correct: dict[str, bool]
    lenient: dict[str, bool]  # extra columns allowed (SQL arms; the query arm: = correct)
    errors: Counter[str]
    prompt_tokens: list[float]
    completion_tokens: list[float]
    latency_s: list[float]


def load_arm(run_dir: Path) -> Arm:
    m, s = read_run(run_dir)
    correct: dict[str, bool] = {}
    lenient: dict[str, bool] = {}
    errors: Counter[str] = Counter()
    pt: list[float] = []
    ct: list[float] = []
    lat: list[float] = []
    for rec in RunDir(run_dir).records():
        j = rec.judgement
        final = j.correct_final if j is not None else None
        correct[rec.id] = bool(final)
        loose = j.correct_lenient if j is not None else None  # absent: the query arm (= correct)
        lenient[rec.id] = bool(final if loose is None else loose)
        errors[common_error(j.error_final if j is not None else None) or "correct"] += 1
        for v, into in ((rec.request.prompt_tokens, pt), (rec.request.completion_tokens, ct),
                        (rec.request.latency_s, lat)):
            if isinstance(v, int | float):
                into.append(float(v))
    answer = m.answer or "intent"
    model = "?" if "model" not in m.model_fields_set else str(m.model)
    return Arm(f"{answer} · {model}", answer, model, m.evalset, m, s, correct, lenient, errors, pt, ct, lat)


# ``arms.json`` as built.

class ArmRow(Typed):
    arm: str
    model: str
    evalset: str
    run: str
    n: int
    accuracy: Rate
    lenient: Rate
    examples: int
    prompt_tokens: Percentiles
    completion_tokens: Percentiles
    latency_s: Percentiles
    req_per_s: Num | None
    cost_per_1k: float | None
    grammar_sha256: str | None
    errors: dict[str, int]


class ArmPair(Typed):
    a: str
    b: str
    model: str
    evalset: str
    n: int
    a_right_b_wrong: int
    b_right_a_wrong: int
    mcnemar_exact_p: float


class ArmsTable(Typed):
    arms: list[ArmRow]
    pairs: list[ArmPair]
    gpu_cost_per_hour: float | None
    taxonomy_note: str


def _examples(manifest: Manifest | None) -> int:
    """K retrieved examples (the ``examples`` condition's manifest key; 0 when off)."""
    examples = getattr(manifest, "examples", None)  # (conditions.example_bank.ExamplesManifest)
    return int(examples.k) if examples is not None else 0


def arms_table(arms: list[Arm], gpu_cost_per_hour: float | None = None) -> ArmsTable:
    """Per arm: accuracy (Wilson CI), lenient accuracy, tokens, latency, cost; per pair: McNemar."""
    rows = []
    for a in arms:
        k = sum(a.correct.values())
        rps = a.summary.throughput.req_per_s if a.summary and a.summary.throughput else None
        sampling = a.manifest.sampling if a.manifest else None
        rows.append(ArmRow(
            arm=a.answer, model=a.model, evalset=a.evalset, run=a.label,
            n=len(a.correct), accuracy=rate(k, len(a.correct)),
            lenient=rate(sum(a.lenient.values()), len(a.lenient)), examples=_examples(a.manifest),
            prompt_tokens=spread(a.prompt_tokens), completion_tokens=spread(a.completion_tokens),
            latency_s=spread(a.latency_s), req_per_s=rps, cost_per_1k=cost_per_1k(rps, gpu_cost_per_hour),
            grammar_sha256=sampling.grammar_sha256 if sampling is not None else None,
            errors={t: a.errors.get(t, 0) for t in ("correct", *TAXONOMY) if a.errors.get(t)}
                   | {t: v for t, v in a.errors.items() if t not in TAXONOMY and t != "correct"},
        ))
    pairs = []
    for x, y in combinations(arms, 2):
        if x.model != y.model or x.evalset != y.evalset:
            continue
        common = sorted(set(x.correct) & set(y.correct))
        b = sum(x.correct[i] and not y.correct[i] for i in common)
        c = sum(y.correct[i] and not x.correct[i] for i in common)
        pairs.append(ArmPair(a=x.answer, b=y.answer, model=x.model, evalset=x.evalset, n=len(common),
                             a_right_b_wrong=b, b_right_a_wrong=c, mcnemar_exact_p=mcnemar_exact(b, c)))
    return ArmsTable(arms=rows, pairs=pairs, gpu_cost_per_hour=gpu_cost_per_hour,
                     taxonomy_note="query-arm errors mapped by the part that differs: metrics/group_by -> wrong "
                                   "columns, where/limit -> wrong rows, order_by -> wrong order")


def _num(v: float | None, fmt: str) -> str:
    return format(v, fmt) if v is not None else "n/a"


def render_markdown(table: ArmsTable, title: str) -> str:
    lines = [f"## {title}", "",
             "| model | set | arm | examples | n | accuracy (95 % CI) | lenient | prompt tokens (mean) | "
             "completion tokens (mean) | latency p50 | latency p95 | cost / 1k |", "|---" * 12 + "|"]
    for r in table.arms:
        lines.append(f"| {r.model} | {r.evalset} | {r.arm} | {r.examples} | {r.n} | "
                     f"{pct(r.accuracy)} | {pct(r.lenient)} | {_num(r.prompt_tokens.mean, '.0f')} | "
                     f"{_num(r.completion_tokens.mean, '.1f')} | {_num(r.latency_s.p50, '.2f')} s | "
                     f"{_num(r.latency_s.p95, '.2f')} s | "
                     f"{'$' + format(r.cost_per_1k, '.4f') if r.cost_per_1k is not None else 'n/a'} |")
    lines += ["", "Paired on item id (final correctness, exact McNemar):", "",
              "| model | set | A | B | n | A right, B wrong | B right, A wrong | p |", "|---" * 8 + "|"]
    for p in table.pairs:
        lines.append(f"| {p.model} | {p.evalset} | {p.a} | {p.b} | {p.n} | {p.a_right_b_wrong} | "
                     f"{p.b_right_a_wrong} | {p.mcnemar_exact_p:.4f} |")
    lines += ["", "Error taxonomy per arm (" + table.taxonomy_note + "):", ""]
    for r in table.arms:
        lines.append(f"- {r.model} · {r.evalset} · {r.arm}: " + ", ".join(f"{k} {v}" for k, v in r.errors.items()))
    if table.gpu_cost_per_hour is not None:
        lines.append(f"\nCost assumes ${table.gpu_cost_per_hour}/hour and each run's measured completed "
                     "requests per second (CPU vLLM: it ranks the arms on this machine, not on a GPU).")
    return "\n".join(lines) + "\n"


def matrix_arms(answers: str, runs: list[Path] | None, out: Path, base: Callable[[], EvalConfig],
                gpu_cost_per_hour: float | None, title: str) -> str:
    """``matrix --answers``: the recorded ``runs`` side by side, or one live run per arm on one
    endpoint (every arm's configuration checked before a server starts); the table written to
    ``out`` (``arms.json``, ``arms.md``); returns the Markdown."""
    check_out(out, create=False)
    wanted = parse_answers(answers)
    if runs:
        arms = [load_arm(d) for d in runs]
        if stray := sorted({a.answer for a in arms} - set(wanted)):
            raise InputError(f"--runs holds arm(s) {', '.join(stray)} not named in --answers {answers!r}",
                             field="--runs")
    else:
        cfg = base()
        for answer in wanted:  # bad input is refused before any server starts
            validate(replace(cfg, answer=answer, prompt=KINDS[answer].prompt, guardrails=()))
        with shared_endpoint(cfg) as bound:
            arms = [load_arm(d) for d in run_arms(bound, wanted).values()]
    table = arms_table(arms, gpu_cost_per_hour)
    write_result(out, table, title)
    return render_markdown(table, title)


def write_result(out: Path, table: ArmsTable, title: str) -> None:
    output_dir(out)
    write_json_atomic(out / "arms.json", table.to_json())
    (out / "arms.md").write_text(render_markdown(table, title))
