"""The structured-output canary on the real CPU vLLM (SmolLM2, the session server, compact grammar):
it passes in every constraint mode the harness sends (JSON Schema, response_format, regex, choice,
grammar), the server's log names the backend the manifest records (its /server_info, off outside vLLM's
dev mode, does not: an endpoint's backend is then "unknown"), and the same prompt without the
constraint does break the canary's schema (the check can fail)."""

from __future__ import annotations

import asyncio
import json

import pytest

from nlq2sql.run.canary import ALLOWED, CANARY_QUESTION, canary_verdict, check_constraints
from nlq2sql.run.server import LocalServer
from nlq2sql.run.serving import UNKNOWN_BACKEND, effective_structured_outputs, endpoint_structured_outputs
from nlq2sql.transport.client import EndpointConfig, RetryBudget, Sampling, complete, make_client


@pytest.mark.parametrize("structured", ["json", "response_format", "regex", "choice", "grammar"])
def test_the_canary_passes_on_a_server_that_enforces_the_schema(vllm_server: LocalServer, structured: str) -> None:
    res = asyncio.run(check_constraints(vllm_server.url, vllm_server.model_name, "EMPTY", structured, compact=True))
    assert res.passed, res
    if structured == "choice":
        assert res.text in ALLOWED
    else:
        assert json.loads(res.text or "") in ({"color": "red"}, {"color": "green"}) or res.finish_reason == "length"


def test_the_log_names_the_backend(vllm_server: LocalServer) -> None:
    found = effective_structured_outputs(vllm_server.log_path)
    assert found is not None and found.to_json() == {
        "backend": "xgrammar", "disable_any_whitespace": True, "source": "server log"}
    # As an endpoint (no log to read): vLLM outside dev mode serves no /server_info.
    assert endpoint_structured_outputs(vllm_server.url, "EMPTY").backend == UNKNOWN_BACKEND


def test_without_the_schema_the_same_model_breaks_it(vllm_server: LocalServer) -> None:
    async def unconstrained() -> tuple[str | None, str | None]:
        cfg = EndpointConfig(base_url=vllm_server.url, model=vllm_server.model_name, concurrency=1)
        http = make_client(cfg)
        try:
            out = await complete(http, cfg, [{"role": "user", "content": CANARY_QUESTION}],
                                 Sampling(max_tokens=32, structured="none"), RetryBudget(1, 1.0))
        finally:
            await http.close()
        return out.text, out.finish_reason

    text, finish = asyncio.run(unconstrained())
    assert canary_verdict(text, finish, compact=True) is not None, text
