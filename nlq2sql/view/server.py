"""A small read-only HTTP server for the viewer, bound to 127.0.0.1 only.

It answers GET and HEAD for exactly two kinds of path:

- the page's own files (``/``, ``/assets/…``, ``/data/…``), built in memory by
  :func:`~nlq2sql.view.bundle.build_bundle`;
- ``/runs/K/NAME``: a file under the K-th run directory it was given, after checking that
  no segment is ``..``, ``.`` or empty (also when percent-encoded), that the path is
  relative, and that the resolved file (symlinks followed) still lies inside that
  directory.

Everything else is 404 (unknown), 403 (refused path, foreign Host header) or 405 (any
method but GET and HEAD).  A foreign ``Host`` is refused so that a web page cannot reach
the server through DNS rebinding.  Every answer carries the page's Content-Security-Policy.
"""

from __future__ import annotations

import errno
import mimetypes
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from ..errors import InputError
from .bundle import CSP

HOST = "127.0.0.1"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".json": "application/json", ".jsonl": "text/plain; charset=utf-8",
         ".md": "text/plain; charset=utf-8", ".log": "text/plain; charset=utf-8", ".png": "image/png"}
HEADERS = {"Content-Security-Policy": CSP + "; frame-ancestors 'none'", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store",
           "Cross-Origin-Resource-Policy": "same-origin", "Cross-Origin-Opener-Policy": "same-origin"}


def safe_parts(raw_path: str) -> list[str] | None:
    """The decoded segments of a request path, or None when the path must be refused."""
    if not raw_path.startswith("/") or "\\" in raw_path or "\x00" in raw_path:
        return None
    path = raw_path.split("?", 1)[0].split("#", 1)[0]
    decoded = unquote(path, errors="strict") if "%" in path else path
    if "\\" in decoded or "\x00" in decoded or not decoded.startswith("/") or decoded.startswith("//"):
        return None
    parts = decoded.split("/")[1:]
    if parts and parts[-1] == "":
        parts = parts[:-1]
    if any(p in ("", ".", "..") for p in parts):
        return None
    return parts


class ViewServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, files: Mapping[str, bytes], run_dirs: list[Path], port: int = 0) -> None:
        self.files = files
        self.run_dirs = [p.resolve() for p in run_dirs]
        super().__init__((HOST, port), Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"


class Handler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "nlq2sql-view"
    sys_version = ""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 — the base class's name
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in {**HEADERS, "Content-Type": ctype, "Content-Length": str(len(body)), **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _refuse(self, status: HTTPStatus) -> None:
        self._send(status, f"{status.value} {status.phrase}\n".encode())

    def _host_ok(self) -> bool:
        host = (self.headers.get("Host") or "").strip().lower()
        return host in (f"127.0.0.1:{self.server.port}", f"localhost:{self.server.port}")

    def do_GET(self) -> None:  # noqa: N802 — http.server's naming
        if not self._host_ok():
            return self._refuse(HTTPStatus.FORBIDDEN)
        try:
            parts = safe_parts(self.path)
        except UnicodeDecodeError:
            parts = None
        if parts is None:
            return self._refuse(HTTPStatus.FORBIDDEN)
        rel = "/".join(parts) or "index.html"
        if rel in self.server.files:
            body = self.server.files[rel]
            return self._send(HTTPStatus.OK, body, TYPES.get(Path(rel).suffix, "application/octet-stream"))
        if len(parts) >= 3 and parts[0] == "runs":
            return self._run_file(parts[1], parts[2:])
        return self._refuse(HTTPStatus.NOT_FOUND)

    do_HEAD = do_GET  # noqa: N815

    def _run_file(self, key: str, rest: list[str]) -> None:
        if not key.isdigit() or int(key) >= len(self.server.run_dirs):
            return self._refuse(HTTPStatus.NOT_FOUND)
        root = self.server.run_dirs[int(key)]
        try:
            target = root.joinpath(*rest).resolve(strict=True)
        except (OSError, RuntimeError):
            return self._refuse(HTTPStatus.NOT_FOUND)
        if not target.is_relative_to(root):
            return self._refuse(HTTPStatus.FORBIDDEN)
        if not target.is_file():
            return self._refuse(HTTPStatus.NOT_FOUND)
        try:
            body = target.read_bytes()
        except OSError:
            return self._refuse(HTTPStatus.NOT_FOUND)
        ctype = TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if ctype.startswith("text/html") or ctype.endswith("javascript") or "svg" in ctype:
            ctype = "text/plain; charset=utf-8"  # a run's file is data, never a page or a script
        self._send(HTTPStatus.OK, body, ctype)

    def _not_allowed(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"405 read-only: GET and HEAD only\n",
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed  # noqa: N815
    do_PROPFIND = do_MKCOL = do_COPY = do_MOVE = do_LOCK = do_UNLOCK = _not_allowed  # noqa: N815


def make_server(files: Mapping[str, bytes], run_dirs: list[Path], port: int = 0) -> ViewServer:
    """Bind 127.0.0.1:port (0: any free port); a port in use is bad input."""
    if not 0 <= port <= 65535:
        raise InputError(f"must be between 0 and 65535, got {port}", field="--port")
    try:
        return ViewServer(files, run_dirs, port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise InputError(f"port {port} is already in use", field="--port") from None
        raise InputError(f"cannot listen on {HOST}:{port}: {exc.strerror}", field="--port") from None


def serve_in_thread(server: ViewServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, name="nlq2sql-view", daemon=True)
    t.start()
    return t
