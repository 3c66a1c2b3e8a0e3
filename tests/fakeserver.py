"""A scripted OpenAI-compatible *fault* server for tests (never a stand-in for vLLM).

It produces on demand the faults a real server will not: 429 with ``Retry-After``, 500,
503, a connection reset mid-stream, a hang with no bytes, a malformed body, schema-invalid
content, ``finish_reason=length`` truncation, HTTP 400 "maximum context length", its own
death mid-stream (and, with a standby process, a restart on the same port), and HTTP 200
bodies that are not SSE at all (``garbage`` bytes, an ``html`` page).

It runs as a separate process (``python tests/fakeserver.py --port P ...``) so that it can
really be killed.  Like vLLM it serves ``GET /v1/models``, ``/health``, ``/version`` and
``POST /v1/chat/completions``, streaming SSE chunks (``data: {...chat.completion.chunk...}``,
a final chunk with ``finish_reason``, a usage chunk, ``data: [DONE]``).  It has no
``/metrics``.  By default it answers a valid intent, chosen deterministically from the
question text.

A *script* (JSON) decides each chat request's behaviour::

    {"default": "ok",
     "sequence": ["500", {"kind": "status", "status": 429, "retry_after": 1}, ...],
     "by_question": {"<exact question>": ["reset", "ok"], ...}}

Per request: the next behaviour queued for its question (the last user message), else
the next one in ``sequence``, else ``default``.  A streamed answer carries scripted logprobs
when the request asks for them (``intent_p``: the probability on each token, default 0.9),
unless the behaviour says ``"no_logprobs": true`` (a gateway that strips them).  Every request received is appended to a
JSONL log (flushed before it is answered, so the count survives a kill); the log never
holds request headers, so no API key is ever written.  A replica pool's half-open probe
(a chat request whose question is ``PROBE_QUESTION``) is answered like any request (by the
script: a server failing every chat request fails the probe too) and logged with
``"probe": true``; ``chat_requests()`` leaves probes out, ``probe_requests()`` lists them.
The structured-output canary (``nlq2sql.run.canary``; its question is ``CANARY_QUESTION``)
bypasses the script and is logged with ``"canary": true``: by default the fake *conforms*
(``{"color":"red"}``); ``"canary": "ignore"`` in the script (or ``--canary ignore``) makes it
answer what the prompt asks, as a server that drops ``structured_outputs`` would, and
``"whitespace"`` a conforming value with spaces (a server without the compact grammar).
``"any_model": true`` in the script makes it answer whatever model a request names, giving its own
name in the response (a one-model server that ignores the field: a stranger on a re-bound port).  A
conforming reply follows the canary's constraint kind (a choice: ``red``); ``"canary_ignores":
["grammar", …]`` makes it ignore only those kinds (json, response_format, regex, choice, grammar),
as a server that enforces JSON Schemas but drops a grammar field would.  ``"server_info_backend":
B`` serves vLLM's dev-mode ``/server_info`` naming backend B (404 otherwise, as vLLM without
``VLLM_SERVER_DEV_MODE``).
Started in vLLM's place it prints vLLM's ``structured_outputs_config=...`` start-up line
for the ``--structured-outputs-config`` it was given (``--effective-backend`` overrides the
backend it reports, as a server that did not take the flag would).

Test side: :class:`FakeServer` starts, waits for and stops such a process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()

#: Valid, consistent intents the default ``ok`` answer picks from (by question hash).
OK_INTENTS: tuple[dict[str, Any], ...] = (
    {"intent": "breakdown", "metric": "revenue", "dimension": "region", "time_grain": None,
     "filters": [], "limit": None, "order": None},
    {"intent": "top_n_by_metric", "metric": "orders", "dimension": "category", "time_grain": None,
     "filters": [], "limit": 3, "order": "desc"},
    {"intent": "time_series", "metric": "units", "dimension": None, "time_grain": "month",
     "filters": [{"field": "year", "op": "eq", "value": "2025"}], "limit": None, "order": None},
    {"intent": "breakdown", "metric": "customers", "dimension": "channel", "time_grain": None,
     "filters": [{"field": "region", "op": "neq", "value": "West"}], "limit": None, "order": None},
)
SCHEMA_INVALID: dict[str, Any] = {"intent": "pie_chart", "metric": "profit", "dimension": "region",
                                  "time_grain": None, "filters": [], "limit": None, "order": None}
#: ``nlq2sql.run.pool_probe.PROBE_QUESTION`` (a test checks they agree; this process imports no nlq2sql).
PROBE_QUESTION = "nlq2sql health probe: reply with one word."
#: ``nlq2sql.run.canary.CANARY_QUESTION`` (a test checks they agree).
CANARY_QUESTION = ('nlq2sql structured-output canary. Reply with exactly this JSON and nothing else: '
                   '{ "color" : "purple" , "size" : 7 }')
CANARY_REPLIES = {"conform": '{"color":"red"}', "ignore": '{ "color" : "purple" , "size" : 7 }',
                  "whitespace": '{ "color": "red" }'}
SQL_ANSWER = "DROP TABLE order_lines; SELECT * FROM order_lines"
CONTEXT_OVERFLOW_MESSAGE = (
    "This model's maximum context length is 2048 tokens. However, you requested 4096 tokens "
    "(3000 in the messages, 1096 in the completion). Please reduce the length of the messages "
    "or completion.")

#: Behaviour kinds (string shorthand ``"500"`` / ``"429"`` means a bare status).
KINDS = ("ok", "status", "reset", "hang", "malformed", "schema_invalid", "length",
         "context_overflow", "die", "sql", "text", "auth_echo", "garbage", "html")
#: Bodies that are not an SSE stream at all, answered with HTTP 200 (a proxy's or a portal's page).
GARBAGE_BODY = b"this is not an event stream\nok: 1\n\n\x00\x01 binary tail\n"
HTML_BODY = ('<!doctype html>\n<html><head><title>Sign in</title></head>\n<body><p>Session expired: '
             '<a href="https://portal.example/login">sign in</a></p></body></html>\n')


def ok_text(question: str) -> str:
    """The default answer for a question: deterministic across processes."""
    h = int(hashlib.sha256(question.encode()).hexdigest(), 16)
    return json.dumps(OK_INTENTS[h % len(OK_INTENTS)])


def normalise(b: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(b, Mapping):
        out = dict(b)
    elif b.isdigit():
        out = {"kind": "status", "status": int(b)}
    else:
        out = {"kind": b}
    if out.get("kind") not in KINDS:
        raise ValueError(f"unknown fake-server behaviour {b!r}")
    return out


def script(*, default: str | Mapping[str, Any] = "ok",
           sequence: Iterable[str | Mapping[str, Any]] = (),
           by_question: Mapping[str, Iterable[str | Mapping[str, Any]]] | None = None,
           answers: Mapping[str, str] | None = None, wrong: Mapping[str, str] | None = None,
           correct_below: int | None = None) -> dict[str, Any]:
    """A script (validated), ready to hand to :class:`FakeServer`.

    ``answers`` (question → text) replaces the default ``ok`` answer; with ``correct_below`` K,
    a request that shared the engine with K or more chat requests in flight (itself included) at
    any moment of its service (``delay_s``, served before its first token) gets ``wrong[question]``
    instead — a simulated engine whose answers degrade under load.  Judged over the whole service,
    not at arrival, so a client slowed by a busy machine (its requests of one burst arriving
    staggered) still loads the engine as its concurrency says; below K it never can."""
    return {"default": normalise(default), "sequence": [normalise(b) for b in sequence],
            "by_question": {q: [normalise(b) for b in bs] for q, bs in (by_question or {}).items()},
            "answers": dict(answers or {}), "wrong": dict(wrong or {}), "correct_below": correct_below}


def by_ids(evalset: str, behaviours: Mapping[str, Iterable[str | Mapping[str, Any]]]
           ) -> dict[str, list[str | Mapping[str, Any]]]:
    """``{item id: behaviours}`` → ``{question: behaviours}`` for ``script(by_question=...)``."""
    from nlq2sql.semantic.binding import open_warehouse
    from nlq2sql.stages.evalset import load_evalset

    questions = {c.id: c.question for c in load_evalset(evalset, open_warehouse("retail")).cases}
    return {questions[i]: list(bs) for i, bs in behaviours.items()}


# --------------------------------------------------------------------------------------
# The server process
# --------------------------------------------------------------------------------------

class _State:
    def __init__(self, spec: dict[str, Any], log_path: Path | None, model: str, delay_s: float,
                 max_model_len: int, key_env: str | None) -> None:
        self.default = spec.get("default") or {"kind": "ok"}
        self.sequence: deque[dict[str, Any]] = deque(spec.get("sequence") or [])
        self.by_question = {q: deque(bs) for q, bs in (spec.get("by_question") or {}).items()}
        self.model, self.delay_s, self.max_model_len = model, delay_s, max_model_len
        self.key = os.environ.get(key_env) if key_env else None
        self.log = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
        self.count = 0
        self.tokenize = False
        self.chat_count = 0
        self.answers: dict[str, str] = spec.get("answers") or {}
        self.wrong: dict[str, str] = spec.get("wrong") or {}
        self.correct_below: int | None = spec.get("correct_below")
        self.inflight = 0  # chat requests being answered now (the simulated engine's load)
        self.peaks: dict[int, int] = {}  # each one's highest ``inflight`` so far (``correct_below``)
        self.canary = str(spec.get("canary") or "conform")
        self.canary_ignores = frozenset(spec.get("canary_ignores") or ())
        self.server_info_backend: str | None = spec.get("server_info_backend")
        #: A server that ignores the requested model name (one model per server, as llama.cpp's
        #: or a bare proxy): it answers any, naming its own in the response.
        self.any_model = bool(spec.get("any_model"))

    def canary_reply(self, body: dict[str, Any]) -> str:
        """The canary's answer under this request's constraint kind."""
        so = body.get("structured_outputs") or {}
        kind = "response_format" if body.get("response_format") else next(iter(so), "none")
        if self.canary == "ignore" or kind in self.canary_ignores:
            return CANARY_REPLIES["ignore"]
        if kind == "choice" and self.canary == "conform":
            return str(so["choice"][0])
        return CANARY_REPLIES[self.canary]

    def pick(self, question: str) -> dict[str, Any]:
        queue = self.by_question.get(question)
        if queue:
            return queue.popleft()
        if self.sequence:
            return self.sequence.popleft()
        return self.default

    def note(self, entry: dict[str, Any]) -> None:
        self.count += 1
        if self.log is not None:
            self.log.write(json.dumps({"t": time.time(), "pid": os.getpid(), **entry}) + "\n")
            self.log.flush()


def _chunk(state: _State, rid: str, created: int, delta: dict[str, Any] | None,
           finish: str | None = None, usage: dict[str, int] | None = None,
           logprobs: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created,
                            "model": state.model, "choices": []}
    if delta is not None:
        body["choices"] = [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish,
                            **({"stop_reason": None} if finish else {})}]
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def _logprobs(piece: str, p: float) -> dict[str, Any]:
    """One piece as one token with logprob log(p); its one alternative swaps an intent kind
    (``break`` ↔ ``top_n``) and carries the rest of the mass; other pieces' alternative fits no
    kind.  So the harness's intent-token confidence of an answer equals ``p``."""
    alt = (piece.replace("break", "top_n") if "break" in piece else
           piece.replace("top_n", "break") if "top_n" in piece else "@@")
    lp, alt_lp = math.log(p), math.log(max(1e-9, 1 - p))
    return {"content": [{"token": piece, "logprob": lp, "bytes": None, "top_logprobs": [
        {"token": piece, "logprob": lp, "bytes": None}, {"token": alt, "logprob": alt_lp, "bytes": None}]}]}


