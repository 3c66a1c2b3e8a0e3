"""The quality report's answer-arm section: v2 and SQL runs, re-scored from records.

A run whose manifest names an ``answer`` arm is re-scored by that arm's scorer over its raw text
against the rebuilt warehouse (SQL arms in the sandbox), saying how many items agree with what was
recorded. Per model × warehouse × set: each arm's accuracy, exact McNemar p against the query arm,
and unanswerable precision and recall."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nlq2sql.answers.kinds import KINDS, QueryKind
from nlq2sql.conditions.registry import REGISTRY
from nlq2sql.experiments.common import read_run
from nlq2sql.records.results import Manifest, manifest_warehouse
from nlq2sql.records.results import Summary as SummaryModel
from nlq2sql.records.rundir import RunDir
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.pipeline import make_executor
from nlq2sql.stages.queryset import QueryCase, load_query_set
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import mcnemar_exact, rate
from nlq2sql.stages.summary import Summary

__all__ = ["ArmRun", "arm_answers", "arm_lines", "collect_arms", "is_arm_run"]


def arm_answers() -> tuple[str, ...]:
    """The answer arms this section re-scores: the kinds scored on v2 sets (a manifest without
    ``answer`` is a v1 intent run), in registration order."""
    return tuple(k.name for k in KINDS if k.case_type is QueryCase)


def is_arm_run(run_dir: Path) -> bool:
    """Whether the run's manifest names an answer arm (read through the manifest model)."""
    return RunDir(run_dir).manifest(REGISTRY.manifest_model()).answer in arm_answers()


@dataclass
class ArmRun:
    """One arm run, re-derived: its summary, correctness by item id, and agreement with the record."""

    path: Path
    manifest: Manifest
    summary: SummaryModel
    final_ok: dict[str, bool]
    same_as_recorded: int

    @property
    def key(self) -> tuple[str, str, str]:
        m = self.manifest
        return str(m.model), str(m.semantic_model), m.evalset


def rescore_arm(run_dir: Path) -> ArmRun:
    """Re-score one arm run from its records (refused when they no longer match its summary)."""
    manifest, _ = read_run(run_dir)
    answer = str(manifest.answer)
    wh = open_warehouse(manifest_warehouse(manifest.model_dump(exclude_unset=True)))
    cases = {c.id: c for c in load_query_set(manifest.evalset_path or manifest.evalset, wh.catalog).cases}
    kind = KINDS[answer]
    summ = Summary([], fields=kind.fields())
    final_ok: dict[str, bool] = {}
    same = 0
    with make_executor(wh) as ex, kind.scorer(wh, []) as scorer:
        for old in RunDir(run_dir).records():
            outcome = old.outcome
            rec = scorer(cases[old.id], old.answer.raw_text, ex, wh.catalog,
                         finish_reason=old.answer.finish_reason,
                         request_error=None if outcome in (None, "ok") else outcome)
            was, now = old.request, rec.request
            now.latency_s, now.completion_tokens = was.latency_s, was.completion_tokens
            now.prompt_tokens = was.prompt_tokens
            summ.add(rec)
            assert rec.judgement is not None  # an arm's scorer always judges (its sets have golds)
            final_ok[rec.id] = bool(rec.judgement.correct_final)
            old_final = old.judgement.correct_final if old.judgement is not None else None
            same += final_ok[rec.id] == bool(old_final)
    return ArmRun(run_dir, manifest, SummaryModel.of(summ.figures()), final_ok, same)


def collect_arms(run_dirs: list[Path]) -> list[ArmRun]:
    return [rescore_arm(d) for d in run_dirs]


def _abstention(s: SummaryModel) -> str:
    if (ab := s.abstention) is None:
        return "—"
    prec, rec = ab.precision, ab.recall
    return (f"{ab.abstained} · P {pct(prec) if prec.n else '—'} · "
            f"R {pct(rec) if rec.n else '—'}")


def arm_lines(runs: list[ArmRun]) -> list[str]:
    """The section's Markdown lines (empty when no arm run was given)."""
    if not runs:
        return []
    lines = ["", "## Answer arms: query vs SQL (issues 22 and 23), re-scored from records", "",
             "Each arm's recorded raw answers re-scored by the arm's own scorer against the rebuilt warehouse "
             "(`query`: the v2 MetricFlow query; `sql`/`sql-grammar`: the model's SQL, guarded and sandboxed, "
             "scored by result equivalence). McNemar: exact two-sided p against the query arm on the same items "
             "(b/c: only query right / only this arm right). Abstained · unanswerable precision · recall. "
             "Same: items whose re-derived correctness equals the recorded one. Full tables: `reports/arms/`.", "",
             "| model | warehouse | set | arm | n | final | McNemar vs query | abstention | same as recorded |",
             "|---" * 9 + "|"]
    order = {a: i for i, a in enumerate(arm_answers())}
    runs = sorted(runs, key=lambda r: (r.key, order.get(str(r.manifest.answer), 9)))
    for r in runs:
        answer = str(r.manifest.answer)
        q = next((x for x in runs if x.key == r.key and x.manifest.answer == QueryKind.name), None)
        vs = "—"
        if q is not None and q is not r:
            common = sorted(set(q.final_ok) & set(r.final_ok))
            b = sum(q.final_ok[i] and not r.final_ok[i] for i in common)
            c = sum(r.final_ok[i] and not q.final_ok[i] for i in common)
            vs = f"{mcnemar_exact(b, c):.3g} ({b}/{c})"
        k, n = sum(r.final_ok.values()), len(r.final_ok)
        model, wh, evalset = r.key
        lines.append(f"| {model} | {wh} | {evalset} | {answer} | {n} | {pct(rate(k, n))} | {vs} | "
                     f"{_abstention(r.summary)} | {r.same_as_recorded}/{n} |")
    return lines
