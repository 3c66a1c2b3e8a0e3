"""Guardrails on v2 queries against simulated answer errors on the shipped v2 sets (issue 21).

No model is involved: for every answerable gold of each shipped v2 set, the gold itself (a rule
must leave it alone), and — by its derived kind — the errors a ranking rule repairs: a top-N gold
without its order and limit (``no_rank``), with the metric's direction flipped (``flipped``), and a
breakdown gold answered as a top 3 (``false_rank``).  Each is passed through the rule sets
(``stages/query_guard``) and each intervention judged as the summary judges it.  Prints per
warehouse and in total: variants, items a rule set changed, and those whose changes were right.

    .venv/bin/python scripts/v2_guardrail_sim.py ranking,sort
    .venv/bin/python scripts/v2_guardrail_sim.py learned:ranking
"""

from __future__ import annotations

import argparse
from collections import Counter

from nlq2sql.semantic import open_warehouse
from nlq2sql.semantic.query import MetricQuery, OrderBy
from nlq2sql.stages.query_guard import apply_query_guardrails, intervention_correct
from nlq2sql.stages.queryset import load_query_set
from nlq2sql.stages.rulesets import load_guardrails

SETS = {"retail": ["evalsets/heldout-v2.jsonl"], "tpch": ["warehouses/tpch/evalsets/heldout-v2.jsonl"],
        "flights": ["warehouses/flights/evalsets/heldout-v2.jsonl"],
        "jaffle": ["warehouses/jaffle/evalsets/heldout.jsonl", "warehouses/jaffle/evalsets/adversarial.jsonl"]}


def variants(g: MetricQuery) -> list[tuple[str, MetricQuery]]:
    out = [("gold", g)]
    if g.kind == "top_n_by_metric":
        out.append(("no_rank", g.model_copy(update={"order_by": None, "limit": None})))
        flipped = tuple(OrderBy(field=o.field, descending=not o.descending) if o.field in g.metrics else o
                        for o in g.order_by or ())
        out.append(("flipped", g.model_copy(update={"order_by": flipped})))
    elif g.kind == "breakdown":
        out.append(("false_rank", g.model_copy(update={"order_by": (OrderBy(field=g.metrics[0], descending=True),),
                                                       "limit": 3})))
    return [(label, MetricQuery.model_validate(q.model_dump())) for label, q in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("guardrails", help="comma-separated rule sets, e.g. ranking,sort or learned:ranking")
    names = ap.parse_args().guardrails.split(",")
    total: Counter[str] = Counter()
    for name, files in SETS.items():
        wh = open_warehouse(name)
        cat = wh.catalog
        rulesets = load_guardrails(names, cat, wh)
        c: Counter[str] = Counter()
        for path in files:
            for case in load_query_set(path, cat).cases:
                if case.gold is None:
                    continue
                for label, q in variants(case.gold):
                    final, ivs = apply_query_guardrails(rulesets, q, case.question, cat)
                    c[f"{label}.n"] += 1
                    if ivs:
                        c[f"{label}.changed"] += 1
                        c[f"{label}.right"] += all(intervention_correct(iv, final, case.gold, cat, rulesets)
                                                   for iv in ivs)
        print(name, dict(sorted(c.items())))
        total.update(c)
    changed = sum(v for k, v in total.items() if k.endswith(".changed"))
    right = sum(v for k, v in total.items() if k.endswith(".right"))
    print("total", dict(sorted(total.items())), f"precision {right}/{changed}")


if __name__ == "__main__":
    main()
