"""Every script in ``benchmarks/`` runs at smoke size (a few requests, one round), so a refactor
that breaks one fails here rather than on the next person to measure something.

Each runs as a user runs it (``python benchmarks/X.py …``, from the project root) and must exit
0 and print its result line(s): a ratio where the benchmark is a side-by-side comparison.  The
figures themselves mean nothing at this size.  Those that need a pulled model (a tokenizer, a
local vLLM) are ``live``, as the other tests that need one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nlq2sql.paths import PROJECT_ROOT

BENCH = PROJECT_ROOT / "benchmarks"
#: The real cache's models (live tests keep it; the tokenizer lives there once pulled).
TOKENIZER = PROJECT_ROOT / ".cache" / "models" / "smollm2-135m"


def bench(script: str, *args: str, timeout: float = 300) -> str:
    res = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=PROJECT_ROOT, capture_output=True,
                         text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    return res.stdout


def ratios(text: str, pattern: str) -> list[float]:
    return [float(x) for x in re.findall(pattern, text, re.M)]


def test_every_benchmark_script_has_a_smoke_test() -> None:
    here = Path(__file__).read_text()
    scripts = sorted(p.name for p in BENCH.glob("*.py") if p.name != "noop_server.py")  # a server, used by others
    assert scripts and all(f'"{s}"' in here for s in scripts), scripts


def test_noop_server_answers_the_canary_as_a_conforming_server() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import noop_server
    finally:
        sys.path.remove(str(BENCH))
    from nlq2sql.run.canary import CANARY_QUESTION, canary_verdict, choice_verdict

    assert CANARY_QUESTION.encode().startswith(noop_server.CANARY_MARK)
    assert canary_verdict(noop_server.CANARY_JSON, "stop", compact=True) is None
    assert choice_verdict(noop_server.CANARY_CHOICE, "stop") is None
    body = json.dumps({"messages": [{"role": "user", "content": CANARY_QUESTION}],
                       "structured_outputs": {"choice": ["red", "green"]}})
    assert b'"content": "red"' in (noop_server.canary_body(body.encode()) or b"")
    body = json.dumps({"messages": [{"role": "user", "content": CANARY_QUESTION}],
                       "structured_outputs": {"json": {"type": "object"}}})
    assert b'"content": "{\\"color\\":\\"red\\"}"' in (noop_server.canary_body(body.encode()) or b"")
    assert noop_server.canary_body(b'{"messages": [{"role": "user", "content": "top regions"}]}') is None


def test_bench_metrics_parse_smoke() -> None:
    out = bench("bench_metrics_parse.py", "--rounds", "1", "--pages", "2")
    assert ratios(out, r"ratio full / line\s+([\d.]+)x"), out


def test_bench_rescore_smoke(tmp_path: Path) -> None:
    out = bench("bench_rescore.py", "--n", "40", "--small", "20", "--cold", "20", "--scale", "0.01", "--rounds", "1",
                "--workdir", str(tmp_path))
    assert ratios(out, r"scoring 40 items takes ([\d.]+)x the wall time"), out
    assert ratios(out, r"side by side in 1 round\(s\): ([\d.]+) "), out


def test_bench_ray_smoke() -> None:
    out = bench("bench_ray.py", "--requests", "16", "--concurrency", "4", "--rounds", "1", "--variants",
                "one process,Ray: 2 actors")
    rows = [ln for ln in out.splitlines() if ln.startswith("| one process") or ln.startswith("| Ray: 2 actors")]
    assert len(rows) == 2 and all(ratios(r, r"\| ([\d.]+) \|") for r in rows), out


def test_bench_startup_smoke() -> None:
    """Both commands, this tree against HEAD's (a temporary git worktree, removed afterwards), one round."""
    worktrees = subprocess.run(["git", "-C", str(PROJECT_ROOT), "worktree", "list"], capture_output=True, text=True)
    out = bench("bench_startup.py", "--baseline", "HEAD", "--smoke")
    rows = re.findall(r"^\| nlq2sql (--help|sql --intent) \| [\d.]+ / [\d.]+ \| [\d.]+ / [\d.]+ \| ([\d.]+)x \| "
                      r"≤ [\d.]+ s \| (?:yes|no) \|$", out, re.M)
    assert [r[0] for r in rows] == ["--help", "sql --intent"] and all(float(r[1]) > 0 for r in rows), out
    after = subprocess.run(["git", "-C", str(PROJECT_ROOT), "worktree", "list"], capture_output=True, text=True)
    assert after.stdout == worktrees.stdout  # the baseline's worktree is gone


def test_soak_smoke() -> None:
    out = bench("soak.py", "--requests", "24", "--duration", "3", "--concurrency", "4", "--delay", "0.2",
                "--sample-s", "1", "--fault-every", "5", "--rss-bound-mib", "4096")  # seconds long: start-up, not drift
    assert "### noop: 24 requests" in out and "### slow:" in out and "verdict: PASS" in out, out


@pytest.mark.live
def test_bench_client_smoke() -> None:
    """The client-ceiling comparison: ours (SDK and aiohttp) and ``vllm bench serve`` against the
    no-op server, whose canary answer lets our run start as it would against vLLM."""
    out = bench("bench_client.py", "--concurrency", "4", "--requests", "12", "--rounds", "1", "--clients",
                "sdk,aiohttp", "--client-cores", ",".join(str(c) for c in sorted(os.sched_getaffinity(0))),
                "--tokenizer", str(TOKENIZER), timeout=600)
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| 4 \| (\w+) \| \d+ \| \d+ \| ([\d.]+) \|", out,
                                                              re.M)}
    assert set(rows) == {"sdk", "aiohttp"} and all(r > 0 for r in rows.values()), out


@pytest.mark.live
def test_bench_schema_smoke() -> None:
    out = bench("bench_schema.py", "--tokenizer", str(TOKENIZER), "--rounds", "1", "--synthetic", "100",
                "--warehouses", "retail")
    assert re.search(r"^retail\s+flat\s+0\s+\d+", out, re.M) and re.search(r"^\s+100\s+\d+\s+\d+$", out, re.M), out


@pytest.mark.live
def test_bench_serve_smoke() -> None:
    """A real local vLLM (the live tests' model): one level, a few requests, one round."""
    out = bench("bench_serve.py", "--concurrency", "1", "--requests", "2", "--rounds", "1", timeout=900)
    assert ratios(out, r"^\| 1 \| 2 \| [\d.]+ \| [\d.]+ \| ([\d.]+) \("), out
