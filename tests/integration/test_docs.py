"""Every command and option is documented (sqlite-utils style): docs/cli.md is generated from
the app and must be current; the README names every top-level command."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import typer
from repo_paths import ROOT

from nlq2sql.cli.main import app


def _gen() -> Any:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cli_reference_is_current() -> None:
    assert _gen().main(["--check"]) == 0, "docs/cli.md is stale: run .venv/bin/python scripts/gen_cli_docs.py"


def test_every_command_and_option_is_in_the_docs() -> None:
    mod = _gen()
    doc = (ROOT / "docs" / "cli.md").read_text()
    cmds = mod.commands(typer.main.get_command(app))
    assert len(cmds) >= 20
    for path, cmd in cmds:
        section = doc.split(f"## `{path}`\n", 1)
        assert len(section) == 2, f"{path} is not documented"
        body = section[1].split("\n## ", 1)[0]
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("--") and opt != "--help":
                    assert f"`{opt}`" in body, f"{path} {opt} is not documented"


def test_readme_names_every_top_level_command() -> None:
    readme = (ROOT / "README.md").read_text()
    root = typer.main.get_command(app)
    for name in root.commands:  # type: ignore[attr-defined]
        assert f"nlq2sql {name}" in readme, f"the README never mentions `nlq2sql {name}`"


def test_committed_reports_hold_no_absolute_path() -> None:
    """Reports record paths relative to the project (or a name and a hash), never a machine's."""
    import json

    found: list[tuple[str, str]] = []

    def walk(value: object, where: str) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v, where)
        elif isinstance(value, list):
            for v in value:
                walk(v, where)
        elif isinstance(value, str) and value.startswith("/"):
            found.append((where, value))

    files = list((ROOT / "reports").rglob("*.json"))
    assert files
    for f in files:
        walk(json.loads(f.read_text()), str(f.relative_to(ROOT)))
    assert not found, found[:5]
    for f in (ROOT / "reports").rglob("*"):
        if f.is_file() and f.suffix in (".md", ".json", ".jsonl", ".log", ".html"):
            assert str(ROOT) + "/" not in f.read_text(errors="replace"), f


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    """A newcomer follows the README's links: each relative one (and each in docs/) names a file or
    folder that exists, and a link to a heading of a Markdown file names a heading it has."""
    import re

    def anchors(md: Path) -> set[str]:
        heads = re.findall(r"^#+ (.+)$", md.read_text(), flags=re.M)
        return {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-") for h in heads}

    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve()
            if not dest.exists():
                broken.append(f"{doc.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert not broken, broken
