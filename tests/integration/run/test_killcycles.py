"""Crash-safe, resumable runs: SIGKILL at random moments, torn lines, Ctrl-C.

- ≥ 20 seeded cycles: ``nlq2sql eval`` against the fake server is SIGKILLed at a random
  moment, then ``--resume``d (resumes may be killed too) until it completes.  Every item
  ends exactly once, and every record equals an uninterrupted run's except for timings.
- A torn last line (half a record) is cut off on resume and that item redone.
- SIGINT: in-flight requests are cancelled, finished records are on disk, a local server
  we started is stopped, exit code 130; a second SIGINT exits at once.

Each harness process is started in its own session and killed by process group.  The
first kill cycle runs ``python -m nlq2sql.cli`` as a fresh interpreter.  Because the CLI's
imports alone take seconds on a small CI machine, the other cycles fork the *same* CLI
entry point (``nlq2sql.cli.main.app``) from a pre-imported interpreter (a "fork server"):
the killed process is still a separate process running the whole eval command; only the
interpreter start-up is shared.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, free_port, script
from retail import retail_wh

from nlq2sql.paths import PROJECT_ROOT

pytestmark = pytest.mark.slow  # seeded SIGKILL/resume cycles of a whole CLI process: minutes

EVALSET, MODEL, N_ITEMS = "heldout", "fake-model", 12
N_CYCLES, SEED = 20, 20240606
#: Fields that measure time or effort, not results: they may differ between runs.
TIMING_FIELDS = ("latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "chunks",
                 "attempts", "retry_waits_s")

FORK_SERVER = r'''
import io, json, os, select, sys, traceback
import nlq2sql.cli.main as cli
import nlq2sql.run.live, nlq2sql.stages.report, nlq2sql.transport.client, nlq2sql.run.server, rich.progress  # warm
ctl = os.fdopen(os.dup(1), "w", buffering=1)
ctl.write("ready\n")
buf = b""
while True:
    r, _, _ = select.select([0], [], [], 0.01)
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        ctl.write(f"exit {pid} {os.waitstatus_to_exitcode(status)}\n")
    if not r:
        continue
    data = os.read(0, 65536)
    if not data:
        break
    buf += data
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.close(ctl.fileno())
            fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            nul = os.open(os.devnull, os.O_RDONLY)
            os.dup2(nul, 0); os.dup2(fd, 1); os.dup2(fd, 2)
            sys.stdout = open(1, "w", buffering=1, closefd=False)
            sys.stderr = open(2, "w", buffering=1, closefd=False)
            os.environ.update(job.get("env") or {})
            sys.argv = ["nlq2sql", *job["argv"]]
            code = 1
            try:
                cli.app(args=job["argv"], prog_name="nlq2sql")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
        ctl.write(f"pid {pid}\n")
'''


class ForkServer:
    """Spawns CLI runs from one pre-imported interpreter; reports their exit codes."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", FORK_SERVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=PROJECT_ROOT, text=True,
                                     bufsize=1, start_new_session=True)
        self.pids: queue.Queue[int] = queue.Queue()
        self.exits: dict[int, int] = {}
        self.cond = threading.Condition()
        self.lock = threading.Lock()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, pid, *rest = line.split()
            if kind == "pid":
                self.pids.put(int(pid))
            elif kind == "exit":
                with self.cond:
                    self.exits[int(pid)] = int(rest[0])
                    self.cond.notify_all()

    def spawn(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> int:
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"argv": argv, "log": str(log), "env": env}) + "\n")
            self.proc.stdin.flush()
            return self.pids.get(timeout=10)

    def poll(self, pid: int) -> int | None:
        with self.cond:
            return self.exits.get(pid)

    def wait(self, pid: int, timeout: float = 60) -> int:
        with self.cond:
            ok = self.cond.wait_for(lambda: pid in self.exits, timeout=timeout)
            assert ok, f"harness {pid} did not finish within {timeout} s"
            return self.exits[pid]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------

def read_records(out: Path) -> list[dict[str, Any]]:
    """Every complete line of records.jsonl (the file must hold nothing else)."""
    data = (out / "records.jsonl").read_bytes()
    assert data == b"" or data.endswith(b"\n"), "records.jsonl ends in a torn line"
    return [json.loads(line) for line in data.splitlines()]


