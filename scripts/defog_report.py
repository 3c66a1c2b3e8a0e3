"""defog's sql-eval on our harness: accuracy per model and answer arm beside defog's published figures.

Reads the run directories ``scripts/run_defog.sh`` wrote (``<root>/<model>/<warehouse>-<set>/<set>-<arm>/``
with ``manifest.json`` and ``records.jsonl``), defog's published figures (``<root>/published.json``) and the
import report (``<root>/import.json``), and prints Markdown: per model × set × arm the accuracy pooled over
the seven databases (Wilson 95 % CI), exact McNemar between arms on the same items, per-category and
per-database tables, defog's figures (other models, other runs), and what was excluded.  Nothing is
measured here: records only.
Usage: python scripts/defog_report.py reports/defog > reports/defog/README.md
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from nlq2sql.records.item import iter_item_records
from nlq2sql.stages.report import pct
from nlq2sql.stages.score import mcnemar_exact, rate

MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b")
DATABASES = ("academic", "advising", "atis", "geography", "restaurants", "scholar", "yelp")
ARMS = ("sql", "sql-grammar", "query")
SETS = ("sql-eval", "idk")
CATEGORIES = ("date_functions", "group_by", "order_by", "ratio", "table_join", "instruct")


@dataclass
class Run:
    """One recorded run: which model, database, set and arm, and per item whether it was right."""

    model: str
    warehouse: str
    evalset: str
    answer: str
    commit: str
    dirty: bool
    correct: dict[str, bool] = field(default_factory=dict)
    category: dict[str, str] = field(default_factory=dict)
    error: dict[str, str] = field(default_factory=dict)

    @property
    def database(self) -> str:
        return self.warehouse.removeprefix("defog_")


def collect(root: Path) -> list[Run]:
    """Every run directory under ``root`` (three levels down, with a manifest and records)."""
    runs = []
    for mpath in sorted(root.glob("*/*/*/manifest.json")):
        if not (mpath.parent / "records.jsonl").is_file():
            continue
        m = json.loads(mpath.read_text())
        run = Run(str(m.get("model", "?")), str(m.get("semantic_model", "?")), str(m.get("evalset", "?")),
                  str(m.get("answer") or "intent"), str(m.get("git_commit", "?"))[:12], bool(m.get("git_dirty")))
        for rec in iter_item_records(mpath.parent / "records.jsonl"):
            j = rec.judgement
            run.correct[rec.id] = bool(j.correct_final) if j is not None else False
            run.category[rec.id] = rec.category or "?"
            err = j.error_final if j is not None else None
            run.error[rec.id] = str(err) if err else ("correct" if run.correct[rec.id] else "wrong")
        runs.append(run)
    return runs


def pooled(runs: list[Run]) -> dict[tuple[str, str, str], dict[str, bool]]:
    """(model, set, arm) → correctness keyed ``database/id`` over every database recorded."""
    out: dict[tuple[str, str, str], dict[str, bool]] = defaultdict(dict)
    for r in runs:
        out[(r.model, r.evalset, r.answer)] |= {f"{r.database}/{i}": v for i, v in r.correct.items()}
    return out


def _order(keys: set[str], preferred: tuple[str, ...]) -> list[str]:
    return [k for k in preferred if k in keys] + sorted(keys - set(preferred))


def overview(runs: list[Run]) -> list[str]:
    pools = pooled(runs)
    lines = ["## Accuracy per arm (pooled over the databases recorded)", "",
             "Final accuracy, Wilson 95 % CI (k/n). An arm's n is the items of the databases it ran on "
             "(the query arm runs only where a semantic layer is shipped for it).", "",
             "| model | set | arm | databases | accuracy |", "|---" * 5 + "|"]
    dbs: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for r in runs:
        dbs[(r.model, r.evalset, r.answer)].add(r.database)
    for model in _order({k[0] for k in pools}, MODELS):
        for s in _order({k[1] for k in pools if k[0] == model}, SETS):
            for arm in _order({k[2] for k in pools if k[:2] == (model, s)}, ARMS):
                c = pools[(model, s, arm)]
                lines.append(f"| {model} | {s} | {arm} | {len(dbs[(model, s, arm)])} | "
                             f"{pct(rate(sum(c.values()), len(c)))} |")
    return lines + [""]


def pairs(runs: list[Run]) -> list[str]:
    pools = pooled(runs)
    lines = ["## Paired comparisons (exact McNemar on the items both arms answered)", "",
             "| model | set | arm A | arm B | items | only A right | only B right | p |", "|---" * 8 + "|"]
    for model in _order({k[0] for k in pools}, MODELS):
        for s in _order({k[1] for k in pools if k[0] == model}, SETS):
            arms = _order({k[2] for k in pools if k[:2] == (model, s)}, ARMS)
            for a, b in combinations(arms, 2):
                x, y = pools[(model, s, a)], pools[(model, s, b)]
                common = sorted(x.keys() & y.keys())
                only_a = sum(x[i] and not y[i] for i in common)
                only_b = sum(y[i] and not x[i] for i in common)
                lines.append(f"| {model} | {s} | {a} | {b} | {len(common)} | {only_a} | {only_b} | "
                             f"{mcnemar_exact(only_a, only_b):.3g} |")
    return lines + [""]


def per_category(runs: list[Run]) -> list[str]:
    cells: dict[tuple[str, str, str], list[bool]] = defaultdict(list)
    for r in runs:
        if r.evalset != "sql-eval":
            continue
        for i, ok in r.correct.items():
            cells[(r.model, r.answer, r.category[i])].append(ok)
    cats = _order({k[2] for k in cells}, CATEGORIES)
    lines = ["## Per category (sql-eval set; defog's `query_category`)", "",
             "Accuracy % (k/n) per category.", "",
             "| model | arm | " + " | ".join(cats) + " |", "|---" * (2 + len(cats)) + "|"]
    for model in _order({k[0] for k in cells}, MODELS):
        for arm in _order({k[1] for k in cells if k[0] == model}, ARMS):
            row = []
            for c in cats:
                v = cells.get((model, arm, c), [])
                row.append(f"{100 * sum(v) / len(v):.0f} % ({sum(v)}/{len(v)})" if v else "–")
            lines.append(f"| {model} | {arm} | " + " | ".join(row) + " |")
    return lines + [""]


def per_database(runs: list[Run]) -> list[str]:
    by = {(r.model, r.evalset, r.answer, r.database): r for r in runs}
    dbs = _order({r.database for r in runs}, DATABASES)
    lines = ["## Per database", "", "Accuracy % (k/n); – where the arm did not run.", "",
             "| model | set | arm | " + " | ".join(dbs) + " |", "|---" * (3 + len(dbs)) + "|"]
    for model in _order({r.model for r in runs}, MODELS):
        for s in _order({r.evalset for r in runs if r.model == model}, SETS):
            for arm in _order({r.answer for r in runs if (r.model, r.evalset) == (model, s)}, ARMS):
                row = []
                for db in dbs:
                    run = by.get((model, s, arm, db))
                    k, n = (sum(run.correct.values()), len(run.correct)) if run else (0, 0)
                    row.append(f"{100 * k / n:.0f} % ({k}/{n})" if n else "–")
                lines.append(f"| {model} | {s} | {arm} | " + " | ".join(row) + " |")
    return lines + [""]


def published(data: dict[str, object]) -> list[str]:
    lines = ["## defog's published figures (other models, other runs — not measured here)", "",
             str(data.get("note", "")), ""]
    sources = data.get("sources", [])
    assert isinstance(sources, list)
    for src in sources:
        models = src["models"]
        cats = sorted({c for m in models.values() for c in m.get("categories", {})},
                      key=lambda c: ("date", "group_by", "order_by", "ratio", "join", "where").index(c)
                      if c in ("date", "group_by", "order_by", "ratio", "join", "where") else 99)
        lines += [f"**{src['id']}** — <{src['url']}>, {src['date']}. Measured: {src['measured']}.", ""]
        cols = (["overall"] if any("overall" in m for m in models.values()) else []) + cats
        lines += ["| model | " + " | ".join(cols) + " |", "|---" * (1 + len(cols)) + "|"]
        for name, m in models.items():
            vals = [str(m.get("overall", "–"))] if "overall" in cols else []
            vals += [str(m.get("categories", {}).get(c, "–")) for c in cats]
            lines.append(f"| {name} | " + " | ".join(vals) + " |")
        lines.append("")
    return lines


def exclusions(meta: dict[str, object]) -> list[str]:
    rows = meta.get("rows", [])
    assert isinstance(rows, list)
    excluded = [r for r in rows if r["status"] == "excluded"]
    dropped = sum(len(r.get("dropped", [])) for r in rows if r["status"] == "shipped")
    reasons: dict[str, list[str]] = defaultdict(list)
    for r in excluded:
        reasons[r["reason"]].append(r["db"])
    lines = ["## What was excluded", "",
             f"Source: {meta.get('source')} at `{meta.get('commit')}` ({meta.get('licence')}); "
             f"relative dates pinned to {meta.get('pinned_date')}. Of {len(rows)} source rows, "
             f"{len(rows) - len(excluded)} are shipped and {len(excluded)} excluded; {dropped} alternative "
             "gold(s) of shipped items were dropped (details: `import.md`).", "",
             "| reason | rows | databases |", "|---|---|---|"]
    lines += [f"| {reason} | {len(dbs)} | {', '.join(sorted(set(dbs)))} |"
              for reason, dbs in sorted(reasons.items(), key=lambda kv: -len(kv[1]))]
    return lines + [""]


def missing(runs: list[Run], layers: set[str]) -> list[str]:
    have = {(r.model, r.database, r.evalset, r.answer) for r in runs}
    gone = [f"{m} · {db} · {s} · {a}" for m in MODELS for db in DATABASES for s in SETS for a in ARMS
            if (a != "query" or (db in layers and s == "sql-eval")) and (m, db, s, a) not in have]
    return ["## Not recorded", "", ("Runs the script makes by default with no records here: " + "; ".join(gone) + ".")
            if gone else "Every default run is recorded.", ""]


def render(root: Path, layers: set[str] | None = None) -> str:
    runs = collect(root)
    if not runs:
        raise SystemExit(f"no recorded runs under {root}")
    meta = json.loads((root / "import.json").read_text())
    pub = json.loads((root / "published.json").read_text())
    commits = sorted({r.commit for r in runs})
    dirty = any(r.dirty for r in runs)
    shown = root.name if root.is_absolute() else root.as_posix()  # never this machine's absolute path
    lines = ["# defog sql-eval on this harness", "",
             f"Generated by `scripts/defog_report.py` from the records under `{shown}` "
             f"(runs by `scripts/run_defog.sh`). Commit(s) of the runs: {', '.join(commits)}; uncommitted changes "
             f"when run: {'yes' if dirty else 'no'}.", "",
             "Questions and gold SQL: defog's `questions_gen_postgres.csv` (sql-eval) and `idk.csv` (questions "
             "the database cannot answer, whose gold is a literal sentence the instruction names), converted to "
             "DuckDB (`warehouses/defog_<db>/evalsets/`); databases: the `defog-data` package. An answer is "
             "right when its rows equal a gold alternative's, the gold's columns found among the answer's "
             "(names ignored), rows unordered — defog's own rule. Models: the two shipped small models; "
             "defog's figures below are for other, far larger models, measured by defog on PostgreSQL.", ""]
    lines += overview(runs) + pairs(runs) + per_category(runs) + per_database(runs)
    lines += published(pub) + exclusions(meta)
    lines += missing(runs, layers if layers is not None else set(DATABASES))
    return "\n".join(lines)


if __name__ == "__main__":
    root = Path(sys.argv[1])
    layers = {d for d in sys.argv[2].split(",") if d} if len(sys.argv) > 2 else None
    print(render(root, layers))
