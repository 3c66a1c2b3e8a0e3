"""Offline re-scoring throughput and memory, side by side with plain DuckDB.

Generates, in a temp dir, an eval set of N unique ids (copies of the held-out cases) and a
responses file of N lines cycling four kinds of model output — correct (compact), false
ranking, invalid JSON (cut off), pretty-printed — then measures, each in its own
subprocess so peak RSS (``ru_maxrss``) belongs to one measurement only:

* ``score N``      ``answers.offline.score_responses`` end to end (read, parse, guardrail, build,
                   execute, compare, write records, summary): items/s and peak RSS;
* ``score n``      the same on the first n lines (default 20 000) of a set of n items;
* ``load N/n``     only reading that set as a scoring run holds it (``index_evalset``): the
                   memory the eval set itself holds, so the scoring increment (score − load)
                   can be compared across sizes;
* ``cold N``       as ``score N`` but every response text unique (trailing whitespace), so
                   nothing keyed by text hits: each text is parsed, and only the records
                   of equal meaning are reused -- the cost for novel texts of known answers;
* ``duckdb``       executing only the distinct SQL statements (gold and predicted) the
                   scoring run needed, directly on a fresh DuckDB connection.

    .venv/bin/python benchmarks/bench_rescore.py [--n 100000] [--small 20000] [--scale 1.0] [--rounds 3]

``score N``, ``duckdb`` and ``read`` (the floor of issue 10's bound: the distinct SQL plus
reading the responses once) are measured ``--rounds`` times, interleaved, and the ratio is
given per round as its median and min–max: one pair alone moved by 30 % between runs here.

The warehouse is built privately in the temp dir (``--scale``; 1.0 ≈ 100k order lines),
so the repository's ``.cache`` is neither read nor written.

With ``--against TREE`` (another checkout of this repository, e.g. a ``git worktree`` of an
older commit) only ``score N`` is measured, for both code trees in alternating rounds
(``--rounds R``: TREE, this tree, TREE, this tree, …), each child importing ``nlq2sql``
from its own tree (``PYTHONPATH``).  Both score the same generated eval set, responses file
and DuckDB file (the warehouse is also built by TREE's own code and its tables compared
with this tree's build first).  Within a round the two runs sit next to each other in time,
so the per-round ratio this/TREE is robust to other load on the machine; the median ratio
and its min–max spread are printed, and whether both trees give the same summary figures.

    .venv/bin/python benchmarks/bench_rescore.py --against ../old-checkout --n 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

VARIANTS = ("correct", "false_ranking", "invalid_json", "pretty")
THIS_TREE = Path(__file__).resolve().parent.parent
#: Summary keys that must agree between two code trees scoring the same input (not timing,
#: not the records digest: records carry per-item timings).
COMPARED_KEYS = ("n", "raw_accuracy", "final_accuracy", "execution_accuracy", "schema_valid_rate",
                 "interventions", "intervention_precision", "intervention_recall", "majority_baseline",
                 "field_accuracy", "status_counts", "error_taxonomy_raw", "error_taxonomy_final",
                 "finish_reasons", "confusion_matrix", "per_category", "distinct_queries_executed")


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
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.evalset import load_evalset

    cases = [c.model_dump(mode="json") for c in load_evalset("heldout", open_warehouse("retail")).cases]
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
    import nlq2sql
    from nlq2sql.stages.pipeline import ScoreConfig

    try:
        from nlq2sql.answers.offline import score_responses
    except ImportError:  # a tree from before the one offline scorer
        from nlq2sql.stages.pipeline import score_responses  # type: ignore[attr-defined,no-redef]

    # Only the fields this tree's ScoreConfig has (older trees lack allow_missing, semantic_model).
    fields = {f.name for f in dataclasses.fields(ScoreConfig)}
    wanted = {"evalset": evalset, "responses": Path(responses), "out": Path(out), "guardrails": ("ranking",),
              "warehouse": Path(warehouse), "force": True}
    missing = set(wanted) - fields
    if missing:
        raise SystemExit(f"this tree's ScoreConfig lacks {sorted(missing)}")
    cfg = ScoreConfig(**wanted)  # type: ignore[arg-type]
    started, cpu = time.perf_counter(), _cpu_s()
    summary = score_responses(cfg)
    wall, cpu = time.perf_counter() - started, _cpu_s() - cpu
    for dump in ("to_json", "to_json_dict"):  # a typed Summary (older trees: to_json_dict, or the dict itself)
        if hasattr(summary, dump):
            summary = getattr(summary, dump)()
            break
    compared = {k: summary.get(k) for k in COMPARED_KEYS}
    return {"items": summary["n"], "wall_s": wall, "items_per_s": summary["n"] / wall, "cpu_s": cpu,
            "items_per_cpu_s": summary["n"] / cpu,
            "rss_mib": _rss_mib(), "hwm_mib": _hwm_mib(), "distinct_queries": summary["distinct_queries_executed"],
            "raw_accuracy": summary["raw_accuracy"]["value"],
            "final_accuracy": summary["final_accuracy"]["value"],
            "raw_correct": summary["raw_accuracy"]["k"], "final_correct": summary["final_accuracy"]["k"],
            "exec_correct": summary["execution_accuracy"]["k"],
            "summary_sha256": hashlib.sha256(json.dumps(compared, sort_keys=True).encode()).hexdigest(),
            "tree": str(Path(nlq2sql.__file__).resolve().parent.parent)}


#: Stages of a scoring run, each a function called from it (disjoint: none calls another).
STAGES = (("read responses", "runner.py", "read_responses"), ("parse + validate", "intent.py", "parse_intent"),
          ("guardrails", "guardrail.py", "apply_all"), ("SQL build", "sqlbuild.py", "build_sql"),
          ("DuckDB execution", "execute.py", "run"))


def measure_stages(evalset: str, responses: str, out: str, warehouse: str, warm_evalset: str,
                   warm_responses: str) -> dict[str, Any]:
    """``score`` under cProfile: each stage's cumulative time and its share of the run, so the
    next bottleneck is visible (the profiler slows everything; read the shares, not the seconds).
    A scoring run of another set first, unprofiled, so that the lazy imports are not a stage;
    the profiled set's texts are all new to the per-text caches."""
    import cProfile
    import pstats

    measure_score(warm_evalset, warm_responses, out + "-warm", warehouse)
    prof = cProfile.Profile()
    prof.enable()
    res = measure_score(evalset, responses, out, warehouse)
    prof.disable()
    st = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in st.values())  # (cc, nc, own time, cumulative, callers)
    stages = {}
    for label, file, func in STAGES:
        stages[label] = sum(v[3] for (f, _, name), v in st.items() if name == func and f.endswith(file))
    stages["everything else (records, summary, memo)"] = total - sum(stages.values())
    own = sorted(st.items(), key=lambda kv: -kv[1][2])[:8]  # by time spent in the function itself
    top = {f"{Path(f).name}:{line} {name}": v[2] for (f, line, name), v in own}
    return {"items": res["items"], "profiled_s": total, "stages": stages, "top_own_time": top, "wall_s": res["wall_s"],
            "cpu_s": res["cpu_s"], "rss_mib": res["rss_mib"], "hwm_mib": res["hwm_mib"]}