def line_count(out: Path) -> int:
    try:
        return (out / "records.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def comparable(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in TIMING_FIELDS}


def eval_argv(fake: FakeServer, out: Path, *extra: str) -> list[str]:
    return ["eval", "--evalset", EVALSET, "--endpoint", fake.url, "--model", MODEL,
            "--limit", str(N_ITEMS), "--concurrency", "4", "--out", str(out),
            "--max-failure-rate", "1", *extra]


def mode_flags(out: Path) -> list[str]:
    """--resume where a run was begun (manifest written); --force over an empty start."""
    if (out / "manifest.json").exists():
        return ["--resume"]
    return ["--force"] if out.exists() else []


def alive(pid: int) -> bool:
    """Running (a zombie, or an unknown pid, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill(pid: int) -> None:
    """SIGKILL a harness and its process group (it may not have called setsid yet)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "nlq2sql.cli", *args]


@pytest.fixture(scope="module")
def env(cache_root: Path, small_warehouse: Path) -> dict[str, str]:
    return dict(os.environ, NLQ2SQL_CACHE_DIR=str(cache_root), PYTHONUNBUFFERED="1")


@pytest.fixture(scope="module")
def forks(env: dict[str, str]) -> Iterator[ForkServer]:
    fs = ForkServer(env)
    yield fs
    fs.close()


@pytest.fixture(scope="module")
def slow_fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    """Deterministic answers with a per-request delay, so kills land mid-run."""
    with FakeServer(tmp_path_factory.mktemp("fake"), script(), model=MODEL, delay_s=0.1) as fake:
        yield fake


