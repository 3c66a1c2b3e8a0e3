"""Typer commands only: parse, build a config, call one library function, render."""