def measure_read(evalset: str, responses: str) -> dict[str, Any]:
    """Only reading the responses file as a scoring run does (``read_responses``, ids checked)."""
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.evalset import index_evalset
    from nlq2sql.stages.pipeline import read_responses

    ids = index_evalset(evalset, open_warehouse("retail")).ids
    started, cpu = time.perf_counter(), _cpu_s()
    n = sum(1 for _ in read_responses(Path(responses), ids))
    wall, cpu = time.perf_counter() - started, _cpu_s() - cpu
    return {"items": n, "wall_s": wall, "cpu_s": cpu, "items_per_s": n / wall, "rss_mib": _rss_mib(),
            "hwm_mib": _hwm_mib()}


def measure_load(evalset: str) -> dict[str, Any]:
    """The eval set as a scoring run holds it: the id index (``index_evalset``) where the tree
    has one, else every case (``load_evalset`` + ``by_id``)."""
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages import evalset as ev
    from nlq2sql.stages import pipeline as runner  # same imports as a scoring run, so only the set differs

    started, cpu = time.perf_counter(), _cpu_s()
    if hasattr(ev, "index_evalset"):
        held: Any = ev.index_evalset(evalset, open_warehouse("retail"))
        items = len(held.ids)
    else:
        held = ev.load_evalset(evalset, open_warehouse("retail")).by_id()
        items = len(held)
    wall, cpu = time.perf_counter() - started, _cpu_s() - cpu
    assert runner and held
    return {"items": items, "wall_s": wall, "cpu_s": cpu, "rss_mib": _rss_mib(), "hwm_mib": _hwm_mib()}


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

    import nlq2sql
    from nlq2sql.stages import pipeline as runner  # noqa: F401

    return {"items": 0, "wall_s": 0.0, "cpu_s": _cpu_s(), "rss_mib": _rss_mib(), "hwm_mib": _hwm_mib(),
            "tree": str(Path(nlq2sql.__file__).resolve().parent.parent)}


