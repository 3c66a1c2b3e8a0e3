"""The learned vs lexical guardrail head-to-head, rendered into docs/learned-guardrail.md from runs.

No LLM: two offline "models" answer every shipped held-out and adversarial set (retail,
tpch, flights) from the gold intents, wrong in one known way each:

- ``false-ranking``: every breakdown answered as a top-10 ranking, descending (the seed's
  error class; ``false_ranking_responses`` in tests/integration/cli/test_cli.py);
- ``false-breakdown``: every ranking answered as a plain breakdown (limit and order null;
  the error the issue measured for Qwen2.5-Coder-0.5B, which the lexical rules cannot fix).

Each responses file is scored with ``nlq2sql score`` under ``--guardrails ranking`` and
``--guardrails learned:ranking``; the block between the markers in the doc is rendered from
those runs' ``records.jsonl`` (precision and recall per rule with Wilson CIs, final accuracy,
exact McNemar between the two guardrails on final correctness, per set and pooled).

    .venv/bin/python scripts/learned_guardrail_report.py [--runs runs/learned-guardrail] [--render-only]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nlq2sql.answers.offline import score_responses  # noqa: E402
from nlq2sql.records.store import iter_records, read_json  # noqa: E402
from nlq2sql.semantic import open_warehouse  # noqa: E402
from nlq2sql.stages.evalset import load_evalset  # noqa: E402
from nlq2sql.stages.learned_guardrail import load_model  # noqa: E402
from nlq2sql.stages.pipeline import ScoreConfig  # noqa: E402
from nlq2sql.stages.rulesets import load_guardrails  # noqa: E402
from nlq2sql.stages.score import mcnemar_exact, rate  # noqa: E402
from nlq2sql.stages.summary import Summary  # noqa: E402

DOC = ROOT / "docs" / "learned-guardrail.md"
BEGIN, END = "<!-- head-to-head:begin (scripts/learned_guardrail_report.py) -->", "<!-- head-to-head:end -->"
SETS = (("retail", "heldout"), ("retail", "adversarial"), ("tpch", "heldout"), ("tpch", "adversarial"),
        ("flights", "heldout"), ("flights", "adversarial"))
MODELS = ("false-ranking", "false-breakdown")
LEXICAL, LEARNED = "ranking", "learned:ranking"
GUARDRAILS = (LEXICAL, LEARNED)


def answer(model: str, gold: dict[str, Any]) -> dict[str, Any]:
    if model == "false-ranking" and gold["intent"] == "breakdown":
        return {**gold, "intent": "top_n_by_metric", "limit": 10, "order": "desc"}
    if model == "false-breakdown" and gold["intent"] == "top_n_by_metric":
        return {**gold, "intent": "breakdown", "limit": None, "order": None}
    return gold


def run_dir(runs: Path, model: str, wh: str, es: str, guardrail: str) -> Path:
    return runs / model / f"{wh}-{es}" / guardrail.replace(":", "-")


def score_all(runs: Path) -> None:
    for model in MODELS:
        for wh, es in SETS:
            cases = load_evalset(es, open_warehouse(wh)).cases
            resp = runs / "responses" / f"{model}-{wh}-{es}.jsonl"
            resp.parent.mkdir(parents=True, exist_ok=True)
            resp.write_text("".join(json.dumps({"id": c.id, "text": json.dumps(answer(model, c.gold.model_dump(
                mode="json")))}) + "\n" for c in cases))
            for g in GUARDRAILS:
                score_responses(ScoreConfig(evalset=es, responses=resp, out=run_dir(runs, model, wh, es, g),
                                            guardrails=(g,), semantic_model=wh, force=True))
                print(f"scored {model} {wh}/{es} under {g}", file=sys.stderr)


def load_run(path: Path, artefact_sha: str) -> tuple[dict[str, Any], dict[str, bool], dict[str, Any]]:
    """(summary recomputed from the records, final correctness by id, manifest)."""
    manifest = read_json(path / "manifest.json")
    for name, prov in manifest.get("guardrail_artefacts", {}).items():
        if prov["artefact_sha256"] != artefact_sha:
            raise SystemExit(f"{path} was scored with {name} artefact {prov['artefact_sha256'][:12]}…, not the "
                             f"current {artefact_sha[:12]}…: rescore (run without --render-only)")
    summ = Summary(load_guardrails(manifest["guardrails"]))
    final: dict[str, bool] = {}
    for rec in iter_records(path / "records.jsonl"):
        summ.add(rec)
        final[rec["id"]] = bool(rec["correct_final"])
    return summ.result().to_json(), final, manifest


def pct(w: dict[str, Any]) -> str:
    if not w["n"]:
        return "n/a (0/0)"
    lo, hi = w["ci95"]
    return f"{100 * w['value']:.1f} % [{100 * lo:.1f}–{100 * hi:.1f}] ({w['k']}/{w['n']})"


def p_fmt(p: float) -> str:
    return f"{p:.3g}" if p >= 0.001 else f"{p:.1e}"


def render(runs: Path) -> str:
    model = load_model("ranking")
    art = model.artefact.to_json()  # rendered from the artefact as its file holds it
    sha = art["artefact_sha256"]
    cv = art["cv"]
    rows = [json.loads(x) for x in (ROOT / art["training"]["path"]).read_text().splitlines() if x.strip()]
    hand = sum(r.get("source") == "hand" for r in rows)
    kinds = art["training"]["kind"]
    lines = [
        f"Artefact `guardrails/learned/ranking.json`: sha256 `{sha[:16]}…`, trained on "
        f"`{art['training']['path']}` (n = {art['training']['n']}: {kinds['ranking']} ranking, "
        f"{kinds['breakdown']} breakdown; {len(rows) - hand} from templates, {hand} hand-written; sha256 "
        f"`{art['training']['sha256'][:16]}…`), "
        f"scikit-learn {art['sklearn_version']}, threshold {art['threshold']}. "
        f"{cv['folds']}-fold stratified cross-validated accuracy on the training set: ranking vs breakdown "
        f"{pct(cv['kind_accuracy'])}; sort of a breakdown {pct(cv['sort_breakdown_accuracy'])}; sort of a "
        f"ranking {pct(cv['sort_ranking_accuracy'])}; row count {pct(cv['count_accuracy'])}.",
        "",
        f"Rendered by `scripts/learned_guardrail_report.py` from the records of the runs under `{runs_label(runs)}` "
        "(each `nlq2sql score` under one guardrail); every figure is k/n with a 95 % Wilson interval. "
        "Precision: interventions after which every field the rule changed equals gold ÷ interventions; "
        "recall: correct interventions ÷ items in the rule's scope (raw value in its from-values, gold equal to "
        "its to-value). McNemar: exact, two-sided, on final correctness of the same items.",
    ]
    for m in MODELS:
        desc = ("every breakdown answered as a top-10 ranking (descending)" if m == "false-ranking" else
                "every ranking answered as a plain breakdown (limit and order null)")
        lines += ["", f"### `{m}`: {desc}", "",
                  "| set | n | raw accuracy | guardrail | final accuracy | rule | interventions | precision | "
                  "recall |", "|---|---|---|---|---|---|---|---|---|"]
        mc_rows: list[str] = []
        pooled: dict[str, dict[str, list[int]]] = {}
        pooled_final: dict[str, list[int]] = {g: [0, 0] for g in GUARDRAILS}
        pooled_raw = [0, 0]
        pooled_bc = [0, 0, 0]
        for wh, es in SETS:
            finals: dict[str, dict[str, bool]] = {}
            for g in GUARDRAILS:
                s, final, _ = load_run(run_dir(runs, m, wh, es, g), sha)
                finals[g] = final
                first = g == GUARDRAILS[0]
                if first:
                    pooled_raw[0] += s["raw_accuracy"]["k"]
                    pooled_raw[1] += s["n"]
                pooled_final[g][0] += s["final_accuracy"]["k"]
                pooled_final[g][1] += s["n"]
                for i, (rid, r) in enumerate(s["rules"].items()):
                    acc = pooled.setdefault(f"{g}|{rid}", {"fired": [0, 0], "recall": [0, 0]})
                    acc["fired"][0] += r["precision"]["k"]
                    acc["fired"][1] += r["precision"]["n"]
                    acc["recall"][0] += r["recall"]["k"]
                    acc["recall"][1] += r["recall"]["n"]
                    lines.append(
                        f"| {f'{wh} {es}' if first and i == 0 else ''} | {s['n'] if first and i == 0 else ''} | "
                        f"{pct(s['raw_accuracy']) if first and i == 0 else ''} | {g if i == 0 else ''} | "
                        f"{pct(s['final_accuracy']) if i == 0 else ''} | `{rid}` | {r['interventions']} | "
                        f"{pct(r['precision'])} | {pct(r['recall'])} |")
            common = sorted(set(finals[LEXICAL]) & set(finals[LEARNED]))
            b = sum(finals[LEXICAL][i] and not finals[LEARNED][i] for i in common)
            c = sum(finals[LEARNED][i] and not finals[LEXICAL][i] for i in common)
            pooled_bc[0] += b
            pooled_bc[1] += c
            pooled_bc[2] += len(common)
            mc_rows.append(f"| {wh} {es} | {len(common)} | {b} | {c} | {p_fmt(mcnemar_exact(b, c))} |")
        first, prev = True, None
        for key, acc in pooled.items():
            g, rid = key.split("|")
            lines.append(
                f"| {'**all six sets**' if first else ''} | {pooled_raw[1] if first else ''} | "
                f"{pct(rate(*pooled_raw).to_json()) if first else ''} | {g if g != prev else ''} | "
                f"{pct(rate(*pooled_final[g]).to_json()) if g != prev else ''} | `{rid}` | "
                f"{acc['fired'][1]} | {pct(rate(*acc['fired']).to_json())} | "
                f"{pct(rate(*acc['recall']).to_json())} |")
            first, prev = False, g
        b, c, n = pooled_bc
        lines += ["", f"Final correctness, `{LEXICAL}` vs `{LEARNED}` (`{m}`):", "",
                  "| set | n | lexical right, learned wrong | learned right, lexical wrong | exact McNemar p |",
                  "|---|---|---|---|---|", *mc_rows,
                  f"| **all six sets** | {n} | {b} | {c} | {p_fmt(mcnemar_exact(b, c))} |"]
    return "\n".join(lines)


def runs_label(runs: Path) -> str:
    try:
        return str(runs.resolve().relative_to(ROOT))
    except ValueError:
        return str(runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "learned-guardrail")
    ap.add_argument("--render-only", action="store_true", help="render from the recorded runs, no scoring")
    ap.add_argument("--doc", type=Path, default=DOC)
    args = ap.parse_args(argv)
    if not args.render_only:
        score_all(args.runs)
    block = render(args.runs)
    text = args.doc.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{args.doc} has no {BEGIN} … {END} block")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    args.doc.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")
    print(f"wrote {args.doc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