def _pieces(text: str, size: int = 8) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def _reset(request: Any) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0), like a crashed peer."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def make_app(state: _State) -> Any:
    from aiohttp import web

    def authorised(request: web.Request) -> bool:
        return state.key is None or request.headers.get("Authorization") == f"Bearer {state.key}"

    def unauthorised() -> web.Response:
        return web.json_response({"object": "error", "message": "invalid API key",
                                   "type": "AuthenticationError", "code": 401}, status=401)

    async def health(request: web.Request) -> web.Response:
        state.note({"path": "/health"})
        return web.Response(text="")

    async def version(request: web.Request) -> web.Response:
        state.note({"path": "/version"})
        return web.json_response({"version": "fake-0.1"})

    async def server_info(request: web.Request) -> web.Response:
        state.note({"path": "/server_info"})
        if state.server_info_backend is None:  # vLLM serves it only in dev mode
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"vllm_config": (
            "model='m', structured_outputs_config=StructuredOutputsConfig(backend="
            f"'{state.server_info_backend}', disable_any_whitespace=False, disable_additional_properties=False)")})

    async def models(request: web.Request) -> web.Response:
        state.note({"path": "/v1/models", "auth_ok": authorised(request)})
        if not authorised(request):
            return unauthorised()
        return web.json_response({"object": "list", "data": [
            {"id": state.model, "object": "model", "created": 0, "owned_by": "fake",
             "root": state.model, "max_model_len": state.max_model_len}]})

    async def tokenize(request: web.Request) -> web.Response:
        """vLLM's /tokenize, where asked (--tokenize): a message's characters / 4, a stand-in count."""
        body = await request.json()
        state.note({"path": "/tokenize"})
        chars = sum(len(m.get("content", "")) for m in body.get("messages", []))
        return web.json_response({"count": chars // 4, "max_model_len": state.max_model_len, "tokens": []})

    async def chat(request: web.Request) -> web.StreamResponse:
        state.inflight += 1
        state.peaks[id(request)] = 0
        for k in state.peaks:
            state.peaks[k] = max(state.peaks[k], state.inflight)
        done = [False]
        request["release"] = done
        try:
            return await answer(request)
        except (asyncio.CancelledError, ConnectionError):  # the client went away mid-request
            state.note({"path": "(cancelled)"})
            raise
        finally:
            state.peaks.pop(id(request), None)
            if not done[0]:
                state.inflight -= 1

    def release(request: web.Request) -> None:
        """Leave the in-flight count before the last bytes go out: a closed-loop client's next
        request must not find this one still counted."""
        done = request["release"]
        if not done[0]:
            done[0] = True
            state.inflight -= 1

    async def answer(request: web.Request) -> web.StreamResponse:
        state.chat_count += 1
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"object": "error", "message": "bad JSON", "code": 400},
                                     status=400)
        messages = body.get("messages") or []
        users = [m.get("content", "") for m in messages if m.get("role") == "user"]
        question = users[-1] if users else ""
        canary = question == CANARY_QUESTION  # outside the script: it must not eat a scripted behaviour
        state.chat_count -= canary  # … nor count as one of the run's chat requests
        b = {"kind": "text", "text": state.canary_reply(body)} if canary else state.pick(question)
        kind = b["kind"]
        state.note({"path": "/v1/chat/completions", "n": state.chat_count, "question": question,
                    "probe": question == PROBE_QUESTION, "behaviour": kind, "auth_ok": authorised(request),
                    **({"canary": state.canary, "structured_outputs": body.get("structured_outputs"),
                        "response_format": body.get("response_format")} if canary else {}),
                    "body_sha256": hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest(),
                    "stream": bool(body.get("stream")), "model": body.get("model"),
                    "logprobs": body.get("logprobs"), "top_logprobs": body.get("top_logprobs"),
                    "system_prompt_sha256": hashlib.sha256(
                        "".join(m.get("content", "") for m in messages
                                if m.get("role") == "system").encode()).hexdigest()})
        if kind == "auth_echo":
            auth = request.headers.get("Authorization", "")
            return web.json_response({"object": "error", "code": 401, "type": "AuthenticationError",
                                      "message": f"Incorrect API key provided: {auth}"}, status=401)
        if not authorised(request):
            return unauthorised()
        if body.get("model") != state.model and not state.any_model:
            return web.json_response({"object": "error", "code": 404, "type": "NotFoundError",
                                      "message": f"The model `{body.get('model')}` does not exist."},
                                     status=404)
        if kind == "status":
            code = int(b.get("status", 500))
            headers = {}
            if b.get("retry_after") is not None:
                headers["Retry-After"] = str(b["retry_after"])
            return web.json_response({"object": "error", "code": code, "type": "ServerError",
                                      "message": f"scripted HTTP {code}"}, status=code,
                                     headers=headers)
        if kind == "context_overflow":
            return web.json_response({"object": "error", "message": CONTEXT_OVERFLOW_MESSAGE,
                                      "type": "BadRequestError", "param": None, "code": 400},
                                     status=400)
        if kind == "hang":
            await asyncio.sleep(float(b.get("seconds", 60)))  # no bytes at all
            return web.Response(status=504)
        if kind == "garbage":
            return web.Response(status=200, body=GARBAGE_BODY, content_type="application/octet-stream")
        if kind == "html":
            return web.Response(status=200, text=HTML_BODY, content_type="text/html")

        finish = "stop"
        served = False  # the delay already spent (``correct_below``: before the first token)
        if kind == "schema_invalid":
            text = json.dumps(SCHEMA_INVALID)
        elif kind == "length":
            text, finish = ok_text(question)[:25], "length"
        elif kind == "sql":
            text = SQL_ANSWER
        elif kind == "text":
            text = str(b.get("text", ""))
        elif question in state.answers and state.correct_below is not None:
            if state.delay_s and not canary:
                await asyncio.sleep(state.delay_s)  # the service, during which the load is seen
                served = True
            degraded = state.peaks.get(id(request), state.inflight) >= state.correct_below
            text = state.wrong.get(question, ok_text(question)) if degraded else state.answers[question]
        elif question in state.answers:
            text = state.answers[question]
        else:
            text = ok_text(question)
        created = int(time.time())
        rid = f"chatcmpl-fake-{state.chat_count}"
        prompt_tokens = sum(len(str(m.get("content", ""))) for m in messages) // 4 + 1
        completion_tokens = len(text) // 4 + 1

        if not body.get("stream"):
            if state.delay_s and not canary and not served:
                await asyncio.sleep(state.delay_s)
            return web.json_response({
                "id": rid, "object": "chat.completion", "created": created, "model": state.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": None, "finish_reason": finish}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}})

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(_chunk(state, rid, created, {"role": "assistant", "content": ""}))
        pieces = _pieces(text)
        pause = 0.0 if canary or served else state.delay_s / max(1, len(pieces))
        for i, piece in enumerate(pieces):
            if pause:
                await asyncio.sleep(pause)
            if kind == "malformed" and i == 1:
                await resp.write(b'data: {"id": "' + rid.encode() + b'", "choices": [{"delta": {"cont\n\n')
                await resp.write(b"data: [DONE]\n\n")
                return resp
            if kind in ("reset", "die") and i == 2:
                if kind == "die":
                    os.kill(os.getpid(), signal.SIGKILL)
                _reset(request)
                return resp
            await resp.write(_chunk(state, rid, created, {"content": piece},
                                    logprobs=_logprobs(piece, float(b.get("intent_p", 0.9)))
                                    if body.get("logprobs") and not b.get("no_logprobs") else None))
        release(request)
        await resp.write(_chunk(state, rid, created, {"content": ""}, finish=finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(_chunk(state, rid, created, None, usage={
                "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/server_info", server_info)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    if state.tokenize:
        app.router.add_post("/tokenize", tokenize)
    return app


async def _serve(args: argparse.Namespace) -> None:
    from aiohttp import web

    spec = json.loads(Path(args.script).read_text()) if args.script else {}
    if args.canary:
        spec["canary"] = args.canary
    model = args.served_model_name or args.model or "fake-model"
    state = _State(spec, Path(args.log) if args.log else None, model, args.delay, args.max_model_len,
                   args.require_key_env)
    state.tokenize = args.tokenize
    runner = web.AppRunner(make_app(state), access_log=None, handler_cancellation=True)
    await runner.setup()
    deadline = time.monotonic() + args.bind_retry_s
    while True:
        try:
            site = web.TCPSite(runner, args.host, args.port)
            await site.start()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.01)
    if args.pid_file:
        Path(args.pid_file).write_text(str(os.getpid()))
    state.note({"path": "(listening)", "port": args.port})
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Scripted OpenAI-compatible fault server (tests).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--tokenize", action="store_true", help="serve vLLM's /tokenize (a stand-in count)")
    p.add_argument("--script", default=None, help="JSON script file")
    p.add_argument("--log", default=None, help="JSONL request log (appended)")
    p.add_argument("--delay", type=float, default=0.0, help="seconds spread over each stream")
    p.add_argument("--require-key-env", default=None, help="env var holding the required key")
    p.add_argument("--bind-retry-s", type=float, default=0.0,
                   help="keep trying to bind the port this long (a standby for a restart)")
    p.add_argument("--ignore-sigterm", action="store_true", help="a server slow to stop")
    p.add_argument("--pid-file", default=None)
    p.add_argument("--canary", choices=sorted(CANARY_REPLIES), default=None)
    p.add_argument("--structured-outputs-config", default=None)
    p.add_argument("--effective-backend", default=None)
    # Accept (and ignore) vLLM's other arguments, so LocalServer can start this in its place.
    args, _unknown = p.parse_known_args(argv)
    so = json.loads(args.structured_outputs_config) if args.structured_outputs_config else {}
    print("INFO [core.py:133] Initializing a V1 LLM engine (fake) with config: structured_outputs_config="
          f"StructuredOutputsConfig(backend='{args.effective_backend or so.get('backend', 'auto')}', "
          f"disable_any_whitespace={bool(so.get('disable_any_whitespace'))}, disable_additional_properties=False, "
          "reasoning_parser='')", flush=True)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


# --------------------------------------------------------------------------------------
# Test side
# --------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeServer:
    """One fake-server process. ``with FakeServer(tmp_path, script(...)) as fake: fake.url``."""

    _n = 0

    def __init__(self, workdir: Path, spec: dict[str, Any] | None = None, *,
                 model: str = "fake-model", delay_s: float = 0.0, port: int | None = None,
                 log: Path | None = None, require_key_env: str | None = None,
                 bind_retry_s: float = 0.0, ignore_sigterm: bool = False,
                 env: Mapping[str, str] | None = None, max_model_len: int = 2048, tokenize: bool = False) -> None:
        FakeServer._n += 1
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        tag = f"fake-{os.getpid()}-{FakeServer._n}"
        self.script_path = self.workdir / f"{tag}-script.json"
        self.script_path.write_text(json.dumps(spec or script()))
        self.log = Path(log) if log is not None else self.workdir / f"{tag}-log.jsonl"
        self.model, self.delay_s = model, delay_s
        self.port = port or free_port()
        self.require_key_env, self.bind_retry_s = require_key_env, bind_retry_s
        self.ignore_sigterm = ignore_sigterm
        self.max_model_len, self.tokenize = max_model_len, tokenize
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_path = self.workdir / f"{tag}-stderr.txt"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1"

    def argv(self) -> list[str]:
        args = [sys.executable, str(HERE), "--port", str(self.port), "--model", self.model,
                "--script", str(self.script_path), "--log", str(self.log),
                "--delay", str(self.delay_s), "--bind-retry-s", str(self.bind_retry_s)]
        if self.require_key_env:
            args += ["--require-key-env", self.require_key_env]
        if self.ignore_sigterm:
            args.append("--ignore-sigterm")
        args += ["--max-model-len", str(self.max_model_len)] + (["--tokenize"] if self.tokenize else [])
        return args

    def start(self, wait: bool = True, timeout: float = 20.0) -> FakeServer:
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, env=self.env,
                                     stdout=subprocess.DEVNULL,
                                     stderr=self.stderr_path.open("ab"), start_new_session=True)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"fake server exited {self.proc.returncode}: "
                                   f"{self.stderr_path.read_text(errors='replace')[-2000:]}")
            if self.listening():
                return
            time.sleep(0.02)
        raise RuntimeError("fake server did not become ready")

    def listening(self) -> bool:
        """Whether *this* process answers on the port (a standby may not be bound yet)."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=1) as resp:
                if resp.status != 200:
                    return False
        except (urllib.error.URLError, OSError):
            return False
        return self.proc is not None and any(
            e.get("pid") == self.proc.pid and e.get("path") == "(listening)" for e in self.entries())

    def entries(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def chat_requests(self) -> list[dict[str, Any]]:
        """Every chat-completions request an item made (by any process sharing this log): a
        replica pool's half-open probes are left out (``probe_requests``)."""
        return [e for e in self.entries() if e.get("path") == "/v1/chat/completions" and not e.get("probe")
                and not e.get("canary")]

    def canary_requests(self) -> list[dict[str, Any]]:
        """The structured-output canaries this server received (never part of the script)."""
        return [e for e in self.entries() if e.get("canary")]

    def probe_requests(self) -> list[dict[str, Any]]:
        """The replica pool's half-open probe chats this server received."""
        return [e for e in self.entries() if e.get("path") == "/v1/chat/completions" and e.get("probe")
                and not e.get("canary")]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> FakeServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    main()
