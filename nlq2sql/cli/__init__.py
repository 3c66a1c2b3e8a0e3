"""Typer commands only: parse, build a config, call one library function, render.

:data:`app` is the ``nlq2sql`` entry point; each command's module is imported when that
command is used (:data:`nlq2sql.cli._common.COMMANDS`)."""

from nlq2sql.cli._common import app

__all__ = ["app"]
