"""A tiny reverse proxy that can serialize: an artificial admission limit for tests and demos.

``python -m nlq2sql.load.proxy --upstream URL --port 8100 --serialize`` streams requests through;
with ``--serialize`` each ``POST …/completions`` holds one lock for its whole duration, so the
engine sees one request at a time; ``/metrics``, ``/health`` and ``/v1/models`` pass unlocked.
It listens on loopback only."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

from nlq2sql.run.server import free_port

HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "content-length", "host", "content-encoding"}


def make_app(upstream: str, serialize: bool) -> web.Application:
    import aiohttp
    from aiohttp import web

    lock = asyncio.Lock()
    state: dict[str, aiohttp.ClientSession] = {}  # the upstream session, opened on startup

    async def on_startup(app: web.Application) -> None:
        state["session"] = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False,
            connector=aiohttp.TCPConnector(limit=0))

    async def on_cleanup(app: web.Application) -> None:
        await state["session"].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        gen = request.method == "POST" and request.path.endswith("completions")
        ctx = lock if (serialize and gen) else contextlib.nullcontext()
        async with ctx:  # type: ignore[attr-defined]
            body = await request.read()
            headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
            async with state["session"].request(request.method, upstream + request.path_qs,
                                                 data=body, headers=headers) as up:
                resp = web.StreamResponse(status=up.status, headers={
                    k: v for k, v in up.headers.items() if k.lower() not in HOP})
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


def main(argv: list[str] | None = None) -> None:
    from aiohttp import web

    p = argparse.ArgumentParser(description="Loopback reverse proxy; --serialize holds a lock per "
                                            "generation request.")
    p.add_argument("--upstream", required=True, help="upstream root URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--serialize", action="store_true")
    a = p.parse_args(argv)
    web.run_app(make_app(a.upstream.rstrip("/").removesuffix("/v1"), a.serialize), host="127.0.0.1",
                port=a.port, print=None, access_log=None, handler_cancellation=True)


class Proxy:
    """Run the proxy as a child process: ``with Proxy(upstream, serialize=True) as px: px.url``."""

    def __init__(self, upstream: str, serialize: bool = True, port: int | None = None) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.serialize = serialize
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.url = self.base_url + "/v1"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Proxy:
        args = [sys.executable, "-m", "nlq2sql.load.proxy", "--upstream", self.upstream,
                "--port", str(self.port)] + (["--serialize"] if self.serialize else [])
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"proxy exited: {self.proc.stderr.read().decode()[-500:]}"  # type: ignore[union-attr]
                                   )
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError("proxy did not start listening")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.base_url + path, timeout=10) as resp:
            return bytes(resp.read())


__all__ = ["Proxy", "make_app"]

if __name__ == "__main__":
    main()
