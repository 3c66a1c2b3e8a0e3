"""Soak: does the harness stay flat under load for hours?  (A benchmark, not a unit test.)

Two phases, each one ordinary ``run_eval`` in its own child process (the real path:
streaming, timing, scoring against DuckDB, appending and flushing records), while this
process samples the child with psutil every ``--sample-s`` seconds (default 60):
resident memory (RSS), open file descriptors and inet sockets.

* ``noop``: ``--requests`` requests (default 200 000) against ``benchmarks/noop_server.py``
  (answers at once: the harness is the bottleneck, so this is the most requests per hour).
* ``slow``: ``--duration`` seconds (default 7 200) against the fault suite's fake server
  (``tests/fakeserver.py --delay``: every answer streamed over ``--delay`` seconds), with a
  deterministic ``--fault-every``-th answer per question an HTTP 500 (retried), at
  ``--concurrency``.  ``duration`` mode: no request starts after the deadline.

Verdict, per phase, against stated bounds (flags): RSS growth from the baseline (the first
sample at least one interval in, with records being written) to the last sample at most
``--rss-bound-mib``; open fds never more than ``--fd-slack`` above the baseline; inet
sockets never above concurrency + ``--fd-slack``; records complete (one per request sent,
ids unique, the summary's count and hash match the file) and every request ``ok`` (faults
retried).  Prints the samples, the figures and PASS/FAIL; exit 1 on FAIL.

    .venv/bin/python benchmarks/soak.py                        # 200k requests + 2 h (the issue's sizes)
    .venv/bin/python benchmarks/soak.py --requests 20000 --duration 600
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
sys.path.insert(0, str(ROOT / "tests"))

CHILD = r"""
import json, sys
from pathlib import Path
from nlq2sql.transport.client import Sampling
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval
url, model, evalset, out, c, client, duration = sys.argv[1:8]
s = run_eval(EvalConfig(evalset=evalset, out=Path(out), endpoint=url, model=model, concurrency=int(c),
                        sampling=Sampling(max_tokens=96), timeout_s=60.0,
                        load=LoadShape(metrics_interval_s=3600,
                                       duration_s=float(duration) if duration != "none" else None),
                        force=True, client=client))
