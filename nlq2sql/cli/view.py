"""``nlq2sql view``: browse recorded runs in a browser (the ``nlq2sql.view`` package)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from nlq2sql.cli._common import app, err, handled
from nlq2sql.errors import InputError
from nlq2sql.view import build_bundle, load_runs, write_bundle
from nlq2sql.view import server as view_server

__all__ = ["view_cmd"]


@app.command("view")
@handled
def view_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(
        metavar="RUN_DIR...", show_default=False,
        help="Run directories, or folders whose sub-directories are runs (a load-check or matrix folder).")],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: any free port).")] = 8765,
    out: Annotated[Path | None, typer.Option(help="Write a static, self-contained bundle here instead of serving "
                                             "(open its index.html from disk; no server needed).")] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing --out directory.")] = False,
) -> None:
    """Browse runs, items, one item, and compare runs item by item: a local page (127.0.0.1 only, read-only)."""
    import signal


    if out is None and not 0 <= port <= 65535:
        raise InputError(f"must be between 0 and 65535, got {port}", field="--port")
    runs = load_runs(run_dirs)
    if out is not None:
        write_bundle(build_bundle(runs), out, force=force)
        err.print(f"wrote {len(runs)} run{'s' * (len(runs) != 1)} to {out}/ — open {out / 'index.html'} in a browser")
        return
    server = view_server.make_server(build_bundle(runs, raw_files=True), [r.path for r in runs], port)

    def _term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _term)
    sys.stdout.write(f"serving {len(runs)} run{'s' * (len(runs) != 1)} at {server.url} "
                     "(127.0.0.1 only, read-only); Ctrl-C stops\n")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
