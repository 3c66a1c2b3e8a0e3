"""How the pool asks a replica whether it is well: the half-open probe (one real chat request,
answered by the run's model) and the ``/models`` check; plain HTTP, knowing nothing of breakers."""

from __future__ import annotations

import json

import aiohttp

from nlq2sql.transport.client import EndpointConfig, Sampling

__all__ = ["PROBE_QUESTION", "PROBE_SAMPLING", "PROBE_TIMEOUT_S", "healthy", "probe_answer"]

PROBE_TIMEOUT_S = 10.0  # a probe gives up after this long (or the run's request timeout, if shorter)
#: The half-open probe: a real chat request, as small as one can be (one token, no schema).
PROBE_QUESTION = "nlq2sql health probe: reply with one word."
PROBE_SAMPLING = Sampling(max_tokens=1, temperature=0.0, seed=0, structured="none")


async def probe_answer(cfg: EndpointConfig) -> str:
    """One small real chat request (one token, no schema, not retried, not charged to the run's
    budget), streamed as every request is: ``ok`` only when every chunk names the model this run
    asked for, else why not.  A replica killed and its port re-bound by another server (one that
    ignores the requested model, as one-model servers do) answers a chat too, under its own name."""
    body = {"model": cfg.model, "messages": [{"role": "user", "content": PROBE_QUESTION}], "stream": True,
            "max_tokens": PROBE_SAMPLING.max_tokens, "temperature": PROBE_SAMPLING.temperature,
            "seed": PROBE_SAMPLING.seed}
    timeout = aiohttp.ClientTimeout(total=min(cfg.timeout_s, PROBE_TIMEOUT_S))
    done = False
    try:
        async with aiohttp.ClientSession(timeout=timeout) as sess, sess.post(
                cfg.base_url.rstrip("/") + "/chat/completions", json=body,
                headers={"Authorization": f"Bearer {cfg.api_key}"}) as resp:
            if resp.status != 200:
                return f"HTTP {resp.status}"
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if not isinstance(chunk, dict) or "error" in chunk:
                    return "an error event in the stream"
                if chunk.get("model") != cfg.model:
                    return f"answered by another model ({str(chunk.get('model'))[:80]!r}, not {cfg.model!r})"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return "ok" if done else "the stream ended before [DONE]"


async def healthy(sess: aiohttp.ClientSession, cfg: EndpointConfig) -> bool:
    """The replica answers ``/models`` with HTTP 200 and still serves the model."""
    try:
        async with sess.get(cfg.base_url.rstrip("/") + "/models",
                            headers={"Authorization": f"Bearer {cfg.api_key}"}) as resp:
            if resp.status != 200:
                return False
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return False
    return isinstance(body, dict) and any(
        isinstance(m, dict) and m.get("id") == cfg.model for m in body.get("data", []))