s = s.to_json()  # the summary as summary.json holds it
print("RESULT " + json.dumps({"n": s["n"], "outcomes": s["outcomes"], "retries_used": s["retries_used"],
      "throughput": s["throughput"], "records": s["records"]}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[Any], timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                raise SystemExit(f"server on port {port} did not start") from None
            time.sleep(0.2)


def expanded_evalset(n: int, path: Path) -> Path:
    """The held-out set's items cycled to ``n`` lines with unique ids (``ho-001#7``)."""
    src = (ROOT / "evalsets" / "heldout.jsonl").read_text().splitlines()
    with open(path, "w") as fh:
        for i in range(n):
            obj = json.loads(src[i % len(src)])
            obj["id"] = f"{obj['id']}#{i // len(src) + 1}"
            fh.write(json.dumps(obj) + "\n")
    return path


def sample(proc: psutil.Process) -> dict[str, Any]:
    with proc.oneshot():
        return {"t": time.time(), "rss_mib": proc.memory_info().rss / 2**20, "fds": proc.num_fds(),
                "sockets": len(proc.net_connections(kind="inet")), "cpu_s": sum(proc.cpu_times()[:2])}


def run_phase(name: str, url: str, model: str, evalset: Path, out: Path, concurrency: int, client: str,
              duration: float | None, every_s: float) -> dict[str, Any]:
    """Run one child harness, sampling it every ``every_s`` s (and at its start and end)."""
    cmd = [PY, "-c", CHILD, url, model, str(evalset), str(out), str(concurrency), client,
           str(duration) if duration else "none"]
    t0 = time.time()
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = psutil.Process(child.pid)
    samples: list[dict[str, Any]] = []
    stop = threading.Event()

    def sampler() -> None:
        next_at = t0
        while not stop.is_set():
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:  # exited, not yet reaped: nothing to sample
                    return
                s = sample(proc)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                return
            s["t"] -= t0
            s["records"] = _lines(out / "records.jsonl")
            samples.append(s)
            print(f"  [{name}] t={s['t']:7.0f} s  rss {s['rss_mib']:7.1f} MiB  fds {s['fds']:4d}  "
                  f"sockets {s['sockets']:4d}  records {s['records']:7d}", flush=True)
            next_at += every_s
            stop.wait(max(0.0, next_at - time.time()))

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    stdout, stderr = child.communicate()
    stop.set()
    th.join()
    wall = time.time() - t0
    line = next((x for x in stdout.splitlines() if x.startswith("RESULT ")), None)
    if child.returncode != 0 or line is None:
        raise SystemExit(f"{name}: harness exited {child.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return {"name": name, "wall_s": wall, "samples": samples, "summary": json.loads(line[7:]),
            "out": str(out), "concurrency": concurrency, "client": client}


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def check_records(out: Path, summary: dict[str, Any]) -> tuple[bool, str]:
    from nlq2sql.records.store import records_digest

    ids: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    with open(out / "records.jsonl", "rb") as fh:
        for raw in fh:
            rec = json.loads(raw)
            ids[rec["id"]] += 1
            outcomes[rec["outcome"]] += 1
    dup = sum(1 for v in ids.values() if v > 1)
    sent = summary["throughput"]["items_this_session"]
    digest_ok = records_digest(out / "records.jsonl").to_json() == summary["records"]
    ok = dup == 0 and len(ids) == sent == summary["n"] and digest_ok and set(outcomes) == {"ok"}
    return ok, (f"{len(ids)} records for {sent} requests sent ({summary['throughput'].get('not_sent', 0)} "
                f"not sent at the deadline), {dup} duplicated, outcomes {dict(outcomes)}, retries "
                f"{summary['retries_used']}, summary count+hash {'match' if digest_ok else 'DIFFER'}")


def verdict(res: dict[str, Any], args: argparse.Namespace) -> tuple[bool, list[str]]:
    s = res["samples"]
    # Baseline: the first sample at least one interval in with requests flowing (imports, the
    # eval set and the warehouse are loaded by then); growth is measured from there.
    running = [x for x in s if x["records"] > 0] or s
    base = next((x for x in running if x["t"] >= args.sample_s * 0.99), running[0])
    after = [x for x in s if x["t"] >= base["t"]]
    last = s[-1]
    growth = last["rss_mib"] - base["rss_mib"]
    peak = max(x["rss_mib"] for x in after)
    hours = max(1e-9, (last["t"] - base["t"]) / 3600)
    fd_over = max(x["fds"] for x in after) - base["fds"]
    sock_max = max(x["sockets"] for x in s)
    rec_ok, rec_text = check_records(Path(res["out"]), res["summary"])
    checks = [
        (growth <= args.rss_bound_mib,
         f"RSS {base['rss_mib']:.1f} MiB at t={base['t']:.0f} s → {last['rss_mib']:.1f} MiB at t={last['t']:.0f} s "
         f"(growth {growth:+.1f} MiB, {growth / hours:+.1f} MiB/h; peak {peak:.1f}; bound ≤ {args.rss_bound_mib} MiB)"),
        (fd_over <= args.fd_slack,
         f"open fds {base['fds']} at t={base['t']:.0f} s, max {base['fds'] + fd_over}, last {last['fds']} "
         f"(bound: ≤ {args.fd_slack} above)"),
        (sock_max <= res["concurrency"] + args.fd_slack,
         f"inet sockets max {sock_max}, last {last['sockets']} (bound: concurrency {res['concurrency']} + "
         f"{args.fd_slack})"),
        (rec_ok, f"records: {rec_text}"),
    ]
    return all(ok for ok, _ in checks), [("ok   " if ok else "FAIL ") + text for ok, text in checks]


def slow_script(every: int, cap: int) -> dict[str, Any]:
    """Every question's ``every``-th answer is an HTTP 500, the rest ok (deterministic)."""
    from fakeserver import script

    if every <= 0:
        return script()
    questions = {json.loads(x)["question"] for x in (ROOT / "evalsets" / "heldout.jsonl").read_text().splitlines()}
    per_q = cap // len(questions) + 2
    pattern = ["ok"] * (every - 1) + ["500"]
    queue = (pattern * (per_q // every + 2))[: per_q + per_q // every + 2]
    return script(by_question={q: queue for q in questions})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200_000, help="noop phase: requests (0: skip)")
    ap.add_argument("--duration", type=float, default=7200.0, help="slow phase: seconds (0: skip)")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight, both phases")
    ap.add_argument("--client", default="aiohttp", help="aiohttp (the harness default) | sdk")
    ap.add_argument("--delay", type=float, default=0.5, help="slow phase: seconds per streamed answer")
    ap.add_argument("--fault-every", type=int, default=100, help="slow phase: every k-th answer per "
                    "question is an HTTP 500 (0: none)")
    ap.add_argument("--sample-s", type=float, default=60.0, help="sampling interval (s)")
    ap.add_argument("--rss-bound-mib", type=float, default=32.0, help="allowed RSS growth after the first minute")
    ap.add_argument("--fd-slack", type=int, default=16, help="allowed extra fds / sockets")
    ap.add_argument("--keep", default=None, help="keep the run directories here")
    args = ap.parse_args()

    from fakeserver import FakeServer

    results = []
    tmp_ctx = tempfile.TemporaryDirectory(prefix="soak-")
    tmp = Path(args.keep) if args.keep else Path(tmp_ctx.name)
    tmp.mkdir(parents=True, exist_ok=True)
    print(f"soak: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}, "
          f"psutil {psutil.__version__}; samples every {args.sample_s:g} s")
    if args.requests:
        port = free_port()
        server = subprocess.Popen([PY, str(ROOT / "benchmarks" / "noop_server.py"), str(port)], cwd=ROOT)
        try:
            wait_port(port, server)
            es = expanded_evalset(args.requests, tmp / f"noop-{args.requests}.jsonl")
            print(f"phase noop: {args.requests} requests, concurrency {args.concurrency}, client {args.client}")
            results.append(run_phase("noop", f"http://127.0.0.1:{port}/v1", "noop", es, tmp / "noop-run",
                                     args.concurrency, args.client, None, args.sample_s))
        finally:
            server.terminate()
            server.wait(10)
    if args.duration:
        cap = int(args.concurrency / args.delay * args.duration * 1.3) + args.concurrency
        spec = slow_script(args.fault_every, cap)
        with FakeServer(tmp / "fake", spec, delay_s=args.delay, model="fake-model") as fake:
            es = expanded_evalset(cap, tmp / f"slow-{cap}.jsonl")
            print(f"phase slow: {args.duration:g} s, concurrency {args.concurrency}, {args.delay:g} s per answer, "
                  f"every {args.fault_every}th answer per question HTTP 500, cap {cap} requests")
            results.append(run_phase("slow", fake.url, "fake-model", es, tmp / "slow-run", args.concurrency,
                                     args.client, args.duration, args.sample_s))
    passed = True
    print("\n## Soak results\n")
    for res in results:
        ok, lines = verdict(res, args)
        passed &= ok
        thr = res["summary"]["throughput"]
        print(f"### {res['name']}: {res['summary']['n']} requests in {res['wall_s']:.0f} s "
              f"({thr['req_per_s']:.1f} req/s, concurrency {res['concurrency']}, client {res['client']}, "
              f"{len(res['samples'])} samples) — {'PASS' if ok else 'FAIL'}")
        for x in lines:
            print(f"- {x}")
        print("\n| t (s) | RSS (MiB) | fds | sockets | records |\n|---:|---:|---:|---:|---:|")
        for x in res["samples"]:
            print(f"| {x['t']:.0f} | {x['rss_mib']:.1f} | {x['fds']} | {x['sockets']} | {x['records']} |")
        print()
    print(f"verdict: {'PASS' if passed else 'FAIL'}")
    tmp_ctx.cleanup()
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
