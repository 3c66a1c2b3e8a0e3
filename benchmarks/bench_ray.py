"""Ray's cost, side by side: one client process vs client workers as Ray actors (``--engine ray``).

The same items, the same ``eval`` path, against the no-op server (benchmarks/noop_server.py:
every answer at once, so what limits req/s is the client side; no structured outputs: the
no-op server enforces no schema, it only answers the canary as a conforming server), alternating the variants
``--rounds`` times.  Per variant, from the process's launch and its records:

* req/s with start-up counted: items ÷ (launch → the process's exit), Ray's start included;
* req/s without it: items ÷ (first request sent → last answer received);
* time to first request: launch → the first record's ``started``.

Prints a Markdown table with medians and each variant's ratio to the one-process figure.
Keep it short on a shared machine (the defaults take about two minutes here):

    python benchmarks/bench_ray.py --requests 1500 --concurrency 64 --rounds 2

"Ray: 2 actors; 1 item per task" is the dispatch before it was batched (``ray_engine.MAX_CHUNK``
set to 1 in the driver), kept for the side-by-side figure.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_client import expanded_evalset, free_port  # noqa: E402

#: One run of ``eval``, as a fresh interpreter (``run_eval``: the CLI's own path, no table printed).
RUN = r"""
import sys
from pathlib import Path
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval
from nlq2sql.transport.client import Sampling
url, evalset, out, c, workers, engine, chunk = sys.argv[1:8]
if chunk != "-":  # items per Ray task (the driver decides): 1 is the dispatch before batching
    import nlq2sql.run.ray_engine as ray_engine
    ray_engine.MAX_CHUNK = int(chunk)
if __name__ == "__main__":
    run_eval(EvalConfig(evalset=evalset, out=Path(out), endpoint=url, model="noop", concurrency=int(c),
                        guardrails=(), sampling=Sampling(max_tokens=16, structured="none"),
                        load=LoadShape(metrics_interval_s=3600), retry_budget=0.0, force=True,
                        workers=int(workers), engine=engine))
"""

#: name: (workers, engine, items per Ray task: "-" the default)
VARIANTS = {"one process": ("1", "local", "-"), "Ray: 2 actors": ("2", "ray", "-"),
            "Ray: 2 actors; 1 item per task": ("2", "ray", "1"), "2 worker processes": ("2", "local", "-")}


def one(url: str, evalset: Path, out: Path, c: int, workers: str, engine: str, chunk: str) -> dict[str, float]:
    t0 = time.time()
    res = subprocess.run([PY, "-c", RUN, url, str(evalset), str(out), str(c), workers, engine, chunk], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    t1 = time.time()
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-3000:])
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    starts = [r["started"] for r in recs]
    ends = [r["started"] + r["latency_s"] for r in recs]
    n = len(recs)
    return {"with_startup": n / (t1 - t0), "without": n / (max(ends) - min(starts)),
            "first_request_s": min(starts) - t0, "ok": sum(r["outcome"] == "ok" for r in recs), "n": n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    names = args.variants.split(",")
    port = free_port()
    server = subprocess.Popen([PY, str(ROOT / "benchmarks" / "noop_server.py"), str(port)])
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                raise SystemExit("no-op server did not start") from None
            time.sleep(0.2)
    got: dict[str, list[dict[str, float]]] = {k: [] for k in names}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            evalset = expanded_evalset(args.requests, Path(tmp) / "bench.jsonl")
            for r in range(args.rounds):
                for k in names:
                    got[k].append(one(f"http://127.0.0.1:{port}/v1", evalset, Path(tmp) / f"{r}-{k}",
                                      args.concurrency, *VARIANTS[k]))
    finally:
        server.terminate()
    base = {m: statistics.median(x[m] for x in got[names[0]]) for m in ("with_startup", "without")}
    print(f"\n{args.requests} requests at c={args.concurrency} against the no-op server, median of {args.rounds} "
          f"alternating rounds (shared machine: other jobs were running)")
    print("| client | req/s, start-up counted | ratio | req/s after the first request | ratio "
          "| first request after launch | ok |")
    print("|---|---|---|---|---|---|---|")
    for k in names:
        med = {m: statistics.median(x[m] for x in got[k]) for m in ("with_startup", "without", "first_request_s")}
        print(f"| {k} | {med['with_startup']:.0f} | {med['with_startup'] / base['with_startup']:.2f} "
              f"| {med['without']:.0f} | {med['without'] / base['without']:.2f} | {med['first_request_s']:.1f} s "
              f"| {min(int(x['ok']) for x in got[k])}/{args.requests} |")


if __name__ == "__main__":
    main()
