"""Offline re-scoring throughput and memory, side by side with plain DuckDB.

Generates, in a temp dir, an eval set of N unique ids (copies of the held-out cases) and a
responses file of N lines cycling four kinds of model output — correct (compact), false
ranking, invalid JSON (cut off), pretty-printed — then measures, each in its own
subprocess so peak RSS (``ru_maxrss``) belongs to one measurement only:

* ``score N``      ``runner.score_responses`` end to end (read, parse, guardrail, build,
                   execute, compare, write records, summary): items/s and peak RSS;
* ``score n``      the same on the first n lines (default 20 000) of a set of n items;
* ``load N/n``     only ``load_evalset`` of that set: the memory the eval set itself holds,
                   so the scoring increment (score − load) can be compared across sizes;
* ``cold N``       as ``score N`` but every response text unique (trailing whitespace), so
                   the parse cache never hits: the cost for novel model outputs;
* ``duckdb``       executing only the distinct SQL statements (gold and predicted) the
                   scoring run needed, directly on a fresh DuckDB connection.

    .venv/bin/python benchmarks/bench_rescore.py [--n 100000] [--small 20000] [--scale 1.0]

The warehouse is built privately in the temp dir (``--scale``; 1.0 ≈ 100k order lines),
so the repository's ``.cache`` is neither read nor written.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

VARIANTS = ("correct", "false_ranking", "invalid_json", "pretty")


def _rss_mib() -> float:
    """Peak RSS, ``ru_maxrss`` (KiB on Linux).

    Linux carries the parent's high-water mark into a child across fork + exec, so the driver
    below never holds more than the interpreter itself: every heavy step runs in a child.
    """
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _hwm_mib() -> float | None:
    """Peak RSS of this process image alone (``VmHWM``), as a cross-check; None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _cpu_s() -> float:
    """CPU seconds of this process (all threads): robust to other load on the machine."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ---------------------------------------------------------------- data generation


def response_text(gold: dict[str, Any], variant: str) -> str:
    if variant == "correct":
        return json.dumps(gold, separators=(",", ":"))
    if variant == "false_ranking":
        if gold["intent"] == "breakdown":
            return json.dumps({**gold, "intent": "top_n_by_metric", "limit": 10, "order": "desc"})
        if gold["intent"] == "top_n_by_metric":  # the reverse confusion
            return json.dumps({**gold, "intent": "breakdown", "limit": None, "order": None})
        return json.dumps({**gold, "time_grain": "year" if gold["time_grain"] != "year" else "month"})
    if variant == "invalid_json":
        text = json.dumps(gold)
        return text[: len(text) // 2]
    return json.dumps(gold, indent=2)


def generate(workdir: Path, n: int, *, unique_texts: bool = False, tag: str = "") -> tuple[Path, Path]:
    """An eval set of ``n`` unique ids copied from heldout, and ``n`` responses for it."""
    from nlq2sql.evalset import load_evalset

    cases = [c.model_dump(mode="json") for c in load_evalset("heldout").cases]
    es_path = workdir / f"evalset-{n}{tag}.jsonl"
    resp_path = workdir / f"responses-{n}{tag}.jsonl"
    with open(es_path, "w") as es, open(resp_path, "w") as rs:
        for i in range(n):
            case = cases[i % len(cases)]
            cid = f"{case['id']}-{i:06d}"
            es.write(json.dumps({**case, "id": cid}) + "\n")
            variant = VARIANTS[(i // len(cases)) % len(VARIANTS)]
            text = response_text(case["gold"], variant)
            if unique_texts:
                text += " " * (i // (len(cases) * len(VARIANTS)) + 1) + "\n" * (i % 3)
            finish = "length" if variant == "invalid_json" else "stop"
            rs.write(json.dumps({"id": cid, "text": text, "finish_reason": finish}) + "\n")
    return es_path, resp_path


# ---------------------------------------------------------------- measurements (subprocess side)


def measure_score(evalset: str, responses: str, out: str, warehouse: str) -> dict[str, Any]:
    from nlq2sql.runner import ScoreConfig, score_responses

    started, cpu = time.perf_counter(), _cpu_s()
    summary = score_responses(ScoreConfig(evalset, Path(responses), Path(out), ("ranking",),
                                          warehouse=Path(warehouse), force=True))
    wall, cpu = time.perf_counter() - started, _cpu_s() - cpu
    return {"items": summary["n"], "wall_s": wall, "items_per_s": summary["n"] / wall, "cpu_s": cpu,
            "items_per_cpu_s": summary["n"] / cpu,
            "rss_mib": _rss_mib(), "hwm_mib": _hwm_mib(), "distinct_queries": summary["distinct_queries_executed"],
            "raw_accuracy": summary["raw_accuracy"]["value"],
            "final_accuracy": summary["final_accuracy"]["value"]}


def measure_load(evalset: str) -> dict[str, Any]:
    from nlq2sql import runner  # same imports as a scoring run, so only the set differs
    from nlq2sql.evalset import load_evalset

    started, cpu = time.perf_counter(), _cpu_s()
    es = load_evalset(evalset)
    cases = es.by_id()
    wall, cpu = time.perf_counter() - started, _cpu_s() - cpu
    assert runner and cases
    return {"items": len(es.cases), "wall_s": wall, "cpu_s": cpu, "rss_mib": _rss_mib(),
            "hwm_mib": _hwm_mib()}


def measure_duckdb(queries: str, warehouse: str) -> dict[str, Any]:
    import duckdb

    qs = json.loads(Path(queries).read_text())
    started, cpu = time.perf_counter(), _cpu_s()
    con = duckdb.connect(warehouse, read_only=True, config={"enable_external_access": False})
    rows = 0
    for q in qs:
        rows += len(con.execute(q["sql"], q["params"]).fetchall())
    con.close()
    wall, cpu = time.perf_counter() - started, _cpu_s() - cpu
    return {"queries": len(qs), "rows": rows, "wall_s": wall, "cpu_s": cpu, "rss_mib": _rss_mib(),
            "hwm_mib": _hwm_mib()}


def measure_imports() -> dict[str, Any]:
    """The floor: an interpreter with everything a scoring run imports, and nothing loaded."""
    import duckdb  # noqa: F401

    from nlq2sql import runner  # noqa: F401

    return {"items": 0, "wall_s": 0.0, "cpu_s": _cpu_s(), "rss_mib": _rss_mib(), "hwm_mib": _hwm_mib()}


def prepare(workdir: str, scale: str, *sizes: str) -> dict[str, Any]:
    """Build the private warehouse and generate the files (in a child: see :func:`_rss_mib`)."""
    from nlq2sql import warehouse

    work = Path(workdir)
    out: dict[str, Any] = {"warehouse": str(warehouse.build(work / "warehouse.duckdb", scale=float(scale)))}
    for spec in sizes:
        n, _, tag = spec.partition(":")
        es, rs = generate(work, int(n), unique_texts=tag == "unique", tag=f"-{tag}" if tag else "")
        out[spec] = [str(es), str(rs)]
    return out


def distinct_queries(run_dir: str, evalset: str, out: str) -> dict[str, Any]:
    """Every distinct (SQL, params) the scoring run executed: predicted ones from the records,
    gold ones rebuilt from the eval set."""
    from nlq2sql.evalset import load_evalset
    from nlq2sql.intent import canonicalise
    from nlq2sql.records import iter_records
    from nlq2sql.sqlbuild import build_sql

    seen: dict[tuple[str, tuple[str, ...]], None] = {}
    for c in load_evalset(evalset).cases:
        q = build_sql(canonicalise(c.gold))
        seen[(q.sql, q.params)] = None
    for rec in iter_records(Path(run_dir) / "records.jsonl"):
        if rec["sql"] is not None:
            seen[(rec["sql"], tuple(rec["params"]))] = None
    Path(out).write_text(json.dumps([{"sql": s, "params": list(p)} for s, p in seen]))
    return {"queries": len(seen)}


CHILDREN: dict[str, Callable[..., dict[str, Any]]] = {
    "score": measure_score, "load": measure_load, "duckdb": measure_duckdb, "imports": measure_imports,
    "prepare": prepare, "queries": distinct_queries}


def _child(kind: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, __file__, "--measure", kind, *args], capture_output=True,
                          text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# ---------------------------------------------------------------- driver (stdlib only)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="response lines for the main run")
    ap.add_argument("--small", type=int, default=20_000, help="lines for the memory comparison run")
    ap.add_argument("--scale", type=float, default=1.0, help="warehouse scale (1.0 = 100k order lines)")
    ap.add_argument("--cold", type=int, default=None, help="lines for the unique-text run (default --n)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep generated files here")
    ap.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.measure:
        kind, *args = a.measure
        print(json.dumps(CHILDREN[kind](*args)))
        return

    cold_n = a.cold or a.n
    with tempfile.TemporaryDirectory(prefix="bench-rescore-") as tmp:
        work = a.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        os.environ["NLQ2SQL_CACHE_DIR"] = str(work / "cache")  # children never touch the repo's .cache
        prep = _child("prepare", str(work), str(a.scale), str(a.n), str(a.small), f"{cold_n}:unique")
        wh = prep["warehouse"]
        big, small, cold = prep[str(a.n)], prep[str(a.small)], prep[f"{cold_n}:unique"]
        print(f"generated {a.n:,} + {a.small:,} + {cold_n:,} (unique texts) lines in {work}; "
              f"warehouse scale {a.scale}", file=sys.stderr)

        rows: list[tuple[str, dict[str, Any]]] = [("interpreter + imports", _child("imports"))]
        for label, (es, rs), n in ((f"score {a.n:,}", big, a.n), (f"score {a.small:,}", small, a.small),
                                   (f"cold {cold_n:,} (unique texts)", cold, cold_n)):
            res = _child("score", es, rs, str(work / f"run-{n}-{Path(es).stem}"), wh)
            rows.append((label, res))
            print(f"  {label}: {res['items_per_s']:,.0f} items/s, peak RSS {res['rss_mib']:.0f} MiB",
                  file=sys.stderr)
        load_big, load_small = _child("load", big[0]), _child("load", small[0])
        rows += [(f"load eval set {a.n:,}", load_big), (f"load eval set {a.small:,}", load_small)]
        qfile = work / "queries.json"
        nq = _child("queries", str(work / f"run-{a.n}-{Path(big[0]).stem}"), big[0], str(qfile))["queries"]
        direct = _child("duckdb", str(qfile), wh)
        rows.append((f"duckdb {nq} distinct statements", direct))
        load_avg = os.getloadavg()[0]

    print()
    print(f"{'measurement':<30} {'items':>8} {'wall s':>7} {'items/s':>8} {'CPU s':>6} {'items/CPU-s':>11} "
          f"{'ru_maxrss MiB':>13} {'VmHWM MiB':>9}")
    for label, r in rows:
        items = r.get("items", r.get("queries", 0))
        print(f"{label:<30} {items:>8,} {r['wall_s']:>7.2f} {_fmt(r.get('items_per_s'), ',.0f'):>8} "
              f"{r['cpu_s']:>6.2f} {_fmt(r.get('items_per_cpu_s'), ',.0f'):>11} {r['rss_mib']:>13.0f} "
              f"{_fmt(r.get('hwm_mib'), '.0f'):>9}")
    floor, main_run, small_run = rows[0][1], rows[1][1], rows[2][1]
    print()
    print(f"scoring {a.n:,} items takes {main_run['wall_s'] / direct['wall_s']:.1f}x the wall time of running "
          f"its {nq} distinct statements directly in DuckDB ({main_run['cpu_s'] / direct['cpu_s']:.1f}x the "
          f"CPU time; harness overhead {1e6 * (main_run['cpu_s'] - direct['cpu_s']) / a.n:.0f} CPU-µs/item); "
          f"peak RSS {main_run['rss_mib'] / direct['rss_mib']:.1f}x")
    inc_big = main_run["rss_mib"] - load_big["rss_mib"]
    inc_small = small_run["rss_mib"] - load_small["rss_mib"]
    print(f"peak RSS {a.small:,} → {a.n:,} items: {small_run['rss_mib']:.0f} → {main_run['rss_mib']:.0f} MiB; "
          f"of which interpreter + imports {floor['rss_mib']:.0f}, eval set (load alone) "
          f"{load_small['rss_mib'] - floor['rss_mib']:.0f} → {load_big['rss_mib'] - floor['rss_mib']:.0f}, "
          f"scoring on top of the loaded set {inc_small:.0f} → {inc_big:.0f}")
    print(f"distinct queries executed by the harness: {main_run['distinct_queries']}; "
          f"accuracy raw {main_run['raw_accuracy']:.3f}, final {main_run['final_accuracy']:.3f}")
    print(f"load average at the end: {load_avg:.2f} on {os.cpu_count()} CPUs; items/CPU-s is the rate "
          "one uncontended core would reach")


if __name__ == "__main__":
    main()
