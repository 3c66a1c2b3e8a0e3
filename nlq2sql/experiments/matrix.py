"""The prompt × guardrail condition matrix (the seed's held-out table).

The model is queried once per (prompt, item); every guardrail condition is re-scored
from the recorded raw outputs, so conditions differ only in what they claim to differ in.
Pairs of conditions on the same items get an exact McNemar test on final correctness.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path
from typing import Any

from nlq2sql.records.store import output_dir, write_json_atomic
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.stages.pipeline import rescore_run
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import mcnemar_exact

__all__ = ["MatrixConfig", "condition_table", "render_markdown", "run_prompts", "write_result"]


@dataclass(frozen=True)
class MatrixConfig:
    base: EvalConfig
    prompts: tuple[str, ...] = ("baseline", "contrastive")
    guardrails: tuple[str, ...] = ("none", "ranking")


def run_prompts(cfg: MatrixConfig) -> dict[str, Path]:
    """One live run per prompt, recorded without guardrails (they are applied offline)."""
    dirs = {}
    for prompt in cfg.prompts:
        out = cfg.base.out / f"{cfg.base.evalset}-{prompt}"
        run_eval(replace(cfg.base, prompt=prompt, guardrails=(), out=out, force=True, resume=False))
        dirs[prompt] = out
    return dirs


def condition_table(runs: dict[str, Path], guardrails: tuple[str, ...]) -> dict[str, Any]:
    """Re-score each recorded prompt run under each guardrail condition."""
    conditions: list[dict[str, Any]] = []
    finals: dict[str, dict[str, bool]] = {}
    for prompt, run_dir in runs.items():
        for g in guardrails:
            names = tuple(x for x in g.split("+") if x and x != "none")
            summary, _, final_ok = rescore_run(run_dir, names)
            label = prompt if not names else f"{prompt} + {'+'.join(names)}"
            finals[label] = final_ok
            conditions.append({"condition": label, "prompt": prompt, "guardrails": list(names),
                               "run": str(run_dir), "summary": summary})
    pairs = []
    for a, b in combinations(finals, 2):
        common = sorted(set(finals[a]) & set(finals[b]))
        b_only = sum(finals[a][i] and not finals[b][i] for i in common)
        c_only = sum(finals[b][i] and not finals[a][i] for i in common)
        pairs.append({"a": a, "b": b, "n": len(common), "a_right_b_wrong": b_only,
                      "b_right_a_wrong": c_only, "mcnemar_exact_p": mcnemar_exact(b_only, c_only)})
    return {"conditions": conditions, "pairs": pairs}


def render_markdown(table: dict[str, Any], title: str = "Condition matrix") -> str:
    lines = [f"## {title}", "",
             "| condition | raw intent | final after guardrail | interventions | precision | recall | "
             "schema-valid |", "|---|---|---|---|---|---|---|"]
    for c in table["conditions"]:
        s = c["summary"]
        rec = "; ".join(f"{k} {pct(v)}" for k, v in s["intervention_recall"].items()) or "n/a"
        lines.append(f"| {c['condition']} | {pct(s['raw_accuracy'])} | {pct(s['final_accuracy'])} | "
                     f"{s['interventions']} | {pct(s['intervention_precision'])} | {rec} | "
                     f"{pct(s['schema_valid_rate'])} |")
    lines += ["", "Paired comparisons (final correctness, exact McNemar):", "",
              "| A | B | n | A right, B wrong | B right, A wrong | p |", "|---|---|---|---|---|---|"]
    for p in table["pairs"]:
        lines.append(f"| {p['a']} | {p['b']} | {p['n']} | {p['a_right_b_wrong']} | "
                     f"{p['b_right_a_wrong']} | {p['mcnemar_exact_p']:.4f} |")
    lines += ["", "Error taxonomy (final) per condition:", ""]
    for c in table["conditions"]:
        tax = ", ".join(f"{k} {v}" for k, v in c["summary"]["error_taxonomy_final"].items())
        lines.append(f"- {c['condition']}: {tax}")
    return "\n".join(lines) + "\n"


def write_result(out: Path, table: dict[str, Any], title: str) -> None:
    output_dir(out)
    write_json_atomic(out / "matrix.json", table)
    (out / "matrix.md").write_text(render_markdown(table, title))
