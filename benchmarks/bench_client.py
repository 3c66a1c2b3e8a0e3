"""Client ceiling: nlq2sql's full request path vs ``vllm bench serve``, side by side.

A no-op OpenAI-compatible server (benchmarks/noop_server.py) runs pinned to core 0; each
client runs pinned to core 1, alternating, ``--rounds`` times per concurrency level.
Ours is the real ``run_eval`` path: streaming, timing, scoring and appending records, once
per client (``sdk``: the official openai SDK; ``aiohttp``: the same request on plain
aiohttp).  Prints req/s medians and the ratio ours ÷ theirs for each.  A harness that tops out below the
server it measures cannot measure it.

    python benchmarks/bench_client.py --concurrency 64,256 --requests 4000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

OURS = r"""
import json, sys, time
from pathlib import Path
from nlq2sql.transport.client import Sampling
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval
from nlq2sql.run.workers import auto_workers
url, evalset, out, c, client, workers = sys.argv[1:7]
w = auto_workers(int(c)) if workers == "auto" else int(workers)
s = run_eval(EvalConfig(evalset=evalset, out=Path(out), endpoint=url, model="noop", concurrency=int(c),
                        guardrails=(), sampling=Sampling(max_tokens=16), load=LoadShape(metrics_interval_s=3600),
                        retry_budget=0.0, force=True, client=client, workers=w))
print("RESULT", s.throughput.req_per_s, s.n, s.errors_by_class)
"""

THEIRS = r"""
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
p = FlexibleArgumentParser(); add_cli_args(p)
r = main(p.parse_args(sys.argv[1:]))
print("RESULT", r["request_throughput"], r["completed"])
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expanded_evalset(n: int, path: Path) -> Path:
    src = (ROOT / "evalsets" / "heldout.jsonl").read_text().splitlines()
    with open(path, "w") as fh:
        for i in range(n):
            obj = json.loads(src[i % len(src)])
            obj["id"] = f"{obj['id']}#{i}"
            fh.write(json.dumps(obj) + "\n")
    return path


def run(cmd: list[str], cores: str) -> float:
    out = subprocess.run(["taskset", "-c", cores, *cmd], capture_output=True, text=True, cwd=ROOT,
                         timeout=900)
    m = re.search(r"RESULT (\S+)", out.stdout)
    if not m:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    return float(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="64,256")
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokenizer", default=str(Path(os.environ.get("NLQ2SQL_CACHE_DIR") or ROOT / ".cache")
                                               / "models" / "smollm2-135m"))
    ap.add_argument("--clients", default="sdk,aiohttp,aiohttp+auto",
                    help="our variants: CLIENT or CLIENT+WORKERS (a number or auto: one per client core)")
    ap.add_argument("--client-cores", default="1", help="taskset list for every client, ours and theirs "
                    "(the no-op server keeps core 0)")
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen(["taskset", "-c", "0", PY, str(ROOT / "benchmarks" / "noop_server.py"), str(port)])
    deadline = time.time() + 60
    while True:  # wait until it accepts connections (a busy machine starts it slowly)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                raise SystemExit("no-op server did not start") from None
            time.sleep(0.2)
    url = f"http://127.0.0.1:{port}"
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            evalset = expanded_evalset(args.requests, Path(tmp) / "bench.jsonl")
            clients = args.clients.split(",")
            for c in (int(x) for x in args.concurrency.split(",")):
                ours: dict[str, list[float]] = {k: [] for k in clients}
                theirs: list[float] = []
                for r in range(args.rounds):
                    for k in clients:
                        client, _, workers = k.partition("+")
                        ours[k].append(run([PY, "-c", OURS, url + "/v1", str(evalset), f"{tmp}/run{c}-{r}-{k}",
                                            str(c), client, workers or "1"], args.client_cores))
                    theirs.append(run([PY, "-c", THEIRS, "--backend", "openai-chat", "--endpoint",
                                       "/v1/chat/completions", "--base-url", url, "--model", "noop",
                                       "--tokenizer", args.tokenizer, "--dataset-name", "random",
                                       "--random-input-len", "32", "--random-output-len", "8",
                                       "--num-prompts", str(args.requests), "--max-concurrency", str(c)],
                                      args.client_cores))
                rows.append((c, ours, theirs))
    finally:
        server.terminate()
    print(f"\nclient ceiling, no-op server on core 0, clients on cores {args.client_cores}, {args.requests} requests, "
          f"median of {args.rounds} interleaved rounds (cpu count {os.cpu_count()})")
    print("| concurrency | client | nlq2sql req/s | vllm bench serve req/s | ratio ours/theirs "
          "| rounds (ours; theirs) |")
    print("|---|---|---|---|---|---|")
    for c, ours, theirs in rows:
        t = statistics.median(theirs)
        for k, xs in ours.items():
            o = statistics.median(xs)
            print(f"| {c} | {k} | {o:.0f} | {t:.0f} | {o / t:.2f} | {', '.join(f'{x:.0f}' for x in xs)}; "
                  f"{', '.join(f'{x:.0f}' for x in theirs)} |")


if __name__ == "__main__":
    main()
