"""YAML a team wrote, read safely and with every key's line kept.

The YAML is untrusted: PyYAML's node API composes it without constructing anything, and this refuses
tags outside the core schema (``!!python/name:`` …), non-scalar keys, duplicate keys, nesting deeper
than :data:`MAX_DEPTH` and alias expansion past :data:`MAX_NODES` ("billion laughs"). Each problem
names file, line and key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["MAX_DEPTH", "MAX_NODES", "Doc", "Key", "KeyPath", "YamlProblem", "load_documents"]

#: Deeper nesting than a semantic layer ever needs is refused, not recursed into.
MAX_DEPTH = 64
#: Nodes materialised per file, aliases expanded: bounds the "billion laughs" document.
MAX_NODES = 200_000
_CORE = "tag:yaml.org,2002:"
_ALLOWED_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")}
#: One step into a document: a mapping key (its text as written) or a list index.
Key = str | int
#: Where a value is in a document: the keys from its root.
KeyPath = tuple[Key, ...]



@dataclass(frozen=True)
class YamlProblem:
    """One thing wrong with a file: where, which key, what."""

    path: str
    line: int | None
    key: str | None
    message: str


@dataclass
class Doc:
    """One YAML document as plain data plus the line of each key path (1-based)."""

    path: str
    data: Any  # the YAML document as parsed
    lines: dict[KeyPath, int] = field(default_factory=dict)

    def line(self, *keys: Key) -> int | None:
        """The line of the longest known prefix of ``keys``."""
        for n in range(len(keys), -1, -1):
            got = self.lines.get(tuple(keys[:n]))
            if got is not None:
                return got
        return None


class _Stop(Exception):
    def __init__(self, line: int, key: str | None, message: str) -> None:
        self.line, self.key, self.message = line, key, message


class _Walker:
    def __init__(self) -> None:
        self.nodes = 0

    def plain(self, node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int]) -> Any:
        self.nodes += 1
        line = node.start_mark.line + 1
        key = ".".join(map(str, path)) or None
        if self.nodes > MAX_NODES:
            raise _Stop(line, key, f"more than {MAX_NODES:,} YAML nodes (aliases expanded): refused")
        if len(path) > MAX_DEPTH:
            raise _Stop(line, key, f"nested deeper than {MAX_DEPTH} levels: refused")
        if node.tag not in _ALLOWED_TAGS:
            raise _Stop(line, key, f"YAML tag {node.tag!r} is not allowed (only plain values, lists and mappings)")
        lines.setdefault(path, line)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, object] = {}
            for knode, vnode in node.value:
                if not isinstance(knode, yaml.ScalarNode):
                    raise _Stop(knode.start_mark.line + 1, key, "a mapping key must be a plain value")
                if knode.tag == _CORE + "merge":
                    raise _Stop(knode.start_mark.line + 1, key, "merge keys (<<) are not supported")
                k = knode.value
                if k in out:
                    raise _Stop(knode.start_mark.line + 1, ".".join(map(str, (*path, k))),
                                f"duplicate key {k!r} (first on line {lines[(*path, k)]})")
                lines[(*path, k)] = knode.start_mark.line + 1
                out[k] = self.plain(vnode, (*path, k), lines)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.plain(v, (*path, i), lines) for i, v in enumerate(node.value)]
        try:
            return yaml.constructor.SafeConstructor().construct_object(node)
        except yaml.YAMLError as exc:
            raise _Stop(line, key, f"bad value: {exc}") from None


def load_documents(path: str, raw: bytes) -> tuple[list[Doc], list[YamlProblem]]:
    """Every document of one file (dbt writes one, MetricFlow's own format several)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return [], [YamlProblem(path, line, None, f"not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})")]
    text = text.removeprefix("\ufeff")
    docs: list[Doc] = []
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = mark.line + 1 if mark else None
        return [], [YamlProblem(path, at, None, f"YAML syntax error: {exc.problem or exc}")]
    except yaml.YAMLError as exc:
        return [], [YamlProblem(path, None, None, f"YAML error: {exc}")]
    except RecursionError:
        return [], [YamlProblem(path, None, None, f"nested too deeply to read (the limit is {MAX_DEPTH} levels)")]
    for node in nodes:
        if node is None:
            continue
        lines: dict[KeyPath, int] = {}

        try:
            docs.append(Doc(path, _Walker().plain(node, (), lines), lines))
        except _Stop as stop:
            return [], [YamlProblem(path, stop.line, stop.key, stop.message)]
        except RecursionError:
            return [], [YamlProblem(path, None, None, f"nested too deeply to read (the limit is {MAX_DEPTH} levels)")]
    return docs, []
