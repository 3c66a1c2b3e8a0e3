"""A small read-only HTTP server for the viewer, bound to 127.0.0.1 only.

GET and HEAD for two kinds of path: the page's own files (``/``, ``/assets/…``, ``/data/…``), and
``/runs/K/NAME``, a file under the K-th run directory once no segment is ``..``, ``.`` or empty (also
percent-encoded), the path is relative and the resolved file (symlinks followed) lies inside it.
A run's file is data: served as ``text/plain; charset=utf-8`` under ``Content-Security-Policy:
sandbox`` (non-UTF-8 as an attachment), so nothing in a run can run script in the viewer's origin;
a file with several hard links is refused (another name may lie outside). Otherwise 404, 403
(refused path, foreign ``Host``: no DNS rebinding) or 405; every answer carries the security headers."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

from nlq2sql.errors import InputError
from nlq2sql.view.bundle import CSP

HOST = "127.0.0.1"
#: The page's own files (a run's file is always RUN_FILE_TYPE).
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8"}
HEADERS = {"Content-Security-Policy": CSP + "; frame-ancestors 'none'", "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-store",
           "Cross-Origin-Resource-Policy": "same-origin", "Cross-Origin-Opener-Policy": "same-origin"}
#: A run's file: no script, no plugin, no form, an opaque origin even if a browser sniffed it as a page.
RUN_FILE_CSP = "sandbox; default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
RUN_FILE_TYPE = "text/plain; charset=utf-8"

__all__ = ["HEADERS", "HOST", "RUN_FILE_CSP", "RUN_FILE_TYPE", "Handler", "ViewServer", "make_server",
           "read_run_file", "safe_parts", "serve_in_thread"]


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
    """The viewer's server.  SO_REUSEADDR lets it start again on a port whose last connections
    are in TIME_WAIT; on Linux a port with a live listener is still refused (no SO_REUSEPORT)."""

    daemon_threads = True
    allow_reuse_address = True
    allow_reuse_port = False

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

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, unknown method, too long, too many
        headers) with the security headers, as plain text that echoes nothing of the request."""
        try:
            status = HTTPStatus(code)
        except ValueError:
            status = HTTPStatus.BAD_REQUEST
        if self.request_version == "HTTP/0.9":  # http.server would write the body alone, no headers
            self.request_version = "HTTP/1.0"
        self.close_connection = True
        self._send(status, f"{status.value} {status.phrase}\n".encode(), extra={"Connection": "close"})

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
        body = read_run_file(target)
        if body is None:
            return self._refuse(HTTPStatus.NOT_FOUND)
        if isinstance(body, HTTPStatus):
            return self._refuse(body)
        extra = {"Content-Security-Policy": RUN_FILE_CSP}
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:  # not text: a download, never rendered
            extra["Content-Disposition"] = "attachment; filename*=UTF-8''" + quote(target.name, safe="")
        self._send(HTTPStatus.OK, body, RUN_FILE_TYPE, extra)

    def _not_allowed(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"405 read-only: GET and HEAD only\n",
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed  # noqa: N815
    do_PROPFIND = do_MKCOL = do_COPY = do_MOVE = do_LOCK = do_UNLOCK = _not_allowed  # noqa: N815


def read_run_file(target: Path) -> bytes | HTTPStatus | None:
    """The bytes of a regular file with one name only (no hard link that may lie outside the run);
    403 for a file with other names, None for what is not a readable regular file.

    The file is opened without following a last-moment symlink and checked on the open
    descriptor, so what is checked is what is read.
    """
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_nlink != 1:
            return HTTPStatus.FORBIDDEN
        try:
            return fh.read()
        except OSError:
            return None


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
