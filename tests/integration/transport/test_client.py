"""Client retry rules that a scripted server cannot trigger on demand (a stale pooled connection)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx
import openai
import pytest
from retail import RETAIL

from nlq2sql.answers.kinds import bind_sampling
from nlq2sql.transport.client import (
    KEEPALIVE_S,
    EndpointConfig,
    RetryBudget,
    Sampling,
    _limits,
    complete,
)


def _stale_error() -> openai.APIConnectionError:
    req = httpx.Request("POST", "http://x/v1/chat/completions")
    try:
        try:
            raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")
        except aiohttp.ClientConnectionResetError as inner:
            raise httpx.ConnectTimeout("Cannot write to closing transport") from inner
    except httpx.ConnectTimeout as mid:
        err = openai.APITimeoutError(request=req)
        err.__cause__ = mid
        return err


class _Stream:
    def __init__(self) -> None:
        delta = SimpleNamespace(content='{"a":1}')
        self._chunks = [SimpleNamespace(usage=None, choices=[SimpleNamespace(delta=delta, finish_reason="stop")])]

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> Any:
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop(0)

    async def close(self) -> None:
        return None


class _Client:
    """Fails the first ``fails`` calls the way a closing keep-alive connection does."""

    def __init__(self, fails: int) -> None:
        self.fails, self.calls = fails, 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    async def _create(self, **_: Any) -> _Stream:
        self.calls += 1
        if self.calls <= self.fails:
            raise _stale_error()
        return _Stream()


def _run(client: _Client, budget: RetryBudget) -> Any:
    cfg = EndpointConfig(base_url="http://x/v1", model="m", max_attempts=2)
    return asyncio.run(complete(client, cfg, [{"role": "user", "content": "q"}],  # type: ignore[arg-type]
                                bind_sampling(Sampling(), RETAIL), budget))


def test_keepalive_below_vllm_default() -> None:
    assert _limits(8).keepalive_expiry == KEEPALIVE_S < 5.0


def test_unsent_request_is_resent_without_spending_budget() -> None:
    budget = RetryBudget(1, 0.0)
    client = _Client(fails=1)
    out = _run(client, budget)
    assert out.outcome == "ok" and out.text == '{"a":1}'
    assert client.calls == 2 and out.unsent_retries == 1 and out.attempts == 1
    assert budget.used == 0


def test_unsent_resend_happens_once_then_counts_as_retry() -> None:
    budget = RetryBudget(10, 1.0)
    client = _Client(fails=3)
    out = _run(client, budget)
    assert out.outcome == "connection_error" and client.calls == 3
    assert out.unsent_retries == 1 and budget.used == 1


@pytest.mark.parametrize("fails", [0])
def test_no_resend_when_healthy(fails: int) -> None:
    client = _Client(fails=fails)
    out = _run(client, RetryBudget(1, 0.0))
    assert out.outcome == "ok" and client.calls == 1 and out.unsent_retries == 0


def test_sdk_and_aiohttp_clients_send_the_same_body_and_record_the_same(tmp_path: Path) -> None:
    """The aiohttp client is a transport choice only: same JSON on the wire, same records."""
    import json

    from fakeserver import FakeServer, by_ids, script

    from nlq2sql.records.store import iter_records
    from nlq2sql.run.config import EvalConfig, LoadShape
    from nlq2sql.run.live import run_eval

    log = tmp_path / "requests.jsonl"
    with FakeServer(tmp_path / "fake", script(by_question=by_ids("heldout", {})), model="m", log=log) as fake:
        recs = {}
        for client in ("sdk", "aiohttp"):
            out = tmp_path / client
            run_eval(EvalConfig(evalset="heldout", out=out, endpoint=fake.url, model="m", limit=6,
                                concurrency=3, client=client, load=LoadShape(metrics_interval_s=0.05)))
            recs[client] = {r["id"]: r for r in iter_records(out / "records.jsonl")}
            assert json.loads((out / "manifest.json").read_text())["client"] == client
    keep = ("outcome", "status", "raw_text", "finish_reason", "completion_tokens", "prompt_tokens", "correct_final")
    for rid, r in recs["sdk"].items():
        assert {k: r.get(k) for k in keep} == {k: recs["aiohttp"][rid].get(k) for k in keep}
    bodies: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        e = json.loads(line)
        if e.get("path") == "/v1/chat/completions" and not e.get("canary"):  # the items' requests
            bodies.setdefault(e["question"], set()).add(e["body_sha256"])
    assert len(bodies) == 6 and all(len(v) == 1 for v in bodies.values())


def test_workers_do_not_load_the_openai_sdk() -> None:
    """The aiohttp client is the default: a worker process (item runner, worker body) must not pay
    for importing the SDK; only ``--client sdk`` loads it (and classify still knows its errors)."""
    import subprocess
    import sys

    code = ("import sys, nlq2sql.run.worker, nlq2sql.run.workers, nlq2sql.run.item; "
            "assert 'openai' not in sys.modules, 'openai loaded'; "
            "from nlq2sql.transport.client import EndpointConfig, make_client, classify; "
            "c = make_client(EndpointConfig(base_url='http://127.0.0.1:9/v1', model='m', client='sdk')); "
            "import openai, httpx; "
            "req = httpx.Request('POST', 'http://127.0.0.1:9/v1/chat/completions'); "
            "print(classify(openai.APIConnectionError(request=req))[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "connection_error"
