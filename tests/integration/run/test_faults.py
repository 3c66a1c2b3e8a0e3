"""The fault matrix: every fault the fake server can script, driven through ``run_eval``.

For each fault the run completes; every item has exactly one record with a classified
outcome (one of ``client.OUTCOMES``); the summary counts outcomes by class; retryable
faults are retried with exponential backoff + jitter, honour ``Retry-After`` and stay within
the per-run retry budget (total requests ≤ items × (1 + budget)); non-retryable ones are
not retried.  The fake has no ``/metrics``, so the summary must say "not observed".
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakeserver import FakeServer, by_ids, script
from retail import retail_wh
from typer.testing import CliRunner

from nlq2sql.cli.main import app
from nlq2sql.records.store import iter_records
from nlq2sql.run.config import EvalConfig, LoadShape
from nlq2sql.run.live import run_eval
from nlq2sql.stages.evalset import load_evalset
from nlq2sql.transport.client import OUTCOMES

EVALSET = "heldout"
MODEL = "fake-model"
MAX_ATTEMPTS = 4  # client.EndpointConfig default
IDS = [c.id for c in load_evalset(EVALSET, retail_wh()).cases]
QUESTION = {c.id: c.question for c in load_evalset(EVALSET, retail_wh()).cases}


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[list[FakeServer]]:
    """Fake servers a test starts; all are stopped afterwards."""
    started: list[FakeServer] = []
    yield started
    for f in started:
        f.kill()


def start(fakes: list[FakeServer], tmp_path: Path, behaviours: dict[str, list[Any]] | None = None,
          **kw: Any) -> FakeServer:
    spec = kw.pop("spec", None) or script(by_question=by_ids(EVALSET, behaviours or {}))
    fake = FakeServer(tmp_path / "fake", spec, model=MODEL, **kw)
    fakes.append(fake)
    return fake.start()


@pytest.fixture(params=["sdk", "aiohttp"])
def client(request: pytest.FixtureRequest) -> str:
    """Every fault runs through both transports: outcomes must not depend on the client."""
    return str(request.param)


def evaluate(fake: FakeServer, tmp_path: Path, n: int, **kw: Any
             ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    cfg = EvalConfig(evalset=EVALSET, out=tmp_path / "run", endpoint=fake.url, model=MODEL,
                     limit=n, concurrency=kw.pop("concurrency", 3), timeout_s=kw.pop("timeout_s", 10.0),
                     retry_budget=kw.pop("retry_budget", 1.0), load=LoadShape(metrics_interval_s=0.05), **kw)
    summary = run_eval(cfg).to_json()
    recs = list(iter_records(cfg.out / "records.jsonl"))
    ids = [r["id"] for r in recs]
    # Exactly one record per item, each with a classified outcome.
    assert sorted(ids) == sorted(IDS[:n]), ids
    assert all(r["outcome"] in OUTCOMES for r in recs), [r["outcome"] for r in recs]
    # The summary counts outcomes by class, agreeing with the records.
    counts = Counter(r["outcome"] for r in recs)
    assert summary["outcomes"] == dict(counts)
    assert summary["errors_by_class"] == {k: v for k, v in counts.items() if k != "ok"}
    assert summary["n"] == n
    # No /metrics on the fake: reported as not observed, never as zero.
    sm = summary["server_metrics"]
    assert sm["observed"] is False and "not observed" in sm["note"], sm
    return summary, {r["id"]: r for r in recs}


def budget_bound(n: int, fraction: float) -> int:
    """items × (1 + budget), as client.RetryBudget counts it."""
    return n + (max(1, int(n * fraction)) if fraction > 0 else 0)


def requests_for(fake: FakeServer, item: str) -> list[dict[str, Any]]:
    return [e for e in fake.chat_requests() if e["question"] == QUESTION[item]]


def assert_backoff(waits: list[float]) -> None:
    """Exponential backoff with jitter: wait k ≥ 0.5·2^(k-1) × 0.5 (the jitter's floor)."""
    for k, w in enumerate(waits, start=1):
        assert w >= 0.25 * 2 ** (k - 1) - 1e-3, waits


# ---------------------------------------------------------------------------------------
# Retryable faults: 429, 500, 503, connection reset mid-stream, hang past the timeout
# ---------------------------------------------------------------------------------------

RETRYABLE = [
    pytest.param({"kind": "status", "status": 429, "retry_after": 1}, "http_429", 429, id="429-retry-after"),
    pytest.param("500", "http_5xx", 500, id="500"),
    pytest.param("503", "http_5xx", 503, id="503"),
    pytest.param("reset", ("stream_error", "connection_error"), None, id="reset-mid-stream"),
    pytest.param({"kind": "hang", "seconds": 30}, "timeout", None, id="hang-no-bytes"),
]


@pytest.mark.parametrize(("fault", "outcome", "status"), RETRYABLE)
def test_retryable_fault(fault: Any, outcome: Any, status: int | None, tmp_path: Path, client: str,
                         fakes: list[FakeServer]) -> None:
    # ho-001 fails on every attempt; ho-002 fails once and recovers; the rest are fine.
    n, fraction = 5, 1.0
    fake = start(fakes, tmp_path, {"ho-001": [fault] * MAX_ATTEMPTS, "ho-002": [fault]})
    hang = outcome == "timeout"
    t0 = time.monotonic()
    summary, recs = evaluate(fake, tmp_path, n, retry_budget=fraction, timeout_s=0.5 if hang else 5.0,
                             client=client)
    assert time.monotonic() - t0 < 30

    failed, recovered = recs["ho-001"], recs["ho-002"]
    outcomes = outcome if isinstance(outcome, tuple) else (outcome,)
    assert failed["outcome"] in outcomes, failed
    assert OUTCOMES[failed["outcome"]] is True  # a retryable class
    assert failed["http_status"] == status
    assert failed["attempts"] == MAX_ATTEMPTS and len(failed["retry_waits_s"]) == MAX_ATTEMPTS - 1
    assert failed["status"] == "request_error" and failed["error"]
    assert_backoff(failed["retry_waits_s"])
    assert recovered["outcome"] == "ok" and recovered["status"] == "ok"
    assert recovered["attempts"] == 2 and len(recovered["retry_waits_s"]) == 1
    assert all(recs[i]["attempts"] == 1 for i in IDS[2:n])
    assert summary["errors_by_class"] == {failed["outcome"]: 1}
    assert summary["retries_used"] == MAX_ATTEMPTS

    # The server saw exactly the attempts recorded, and no more than the budget allows.
    seen = fake.chat_requests()
    assert len(seen) == sum(r["attempts"] for r in recs.values()) <= budget_bound(n, fraction)
    assert len(requests_for(fake, "ho-001")) == MAX_ATTEMPTS

    if status == 429:  # Retry-After: 1 is honoured, as recorded and as the server saw it
        assert all(w >= 1.0 for w in failed["retry_waits_s"]), failed["retry_waits_s"]
        assert recovered["retry_waits_s"][0] >= 1.0
        times = [e["t"] for e in requests_for(fake, "ho-001")]
        assert all(b - a >= 1.0 for a, b in zip(times, times[1:], strict=False)), times


def test_retry_budget_stops_a_storm(tmp_path: Path, client: str, fakes: list[FakeServer]) -> None:
    """A server failing every request gets at most items × (1 + budget) requests."""
    n, fraction = 10, 0.2
    fake = start(fakes, tmp_path, spec=script(default="503"))
    summary, recs = evaluate(fake, tmp_path, n, retry_budget=fraction, client=client)
    assert summary["errors_by_class"] == {"http_5xx": n}
    total = len(fake.chat_requests())
    assert total == sum(r["attempts"] for r in recs.values()) == budget_bound(n, fraction) == 12
    assert summary["retries_used"] == 2
    assert sum("retry budget exhausted" in r["error"] for r in recs.values()) >= n - 2


# ---------------------------------------------------------------------------------------
# Non-retryable faults: malformed body, schema-invalid content, length, context overflow
# ---------------------------------------------------------------------------------------

NON_RETRYABLE = [
    # fault, outcome, item status, HTTP status, finish_reason
    pytest.param("malformed", "malformed_response", "request_error", None, None, id="malformed-body"),
    # HTTP 200 bodies that are not SSE at all: the same class, through both clients.
    pytest.param("garbage", "malformed_response", "request_error", None, None, id="garbage-body-200"),
    pytest.param("html", "malformed_response", "request_error", None, None, id="html-page-200"),
    pytest.param("schema_invalid", "ok", "schema_invalid", 200, "stop", id="schema-invalid-json"),
    pytest.param("length", "ok", "truncated", 200, "length", id="finish-length"),
    pytest.param("context_overflow", "context_overflow", "request_error", 400, None,
                 id="400-context-overflow"),
]


@pytest.mark.parametrize(("fault", "outcome", "status", "http", "finish"), NON_RETRYABLE)
def test_non_retryable_fault(fault: str, outcome: str, status: str, http: int | None,
                             finish: str | None, tmp_path: Path, client: str, fakes: list[FakeServer]) -> None:
    n = 4
    fake = start(fakes, tmp_path, {"ho-001": [fault] * MAX_ATTEMPTS, "ho-002": [fault] * MAX_ATTEMPTS})
    summary, recs = evaluate(fake, tmp_path, n, client=client)
    for item in ("ho-001", "ho-002"):
        rec = recs[item]
        assert rec["outcome"] == outcome and rec["status"] == status, rec
        assert rec["http_status"] == http and rec["finish_reason"] == finish
        assert rec["attempts"] == 1 and rec["retry_waits_s"] == []  # not retried
        assert len(requests_for(fake, item)) == 1
        assert rec["sql"] is None and rec["correct_raw"] is False
    assert OUTCOMES[outcome] is False
    assert summary["retries_used"] == 0
    assert len(fake.chat_requests()) == n
    assert summary["status_counts"][status] == 2
    if fault == "context_overflow":
        assert "maximum context length" in recs["ho-001"]["error"]
    if fault in ("garbage", "html"):
        assert "not an event stream" in recs["ho-001"]["error"], recs["ho-001"]["error"]


# ---------------------------------------------------------------------------------------
# The server process killed mid-run; and killed, then restarted on the same port
# ---------------------------------------------------------------------------------------

def test_server_killed_mid_run(tmp_path: Path, client: str, fakes: list[FakeServer]) -> None:
    n, fraction = 8, 0.5
    fake = start(fakes, tmp_path, {"ho-004": ["die"]}, delay_s=0.05)
    summary, recs = evaluate(fake, tmp_path, n, concurrency=2, retry_budget=fraction, client=client)
    assert fake.proc is not None and fake.proc.poll() is not None  # it really died
    outcomes = Counter(r["outcome"] for r in recs.values())
    assert recs["ho-004"]["outcome"] in ("stream_error", "connection_error")
    assert outcomes["ok"] >= 2  # finished before the kill, kept
    assert set(outcomes) <= {"ok", "stream_error", "connection_error"}, outcomes
    assert all(OUTCOMES[o] for o in outcomes if o != "ok")
    # No storm against a dead server: attempts stay within the budget.
    assert sum(r["attempts"] for r in recs.values()) <= budget_bound(n, fraction)
    assert summary["retries_used"] == max(1, int(n * fraction))


def test_server_killed_then_restarted(tmp_path: Path, client: str, fakes: list[FakeServer]) -> None:
    n, fraction = 8, 1.0
    first = start(fakes, tmp_path, {"ho-004": ["die"]}, delay_s=0.05)
    # A standby process on the same port binds as soon as the first one is gone.
    standby = FakeServer(tmp_path / "fake", script(), model=MODEL, port=first.port, log=first.log,
                         bind_retry_s=60, delay_s=0.05)
    fakes.append(standby)
    standby.start(wait=False)
    summary, recs = evaluate(fake=first, tmp_path=tmp_path, n=n, concurrency=2, retry_budget=fraction,
                             client=client)
    assert first.proc is not None and first.proc.poll() is not None
    assert standby.listening()
    pids = {e["pid"] for e in first.chat_requests()}
    assert pids == {first.proc.pid, standby.proc.pid}  # type: ignore[union-attr]
    # The run rode out the restart: every item ended ok, the killed one after a retry.
    assert summary["outcomes"] == {"ok": n}, {i: r["error"] for i, r in recs.items()}
    assert recs["ho-004"]["attempts"] >= 2
    assert sum(r["attempts"] for r in recs.values()) <= budget_bound(n, fraction)


# ---------------------------------------------------------------------------------------
# --max-failure-rate sets the CLI's exit code
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("rate", "code"), [("0.5", 0), ("0.2", 1)])
def test_max_failure_rate_sets_exit_code(rate: str, code: int, tmp_path: Path,
                                         fakes: list[FakeServer]) -> None:
    fake = start(fakes, tmp_path, {"ho-001": ["context_overflow"], "ho-003": ["context_overflow"]})
    out = tmp_path / "cli-run"
    result = CliRunner().invoke(app, [
        "eval", "--evalset", EVALSET, "--endpoint", fake.url, "--model", MODEL, "--limit", "5",
        "--concurrency", "2", "--out", str(out), "--max-failure-rate", rate])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    if code == 1:
        assert "2/5 items failed" in result.output
    assert len(list(iter_records(out / "records.jsonl"))) == 5
