"""Schema linking measured offline: per question, the linked vocabulary's recall of the gold's names
and the prompt's size in the model's own tokens, whole vocabulary against linked (issue 38).

No model answers anything here: linking is deterministic from the question and the layer, so its
recall and the prompt sizes are facts of the layer and the question file.  Accuracy with and without
linking comes from live runs (``eval --link-schema prompt``), reported beside these figures.

Usage: .venv/bin/python scripts/linking_report.py --semantic-model M [--db DB] --evalset FILE
       [--model qwen2.5-coder-0.5b] [--budget 600] [--title T]
       [--runs WHOLE_RUN_DIR LINKED_RUN_DIR]   (Markdown on stdout; --runs adds the paired accuracy)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from nlq2sql.conditions.linking import Linking, LinkingSettings, recall
from nlq2sql.run.context import local_counter, model_folder
from nlq2sql.semantic import open_warehouse
from nlq2sql.stages.prompt import load_prompt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--semantic-model", required=True)
    ap.add_argument("--db", type=Path)
    ap.add_argument("--evalset", required=True, type=Path)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--budget", type=int, default=600)
    ap.add_argument("--title", default="")
    ap.add_argument("--runs", nargs=2, type=Path, metavar=("WHOLE", "LINKED"),
                    help="two finished runs of the same items: whole vocabulary, then --link-schema prompt")
    args = ap.parse_args(argv)
    wh = open_warehouse(args.semantic_model, args.db, announce=False)
    cond = Linking(LinkingSettings(link_schema="prompt", link_budget=args.budget))
    cond.load(wh, "query")
    prompt = load_prompt("query", "default", wh)
    folder = model_folder(args.model)
    if folder is None:
        sys.exit(f"error: model {args.model!r} is not pulled (nlq2sql models pull {args.model})")
    count = local_counter(folder)
    rows = []
    for line in args.evalset.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if not item.get("gold"):
            continue
        whole = prompt.messages(item["question"])
        linked, trace = cond.before(item["question"], whole)
        share, missed = recall(item["gold"], trace.linked_schema)  # type: ignore[arg-type]
        rows.append((item["id"], share, missed, count(whole) or 0, count(linked) or 0))
    shares = [r[1] for r in rows if r[1] is not None]
    full, short = [r[3] for r in rows], [r[4] for r in rows]
    whole = wh.catalog.whole if wh.catalog.whole is not None else wh.catalog.manifest
    models = f"{len(whole.semantic_models)} semantic models"
    if whole is not wh.catalog.manifest:
        models += f", {len(wh.catalog.manifest.semantic_models)} once its data problems are excluded"
    out = [f"# Schema linking{': ' + args.title if args.title else ''}", "",
           f"Layer `{wh.catalog.name}` ({models}; {len(wh.catalog.metrics)} metrics, "
           f"{len(wh.catalog.dimensions)} categorical dimensions offered), "
           f"{len(rows)} answerable questions of `{args.evalset.name}`; tokens counted with {args.model}'s "
           f"tokenizer and chat template (the request as sent); link budget {args.budget}.", "",
           "| | whole vocabulary | linked |", "|---|---:|---:|",
           f"| prompt tokens, mean | {statistics.mean(full):,.0f} | {statistics.mean(short):,.0f} |",
           f"| prompt tokens, max | {max(full):,} | {max(short):,} |",
           f"| linking recall of the gold's names, mean | — | {statistics.mean(shares):.3f} |",
           f"| items with every gold name linked | — | {sum(1 for s in shares if s == 1.0)}/{len(shares)} |",
           "", "| item | recall | missed | tokens whole → linked |", "|---|---:|---|---|"]
    out += [f"| {rid} | {'—' if s is None else f'{s:.2f}'} | {', '.join(m) or '—'} | {a:,} → {b:,} |"
            for rid, s, m, a, b in rows]
    if args.runs:
        out[out.index("") + 1:out.index("") + 1] = _paired(*args.runs)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _paired(whole: Path, linked: Path) -> list[str]:
    """Final accuracy of the two runs with Wilson CIs, and the exact McNemar test paired on item id."""
    from nlq2sql.records.item import iter_item_records
    from nlq2sql.stages.score import mcnemar_exact, rate

    def correct(run: Path) -> dict[str, bool]:
        return {r.id: bool(r.judgement and r.judgement.correct_final) for r in iter_item_records(run / "records.jsonl")}

    a, b = correct(whole), correct(linked)
    ids = sorted(set(a) & set(b))
    only_a = sum(1 for i in ids if a[i] and not b[i])
    only_b = sum(1 for i in ids if b[i] and not a[i])
    rows = []
    for name, run, res in (("whole vocabulary", whole, a), ("linked (`--link-schema prompt`)", linked, b)):
        r = rate(sum(res[i] for i in ids), len(ids))
        lo, hi = r.ci95 or (0.0, 0.0)
        rows.append(f"| {name} | {100 * (r.value or 0):.1f} % [{100 * lo:.1f}–{100 * hi:.1f}] ({r.k}/{r.n}) "
                    f"| `{run.name}` |")
    return ["| final accuracy, same items | | run |", "|---|---|---|", *rows, "",
            f"Paired on item id: {only_a} right only with the whole vocabulary, {only_b} only when linked; "
            f"exact McNemar p = {mcnemar_exact(only_a, only_b):.3g}.", ""]


if __name__ == "__main__":
    raise SystemExit(main())
