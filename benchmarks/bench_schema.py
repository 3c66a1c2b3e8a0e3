"""Size and grammar-compile time of the v2 answer schema, per shipped warehouse and as it grows.

For each shipped warehouse and schema mode (``flat``, ``branches``), without and with the known
values of small categorical fields pinned (``pinned``: how many fields): the JSON Schema's bytes,
its branches and enum sizes, and the time xgrammar (vLLM's default structured-output backend,
the version vLLM installed) takes to compile it for a real tokenizer, whitespace-free
(``any_whitespace=False``, as ``--compact-server`` serves), cache off, median of ``--rounds``.
Then the same for synthetic schemas whose group-by enum holds 100 … 20,000 names, to show
where compiling a schema per request stops being practical (vLLM compiles each distinct
schema once and caches it, so the cost is paid on the first request of a run).

    .venv/bin/python benchmarks/bench_schema.py [--tokenizer .cache/models/smollm2-135m] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _compile_ms(compiler: Any, schema: dict[str, Any], rounds: int) -> float:
    text = json.dumps(schema)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        compiler.compile_json_schema(text, any_whitespace=False)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def _enum_sizes(schema: dict[str, Any]) -> tuple[int, int]:
    branches = schema.get("anyOf", [schema])
    def enum(branch: dict[str, Any], key: str) -> int:  # a listing branch's metrics take none (maxItems 0)
        return len(branch["properties"][key].get("items", {}).get("enum", ()))

    q = [b for b in branches if "metrics" in b.get("properties", {})]
    return max(enum(b, "metrics") for b in q), max(enum(b, "group_by") for b in q)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, default=ROOT / ".cache" / "models" / "smollm2-135m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--synthetic", default="100,1000,5000,20000", help="group-by enum sizes to synthesise")
    ap.add_argument("--warehouses", default=None, help="comma-separated shipped warehouses (default: every one)")
    args = ap.parse_args()

    import xgrammar as xgr
    from transformers import AutoTokenizer

    from nlq2sql.semantic.binding import open_warehouse
    from nlq2sql.semantic.catalog import shipped_names
    from nlq2sql.semantic.contract import answer_schema

    tok = AutoTokenizer.from_pretrained(str(args.tokenizer))
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tok), cache_enabled=False)
    print(f"tokenizer {args.tokenizer.name}, xgrammar, whitespace-free, cache off, median of {args.rounds}")
    print(f"{'warehouse':10} {'mode':9} {'pinned':>6} {'bytes':>7} {'branches':>8} {'metrics':>7} {'group-bys':>9} "
          f"{'compile ms':>10}")
    base: dict[str, Any] | None = None
    for name in args.warehouses.split(",") if args.warehouses else shipped_names():
        wh = open_warehouse(name)
        for mode in ("flat", "branches"):
            # As a run sends it: with the bound warehouse's known values of small categorical fields.
            for values in ((), wh.schema_values):
                schema = answer_schema(wh.catalog, mode, values=values)
                base = base or schema
                m, g = _enum_sizes(schema)
                print(f"{name:10} {mode:9} {len(values):>6} {len(json.dumps(schema)):>7} "
                      f"{len(schema.get('anyOf', [schema])):>8} {m:>7} {g:>9} "
                      f"{_compile_ms(compiler, schema, args.rounds):>10.0f}")
    assert base is not None
    print("\nsynthetic: the first warehouse's flat schema with N group-by names (and N where-fields)")
    print(f"{'group-bys':>9} {'bytes':>9} {'compile ms':>10}")
    for n in (int(x) for x in args.synthetic.split(",")):
        schema = json.loads(json.dumps(base))
        query = next(b for b in schema.get("anyOf", [schema]) if "metrics" in b.get("properties", {}))
        names = [f"entity_{i // 50}__dimension_{i}" for i in range(n)]
        query["properties"]["group_by"]["items"]["enum"] = names
        for cond in query["properties"]["where"]["items"]["anyOf"]:
            if len(cond["properties"]["field"]["enum"]) > 1:  # the free-value conditions (one per arity)
                cond["properties"]["field"]["enum"] = names
        print(f"{n:>9} {len(json.dumps(schema)):>9} {_compile_ms(compiler, schema, 1):>10.0f}")


if __name__ == "__main__":
    main()
