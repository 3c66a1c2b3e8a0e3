"""Typer commands only: parse, build a config, call one library function, render."""

__all__: list[str] = []