@pytest.fixture(scope="module")
def reference(forks: ForkServer, slow_fake: FakeServer,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """An uninterrupted run's records, by id."""
    out = tmp_path_factory.mktemp("reference") / "run"
    code = forks.wait(forks.spawn(eval_argv(slow_fake, out), out.parent / "log.txt"))
    assert code == 0, (out.parent / "log.txt").read_text()
    recs = read_records(out)
    assert len(recs) == N_ITEMS and all(r["outcome"] == "ok" for r in recs)
    return {r["id"]: r for r in recs}


def assert_matches_reference(out: Path, reference: dict[str, dict[str, Any]]) -> None:
    recs = read_records(out)
    ids = [r["id"] for r in recs]
    assert len(ids) == len(set(ids)), f"duplicated: {sorted({i for i in ids if ids.count(i) > 1})}"
    assert set(ids) == set(reference), f"lost: {sorted(set(reference) - set(ids))}"
    for r in recs:
        assert comparable(r) == comparable(reference[r["id"]]), r["id"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == N_ITEMS and summary["outcomes"] == {"ok": N_ITEMS}


# ---------------------------------------------------------------------------------------
# SIGKILL cycles
# ---------------------------------------------------------------------------------------

def test_sigkill_then_resume_real_interpreter(env: dict[str, str], forks: ForkServer,
                                              slow_fake: FakeServer,
                                              reference: dict[str, dict[str, Any]],
                                              tmp_path: Path) -> None:
    """One cycle with a fresh ``python -m nlq2sql.cli`` process: killed mid-run, resumed."""
    out = tmp_path / "run"
    proc = subprocess.Popen(cli(*eval_argv(slow_fake, out)), env=env, cwd=PROJECT_ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while line_count(out) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert 3 <= line_count(out) < N_ITEMS, "the kill did not land mid-run"
    log = tmp_path / "resume.log"
    assert forks.wait(forks.spawn(eval_argv(slow_fake, out, "--resume"), log)) == 0, log.read_text()
    assert_matches_reference(out, reference)


def _cycle(i: int, forks: ForkServer, fake: FakeServer, root: Path,
           stats: dict[str, list[int]]) -> None:
    rng = random.Random(SEED + i)
    out = root / f"cycle{i:02d}" / "run"
    out.parent.mkdir(parents=True)
    log = out.parent / "log.txt"
    killed_once = False
    for attempt in range(12):
        pid = forks.spawn(eval_argv(fake, out, *mode_flags(out)), log)
        # every cycle is killed at least once: a first run that finished before its kill
        # landed (a random moment after a fast run) starts the cycle over
        do_kill = not killed_once or (attempt < 4 and rng.random() < 0.4)
        if do_kill:
            if rng.random() < 0.3:  # a random moment, possibly during start-up or scoring
                time.sleep(rng.uniform(0.0, 1.5))
            else:  # after a random number of *further* records, plus a random sliver
                on_disk = line_count(out)  # a resumed run starts from its records
                target = rng.randint(min(on_disk, N_ITEMS - 1), N_ITEMS - 1)
                t_end = time.monotonic() + 30
                while (line_count(out) < target and forks.poll(pid) is None
                       and time.monotonic() < t_end):
                    time.sleep(0.005)
                time.sleep(rng.uniform(0.0, 0.12))
            if forks.poll(pid) is None:
                kill(pid)
        code = forks.wait(pid)
        if code == -signal.SIGKILL:
            stats["kills_at_line"].append(line_count(out))
            killed_once = True
            continue
        assert code == 0, log.read_text()
        if not killed_once:
            shutil.rmtree(out, ignore_errors=True)
            continue
        stats["runs_to_finish"].append(attempt + 1)
        return
    raise AssertionError(f"cycle {i} did not finish")


def test_sigkill_cycles_every_item_exactly_once(forks: ForkServer, slow_fake: FakeServer,
                                                reference: dict[str, dict[str, Any]],
                                                tmp_path: Path) -> None:
    stats: dict[str, list[int]] = {"kills_at_line": [], "runs_to_finish": []}
    errors: list[BaseException] = []
    pending = list(range(N_CYCLES))
    guard = threading.Lock()

    def worker() -> None:  # two cycles at a time: they share the fork server and fake
        while True:
            with guard:
                if not pending:
                    return
                i = pending.pop(0)
            try:
                _cycle(i, forks, slow_fake, tmp_path, stats)
            except BaseException as exc:  # noqa: BLE001 — re-raised below
                errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]

    lost = duplicated = 0
    for i in range(N_CYCLES):
        out = tmp_path / f"cycle{i:02d}" / "run"
        ids = [r["id"] for r in read_records(out)]
        lost += len(set(reference) - set(ids))
        duplicated += len(ids) - len(set(ids))
        assert_matches_reference(out, reference)
    kills = stats["kills_at_line"]
    mid_run = sum(0 < k < N_ITEMS for k in kills)
    print(f"\nkill cycles: {N_CYCLES} cycles, {len(kills)} SIGKILLs ({mid_run} mid-run, records "
          f"on disk at kill: {sorted(kills)}); items lost {lost}, duplicated {duplicated}")
    # kills before the first record or after the last (records land in batches, so a late
    # target often meets scoring) are real cases too; 8 between records (13-15 seen) keeps
    # the test about mid-run kills without hanging on one machine's timing
    assert len(kills) >= 20 and mid_run >= 8
    assert lost == 0 and duplicated == 0


def test_torn_last_line_is_cut_and_redone(forks: ForkServer, slow_fake: FakeServer,
                                          reference: dict[str, dict[str, Any]],
                                          tmp_path: Path) -> None:
    out = tmp_path / "run"
    log = tmp_path / "log.txt"
    assert forks.wait(forks.spawn(eval_argv(slow_fake, out), log)) == 0, log.read_text()
    lines = (out / "records.jsonl").read_bytes().splitlines(keepends=True)
    # The writer died in the middle of the 12th record: 11 whole lines, half of one more.
    torn = lines[11][: len(lines[11]) // 2]
    (out / "records.jsonl").write_bytes(b"".join(lines[:11]) + torn)
    assert forks.wait(forks.spawn(eval_argv(slow_fake, out, "--resume"), log)) == 0, log.read_text()
    assert_matches_reference(out, reference)
    # A whole-looking but unparsable last line is torn as well.
    lines = (out / "records.jsonl").read_bytes().splitlines(keepends=True)
    (out / "records.jsonl").write_bytes(b"".join(lines[:-2]) + lines[-2][:40] + b"\n")
    assert forks.wait(forks.spawn(eval_argv(slow_fake, out, "--resume"), log)) == 0, log.read_text()
    assert_matches_reference(out, reference)


# ---------------------------------------------------------------------------------------
# Ctrl-C, against a *local* server we start (the fake, in vLLM's place)
# ---------------------------------------------------------------------------------------

def local_server(tmp_path: Path, *, ignore_sigterm: bool,
                 delay_s: float = 0.25) -> tuple[dict[str, str], Path, Path]:
    """Env that makes LocalServer start the fake server; returns (env, model dir, pid file)."""
    model = tmp_path / "fakemodel"
    model.mkdir()
    (model / "config.json").write_text("{}")
    pid_file = tmp_path / "server.pid"
    wrapper = tmp_path / "fake-vllm-python"
    flags = f"--pid-file {pid_file} --delay {delay_s} --log {tmp_path / 'server-log.jsonl'}"
    if ignore_sigterm:
        flags += " --ignore-sigterm"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {PROJECT_ROOT / 'tests' / 'fakeserver.py'}"
                       f" {flags} \"$@\"\n")
    wrapper.chmod(0o755)
    return {"NLQ2SQL_VLLM_PYTHON": str(wrapper)}, model, pid_file


def start_local_eval(env: dict[str, str], extra_env: dict[str, str], model: Path, out: Path,
                     tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cli("eval", "--evalset", EVALSET, "--model", str(model), "--limit", "24",
            "--concurrency", "2", "--out", str(out), "--max-failure-rate", "1"),
        env={**env, **extra_env}, cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_lines(proc: subprocess.Popen[str], out: Path, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while line_count(out) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no records appeared"
        time.sleep(0.01)


def test_sigint_cancels_flushes_stops_server_exit_130(env: dict[str, str], forks: ForkServer,
                                                      tmp_path: Path) -> None:
    extra, model, pid_file = local_server(tmp_path, ignore_sigterm=False)
    out = tmp_path / "run"
    proc = start_local_eval(env, extra, model, out, tmp_path)
    wait_lines(proc, out, 2)
    server_pid = int(pid_file.read_text())
    before = line_count(out)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    took = time.monotonic() - t0
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    assert took < 10, took
    # Every finished record is on disk, whole; nothing was written for cancelled items.
    recs = read_records(out)
    assert before <= len(recs) < 24 and len({r["id"] for r in recs}) == len(recs)
    assert not alive(server_pid), "the local server we started is still running"
    # The interrupted run resumes to completion.
    code = forks.wait(forks.spawn(
        ["eval", "--evalset", EVALSET, "--model", str(model), "--limit", "24", "--concurrency", "4",
         "--out", str(out), "--max-failure-rate", "1", "--resume"], tmp_path / "resume.log",
        env=extra), timeout=120)
    assert code == 0, (tmp_path / "resume.log").read_text()
    ids = [r["id"] for r in read_records(out)]
    assert len(ids) == 24 == len(set(ids))


def server_log(tmp_path: Path) -> list[dict[str, Any]]:
    """What the local fake server has logged so far (one entry per event, in order)."""
    log = tmp_path / "server-log.jsonl"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def chat_arrivals(tmp_path: Path) -> list[int]:
    """The request numbers the fake server has seen arrive (it notes each on arrival)."""
    return [int(r["n"]) for r in server_log(tmp_path) if r["path"] == "/v1/chat/completions"]


def test_second_sigint_exits_at_once(env: dict[str, str], tmp_path: Path) -> None:
    # A server that ignores SIGTERM keeps the first Ctrl-C's clean-up waiting (up to 15 s).
    # Each request takes the server 3 s, so one sent after the first two is surely still in
    # flight when Ctrl-C comes: on a busy machine the harness's own work between requests
    # can outlast a short request, and then nothing would be in flight to cancel.
    extra, model, pid_file = local_server(tmp_path, ignore_sigterm=True, delay_s=3.0)
    out = tmp_path / "run"
    proc = start_local_eval(env, extra, model, out, tmp_path)
    wait_lines(proc, out, 1)
    deadline = time.monotonic() + 30
    while max(chat_arrivals(tmp_path), default=0) < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no third request reached the server"
        time.sleep(0.01)
    server_pid = int(pid_file.read_text())
    os.kill(proc.pid, signal.SIGINT)
    # The first Ctrl-C cancels the requests in flight: the server sees the clients go (on a
    # busy machine it may take it a few seconds to notice; the clean-up waits up to 15 s).
    deadline = time.monotonic() + 10
    cancelled = False
    while not cancelled and time.monotonic() < deadline:
        time.sleep(0.2)
        cancelled = any(e["path"] == "(cancelled)" for e in server_log(tmp_path))
    assert cancelled
    assert proc.poll() is None  # still stopping the server, gracefully
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=10)
    took = time.monotonic() - t0
    assert proc.returncode == 130, stderr
    assert took < 2.0, took
    assert "exiting now" in stderr and "Traceback" not in stderr
    deadline = time.monotonic() + 5
    while alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(server_pid), "the local server outlived the second Ctrl-C"
    recs = read_records(out)
    assert len(recs) >= 1 and len({r["id"] for r in recs}) == len(recs)


# ---------------------------------------------------------------------------------------
# Resume equals uninterrupted, retries included
# ---------------------------------------------------------------------------------------

#: Record fields that measure time (the number of waits is compared, not their jittered lengths).
CLOCK_FIELDS = ("latency_s", "ttft_s", "itl_mean_s", "itl_max_s", "started", "retry_waits_s")
BUDGET_SEED = 1306


def _faulty_schedule() -> dict[str, Any]:
    """Per item, what each *session's* requests for it get: the schedule is deterministic
    because every session starts a fresh fake server with this same script.

    At the default budget (0.2 × 12 items = 2 retries for the whole run, concurrency 1):
    item 3 fails once (retry 1 of 2); item 7 fails twice (retry 2 of 2, then the budget is
    spent: ``http_5xx`` after 2 attempts); item 10 fails once (budget spent: 1 attempt).
    """
    from fakeserver import by_ids

    from nlq2sql.stages.evalset import load_evalset

    ids = [c.id for c in load_evalset(EVALSET, retail_wh()).cases]
    return script(by_question=by_ids(EVALSET, {ids[2]: ["500"], ids[6]: ["500", "500"],
                                                ids[9]: ["500"]}))


def _budget_session(forks: ForkServer, root: Path, port: int, out: Path, log: Path,
                    kill_after: int | None) -> int | None:
    """One harness session against a fresh fault server; SIGKILLed after ``kill_after``
    records (plus a sliver) when given.  Returns the records on disk at the kill (None: the
    run finished before the kill landed)."""
    fake = FakeServer(root, _faulty_schedule(), model=MODEL, delay_s=0.05, port=port,
                      bind_retry_s=10)
    fake.start()
    try:
        pid = forks.spawn(eval_argv(fake, out, "--concurrency", "1", *mode_flags(out)), log)
        if kill_after is None:
            assert forks.wait(pid, timeout=120) == 0, log.read_text()
            return None
        t_end = time.monotonic() + 60
        while line_count(out) < kill_after and forks.poll(pid) is None and time.monotonic() < t_end:
            time.sleep(0.005)
        time.sleep(random.Random(BUDGET_SEED + kill_after).uniform(0.0, 0.08))
        if forks.poll(pid) is None:
            kill(pid)
        code = forks.wait(pid)
        if code == 0:
            return None
        assert code == -signal.SIGKILL, f"exit {code}: {log.read_text()}"
        return line_count(out)
    finally:
        fake.kill()


def test_resume_equals_uninterrupted_with_retries(forks: ForkServer, tmp_path: Path) -> None:
    """Killed at seeded points and resumed, a run whose retry budget runs out mid-run ends
    with exactly the records (every field but clock readings) and retry count of an
    uninterrupted run on the same fault schedule.  Before the budget was kept for the whole
    run, a resumed session got a fresh budget sized to the items left, so item 10 (killed
    after item 7 spent the budget) was retried and ended ``ok`` instead of ``http_5xx``."""
    port = free_port()
    ref_out = tmp_path / "reference" / "run"
    _budget_session(forks, tmp_path / "fake", port, ref_out, tmp_path / "reference.log", None)
    reference = {r["id"]: r for r in read_records(ref_out)}
    ref_summary = json.loads((ref_out / "summary.json").read_text())
    outcomes = [reference[i]["outcome"] for i in sorted(reference)]
    attempts = [reference[i]["attempts"] for i in sorted(reference)]
    assert attempts == [1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1], attempts
    assert outcomes.count("http_5xx") == 2 and ref_summary["retries_used"] == 2
    assert "retry budget exhausted" in reference[sorted(reference)[9]]["error"]

    rng = random.Random(BUDGET_SEED)
    plans = [[k] for k in sorted(rng.sample(range(1, N_ITEMS), 5))] + [sorted(rng.sample(range(1, N_ITEMS), 2))]
    landed: list[list[int]] = []
    for n, plan in enumerate(plans):
        out = tmp_path / f"kills{n}" / "run"
        log = out.parent.with_suffix(".log")
        out.parent.mkdir(parents=True)
        at: list[int] = []
        for k in plan:
            if line_count(out) < k:
                got = _budget_session(forks, tmp_path / "fake", port, out, log, k)
                if got is not None:
                    at.append(got)
        _budget_session(forks, tmp_path / "fake", port, out, log, None)
        landed.append(at)
    print(f"\nresume = uninterrupted: kill plans {plans}, records on disk at each kill {landed}")
    for n, at in enumerate(landed):
        out = tmp_path / f"kills{n}" / "run"
        recs = read_records(out)
        assert sorted(r["id"] for r in recs) == sorted(reference), f"killed at {at}: items lost or duplicated"
        for r in recs:
            ref = reference[r["id"]]
            mine = {k: v for k, v in r.items() if k not in CLOCK_FIELDS}
            theirs = {k: v for k, v in ref.items() if k not in CLOCK_FIELDS}
            assert mine == theirs, f"killed at {at} records, resumed: {r['id']} differs"
            assert len(r["retry_waits_s"]) == len(ref["retry_waits_s"]), (at, r["id"])
    for n, at in enumerate(landed):
        summary = json.loads((tmp_path / f"kills{n}" / "run" / "summary.json").read_text())
        for key in ("n", "outcomes", "errors_by_class", "status_counts", "retries_used", "retry_budget"):
            assert summary.get(key) == ref_summary.get(key), (at, key)
    # The seeded points cover kills before any retry, and after the budget was spent.
    flat = [k for at in landed for k in at]
    assert len(flat) >= 5 and min(flat) < 3 and any(7 <= k <= 9 for k in flat), landed


# ---------------------------------------------------------------------------------------
# Driver SIGKILLed with --workers 2 / --engine ray, resumed at once
# ---------------------------------------------------------------------------------------

#: Records on disk when the driver is killed (0: as soon as it started, before any worker is up).
DRIVER_KILL_POINTS = (0, 4, 9)


@pytest.fixture(scope="module")
def slower_fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    """0.4 s per answer: 12 items at concurrency 4 take three rounds, so kills land mid-run."""
    with FakeServer(tmp_path_factory.mktemp("fake-slower"), script(), model=MODEL, delay_s=0.4) as fake:
        yield fake


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_driver_sigkill_then_immediate_resume_with_workers(engine: str, forks: ForkServer, slower_fake: FakeServer,
                                                           reference: dict[str, dict[str, Any]],
                                                           tmp_path: Path) -> None:
    """Issue 27: the driver of a ``--workers 2`` run (worker processes, or Ray actors) is
    SIGKILLed -- the driver alone: its workers must stop by themselves -- at several points,
    the first as soon as it started, and ``--resume`` is started the moment it is dead (no
    grace for stragglers).  The run ends with every item once and the records of an
    uninterrupted run."""
    if engine == "ray":
        pytest.importorskip("ray")
    landed = []
    for k in DRIVER_KILL_POINTS:
        out = tmp_path / f"kill{k}" / "run"
        out.parent.mkdir()
        log = out.parent / "log.txt"
        flags = ["--workers", "2", "--engine", engine]
        pid = forks.spawn(eval_argv(slower_fake, out, *flags), log)
        try:
            t_end = time.monotonic() + 120
            while line_count(out) < k and forks.poll(pid) is None and time.monotonic() < t_end:
                time.sleep(0.005)
            os.kill(pid, signal.SIGKILL)  # the driver only
            code = forks.wait(pid)
            assert code == -signal.SIGKILL, f"exit {code} before the kill: {log.read_text()}"
            landed.append(line_count(out))
            # At once: no wait for the dead driver's workers.
            code = forks.wait(forks.spawn(eval_argv(slower_fake, out, *flags, *mode_flags(out)), log), timeout=300)
            assert code == 0, log.read_text()[-3000:]
        finally:
            with contextlib.suppress(ProcessLookupError):  # what the driver left in its group (Ray's agents)
                os.killpg(pid, signal.SIGKILL)
        assert_matches_reference(out, reference)
    print(f"\n{engine}: driver killed with {landed} records on disk, resumed at once: records = uninterrupted")
    assert landed[0] == 0 and any(0 < k < N_ITEMS for k in landed), landed
