"""A no-op OpenAI-compatible streaming server for measuring *client* ceilings.

It answers every chat completion at once with a fixed valid intent in a few SSE chunks,
so whatever limits req/s is the client.  The harness's structured-output canary is answered
as a conforming server answers it (``{"color":"red"}``; ``red`` under a choice), so a run
against it starts as against vLLM.  Benchmark only; never a stand-in for vLLM.
Run: ``python benchmarks/noop_server.py PORT``.
"""

from __future__ import annotations

import json
import sys
import time

from aiohttp import web

INTENT = ('{"intent":"breakdown","metric":"revenue","dimension":"region","time_grain":null,'
          '"filters":[],"limit":null,"order":null}')
PIECES = [INTENT[i:i + 24] for i in range(0, len(INTENT), 24)]


def _chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> bytes:
    body = {"id": "noop", "object": "chat.completion.chunk", "created": int(time.time()), "model": "noop",
            "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


BODY = (b"".join(_chunk({"role": "assistant", "content": p}) for p in PIECES)
        + _chunk({}, "stop")
        + _chunk({}, usage={"prompt_tokens": 40, "completion_tokens": len(PIECES),
                            "total_tokens": 40 + len(PIECES)})
        + b"data: [DONE]\n\n")


#: The structured-output canary's question (``nlq2sql.run.canary.CANARY_QUESTION``; not imported, so
#: this server stays a bare aiohttp process) and the answers a conforming server gives it: the
#: first allowed value under a choice, else the compact JSON its schema, regex or grammar allows.
CANARY_MARK = b"nlq2sql structured-output canary"
CANARY_JSON = '{"color":"red"}'
CANARY_CHOICE = "red"


def _body(text: str) -> bytes:
    return (_chunk({"role": "assistant", "content": text}) + _chunk({}, "stop")
            + _chunk({}, usage={"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44})
            + b"data: [DONE]\n\n")


def canary_body(raw: bytes) -> bytes | None:
    """The canary's answer as a conforming server gives it; None for any other request."""
    if CANARY_MARK not in raw:
        return None
    body = json.loads(raw)
    so = body.get("structured_outputs") or {}
    return _body(CANARY_CHOICE if "choice" in so else CANARY_JSON)


async def chat(request: web.Request) -> web.StreamResponse:
    canary = canary_body(await request.read())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(BODY if canary is None else canary)
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    text = b'{"id":"noop","object":"text_completion","model":"noop","choices":[{"index":0,"text":"x","finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5}}'  # noqa: E501
    await resp.write(b"data: " + text + b"\n\ndata: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def models(_: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "noop", "object": "model",
                                                          "max_model_len": 2048}]})


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", lambda _: web.Response())
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)


if __name__ == "__main__":
    main()