def table_digest(warehouse: str) -> dict[str, Any]:
    """sha256 over every table's name, column types and rows (sorted): equal ⇔ same data."""
    import duckdb

    con = duckdb.connect(warehouse, read_only=True, config={"enable_external_access": False})
    digest = hashlib.sha256()
    tables = [r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables ORDER BY table_name").fetchall()]
    rows = 0
    for t in tables:
        cols = con.execute(f'DESCRIBE "{t}"').fetchall()
        digest.update(repr((t, [(c[0], c[1]) for c in cols])).encode())
        for row in con.execute(f'SELECT * FROM "{t}" ORDER BY ALL').fetchall():
            digest.update(repr(row).encode())
            rows += 1
    con.close()
    return {"tables": tables, "rows": rows, "sha256": digest.hexdigest()}


def prepare(workdir: str, scale: str, *sizes: str) -> dict[str, Any]:
    """Build the private warehouse and generate the files (in a child: see :func:`_rss_mib`)."""
    from nlq2sql.semantic import warehouse

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
    from nlq2sql.records.store import iter_records
    from nlq2sql.semantic import open_warehouse
    from nlq2sql.stages.evalset import load_evalset
    from nlq2sql.stages.intent import canonicalise
    from nlq2sql.stages.sqlbuild import build_sql

    seen: dict[tuple[str, tuple[str, ...]], None] = {}
    wh = open_warehouse("retail")  # the generated sets are retail's
    for c in load_evalset(evalset, wh).cases:
        q = build_sql(canonicalise(c.gold), wh.catalog)
        seen[(q.sql, q.params)] = None
    for rec in iter_records(Path(run_dir) / "records.jsonl"):
        if rec["sql"] is not None:
            seen[(rec["sql"], tuple(rec["params"]))] = None
    Path(out).write_text(json.dumps([{"sql": s, "params": list(p)} for s, p in seen]))
    return {"queries": len(seen)}


CHILDREN: dict[str, Callable[..., dict[str, Any]]] = {
    "score": measure_score, "load": measure_load, "duckdb": measure_duckdb, "imports": measure_imports,
    "prepare": prepare, "queries": distinct_queries, "tables": table_digest, "stages": measure_stages,
    "read": measure_read}


def _child(kind: str, *args: str, tree: Path | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; with ``tree``, importing nlq2sql from it."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, __file__, "--measure", kind, *args], capture_output=True,
                          text=True, env=env, check=False, cwd=tree)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed{f' in {tree}' if tree else ''}:\n{proc.stderr}")
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
    ap.add_argument("--against", type=Path, default=None, metavar="TREE",
                    help="another checkout of this repository: measure `score N` for both trees, side by side")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of score N beside its floor (SQL + read); with --against: alternating rounds "
                         "(default 3)")
    ap.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.measure:
        kind, *args = a.measure
        print(json.dumps(CHILDREN[kind](*args)))
        return
    if a.against is not None:
        against(a.against, n=a.n, scale=a.scale, rounds=a.rounds, workdir=a.workdir)
        return

    cold_n = a.cold or a.n
    with tempfile.TemporaryDirectory(prefix="bench-rescore-") as tmp:
        work = a.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        os.environ["NLQ2SQL_CACHE_DIR"] = str(work / "cache")  # children never touch the repo's .cache
        prep = _child("prepare", str(work), str(a.scale), str(a.n), str(a.small), f"{cold_n}:unique")
        wh = prep["warehouse"]
        big, small, cold = prep[str(a.n)], prep[str(a.small)], prep[f"{cold_n}:unique"]
        print(f"generated {a.n:,} + {a.small:,} + {cold_n:,} (unique texts) lines in "
              f"{'--workdir' if a.workdir else 'a temp dir'}; "
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
        read = _child("read", *big)
        rows.append((f"read responses {a.n:,}", read))
        # The bound's ratio, side by side: score N, then its floor (distinct SQL + one read), per round.
        bound = [(rows[1][1], direct, read)]
        for r in range(2, a.rounds + 1):
            bound.append((_child("score", *big, str(work / f"run-{a.n}-round{r}"), wh),
                          _child("duckdb", str(qfile), wh), _child("read", *big)))
            print(f"  round {r}: score {bound[-1][0]['wall_s']:.2f} s, SQL {bound[-1][1]['wall_s']:.2f} s, "
                  f"read {bound[-1][2]['wall_s']:.2f} s", file=sys.stderr)
        stages = _child("stages", cold[0], cold[1], str(work / "run-stages"), wh, *small)
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
    ratios = [sc["wall_s"] / (sq["wall_s"] + rd["wall_s"]) for sc, sq, rd in bound]
    per_round = "; ".join(f"{sc['wall_s']:.2f} vs {sq['wall_s']:.2f} + {rd['wall_s']:.2f}" for sc, sq, rd in bound)
    print(f"against executing the distinct SQL plus reading the responses once, side by side in {len(bound)} "
          f"round(s): {_spread(ratios, '.2f')}x (per round, score s vs SQL s + read s: {per_round}) "
          f"(issue 10's bound: 1.5x; a scoring run reads the file once, checking each line as it scores it)")
    with_set = [sc["wall_s"] / (sq["wall_s"] + rd["wall_s"] + load_big["wall_s"]) for sc, sq, rd in bound]
    print(f"  the same with loading and checking the eval set once ({load_big['wall_s']:.2f} s) in the floor: "
          f"{_spread(with_set, '.2f')}x")
    print(f"where a cold run's time goes (cold {cold_n:,}, unique texts, under cProfile: shares, not seconds):")
    for label, secs in stages["stages"].items():
        print(f"  {label:<42} {100 * secs / stages['profiled_s']:5.1f} %")
    print("  functions with the most time of their own:")
    for label, secs in stages["top_own_time"].items():
        print(f"    {label:<52} {100 * secs / stages['profiled_s']:5.1f} %")
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


def tree_name(tree: Path) -> str:
    """A code tree as its commit (``-dirty`` with uncommitted changes to ``nlq2sql/``, the code
    measured), never its path: the output is committed under ``reports/``."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True,
                              check=False).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    return commit + ("-dirty" if git("status", "--porcelain", "--", "nlq2sql") else "")


def _spread(values: list[float], spec: str) -> str:
    return f"{format(statistics.median(values), spec)} ({format(min(values), spec)}–{format(max(values), spec)})"


def against(other: Path, *, n: int, scale: float, rounds: int, workdir: Path | None) -> None:
    """``score N`` for ``other`` and this tree in alternating rounds, on the same input files."""
    other = other.resolve()
    if not (other / "nlq2sql" / "__init__.py").is_file():
        raise SystemExit(f"--against {other}: not a checkout of this repository (no nlq2sql/__init__.py)")
    if rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    trees = {"old": other, "new": THIS_TREE}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-rescore-") as tmp:
        work = workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        os.environ["NLQ2SQL_CACHE_DIR"] = str(work / "cache")  # children never touch either .cache
        # Input files and the warehouse from this tree; the other tree builds its own warehouse
        # too, and its tables must equal this one's before the same file is used for both.
        prep = _child("prepare", str(work), str(scale), str(n), tree=trees["new"])
        es, rs = prep[str(n)]
        wh = prep["warehouse"]
        (work / "old").mkdir(exist_ok=True)
        wh_old = _child("prepare", str(work / "old"), str(scale), tree=trees["old"])["warehouse"]
        dig_new, dig_old = _child("tables", wh, tree=trees["new"]), _child("tables", wh_old, tree=trees["old"])
        same_wh = dig_new["sha256"] == dig_old["sha256"]
        print(f"generated {n:,} lines in {'--workdir' if workdir else 'a temp dir'}; warehouse scale {scale}: "
              f"{len(dig_new['tables'])} tables, "
              f"{dig_new['rows']:,} rows; the old tree's own build is "
              f"{'identical' if same_wh else 'DIFFERENT'} (sha256 over tables, types and rows)", file=sys.stderr)
        if not same_wh:
            raise SystemExit("the two trees build different warehouses: a side-by-side run would not compare like "
                             "with like")
        floors = {}
        for name, tree in trees.items():  # untimed: compiles each tree's .pyc before any timed run
            floors[name] = _child("imports", tree=tree)
            if Path(floors[name]["tree"]) != tree:
                raise SystemExit(f"{name}: nlq2sql imported from {floors[name]['tree']}, not {tree}")
        results: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        for r in range(1, rounds + 1):
            for name, tree in trees.items():
                res = _child("score", es, rs, str(work / f"run-{name}"), wh, tree=tree)
                if Path(res["tree"]) != tree:
                    raise SystemExit(f"{name}: nlq2sql imported from {res['tree']}, not {tree}")
                results[name].append(res)
                print(f"  round {r} {name}: {res['items_per_s']:,.0f} items/s, "
                      f"{res['items_per_cpu_s']:,.0f} items/CPU-s, peak RSS {res['rss_mib']:.0f} MiB "
                      f"(load {os.getloadavg()[0]:.2f})", file=sys.stderr)
        load_end = os.getloadavg()

    old, new = results["old"], results["new"]
    print()
    print(f"score {n:,} items, side by side: old = {tree_name(other)}, new = {tree_name(THIS_TREE)}; {rounds} "
          "alternating rounds "
          "(old first in each)")
    print(f"{'round':<6} {'tree':<4} {'wall s':>7} {'items/s':>8} {'CPU s':>6} {'items/CPU-s':>11} "
          f"{'ru_maxrss MiB':>13} {'VmHWM MiB':>9}")
    for r in range(rounds):
        for name in ("old", "new"):
            x = results[name][r]
            print(f"{r + 1:<6} {name:<4} {x['wall_s']:>7.2f} {x['items_per_s']:>8,.0f} {x['cpu_s']:>6.2f} "
                  f"{x['items_per_cpu_s']:>11,.0f} {x['rss_mib']:>13.0f} {_fmt(x.get('hwm_mib'), '.0f'):>9}")
    print()
    for name in ("old", "new"):
        xs = results[name]
        print(f"{name}: median (min–max) {_spread([x['items_per_s'] for x in xs], ',.0f')} items/s, "
              f"{_spread([x['items_per_cpu_s'] for x in xs], ',.0f')} items/CPU-s, peak RSS "
              f"{_spread([x['rss_mib'] for x in xs], '.0f')} MiB (interpreter + imports "
              f"{floors[name]['rss_mib']:.0f} MiB)")
    for label, key in (("items/s", "items_per_s"), ("items/CPU-s", "items_per_cpu_s"), ("peak RSS", "rss_mib")):
        ratios = [nw[key] / od[key] for od, nw in zip(old, new, strict=True)]
        print(f"ratio new/old {label:<12} median {_spread(ratios, '.3f')} over {rounds} rounds")
    counts = {(x["raw_correct"], x["final_correct"], x["exec_correct"], x["distinct_queries"])
              for x in old + new}
    digests = {x["summary_sha256"] for x in old + new}
    o = old[0]
    print(f"summaries: raw correct {o['raw_correct']:,}, final correct {o['final_correct']:,}, execution correct "
          f"{o['exec_correct']:,} of {o['items']:,}; distinct queries {o['distinct_queries']}; counts "
          f"{'MATCH' if len(counts) == 1 else 'DIFFER: ' + repr(sorted(counts))} across trees and rounds; "
          f"every compared summary figure (accuracies, taxonomy, confusion, per category, …) "
          f"{'matches' if len(digests) == 1 else 'DIFFERS'}")
    print(f"load average (1/5/15 min) at the start {load_start[0]:.2f}/{load_start[1]:.2f}/{load_start[2]:.2f}, "
          f"at the end {load_end[0]:.2f}/{load_end[1]:.2f}/{load_end[2]:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
