"""A no-op OpenAI-compatible streaming server for measuring *client* ceilings.

It answers every chat completion at once with a fixed valid intent in a few SSE chunks,
so whatever limits req/s is the client.  Benchmark only; never a stand-in for vLLM.
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


async def chat(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(BODY)
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
