"""dbt Semantic Layer YAML (MetricFlow's format), the subset nlq2sql reads, as typed models.

The files are read with PyYAML's node API so every key keeps its line: a bad file gets
one message naming file, line and key.  ``dbt-semantic-interfaces`` parses a dbt project
(one key per YAML document, a ``dbt_project.yml``); teams' semantic models usually sit in
one or several plain files with ``semantic_models:`` and ``metrics:`` side by side, which
is what is read here, with the same field names and meanings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..errors import SemanticModelError

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
REF = re.compile(r"""^\s*ref\(\s*(['"])([A-Za-z_][A-Za-z0-9_]{0,62})\1\s*\)\s*$""")
YAML_SUFFIXES = (".yml", ".yaml")


def _ident(value: str) -> str:
    if not IDENT.match(value):
        raise ValueError(f"{value!r} is not a plain identifier (letters, digits, _)")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Entity(_Strict):
    name: str
    type: Literal["primary", "foreign", "unique", "natural"]
    expr: str | None = None
    description: str = ""
    _check = field_validator("name")(_ident)


class TypeParams(_Strict):
    time_granularity: Literal["day", "week", "month", "quarter", "year"] | None = None


class Dimension(_Strict):
    name: str
    type: Literal["categorical", "time"]
    expr: str | None = None
    description: str = ""
    label: str | None = None
    is_partition: bool = False
    type_params: TypeParams | None = None
    _check = field_validator("name")(_ident)


class Measure(_Strict):
    name: str
    agg: Literal["sum", "count", "count_distinct", "average", "min", "max"]
    expr: str | int | None = None
    description: str = ""
    label: str | None = None
    create_metric: bool = False
    agg_time_dimension: str | None = None
    _check = field_validator("name")(_ident)


class Defaults(_Strict):
    agg_time_dimension: str | None = None


class SemanticModelSpec(_Strict):
    name: str
    model: str
    description: str = ""
    label: str | None = None
    defaults: Defaults | None = None
    primary_entity: str | None = None
    entities: tuple[Entity, ...] = ()
    dimensions: tuple[Dimension, ...] = ()
    measures: tuple[Measure, ...] = ()
    _check = field_validator("name")(_ident)

    @field_validator("model")
    @classmethod
    def _ref(cls, value: str) -> str:
        if not REF.match(value):
            raise ValueError(f"model must be ref('TABLE'), got {value!r}")
        return value

    @property
    def table(self) -> str:
        m = REF.match(self.model)
        assert m is not None  # checked by the validator
        return m.group(2)


class MetricParams(_Strict):
    measure: str | None = None
    numerator: str | None = None
    denominator: str | None = None


class MetricSpec(_Strict):
    name: str
    type: Literal["simple", "ratio"]
    type_params: MetricParams
    label: str | None = None
    description: str = ""
    _check = field_validator("name")(_ident)


class _File(_Strict):
    semantic_models: tuple[SemanticModelSpec, ...] = ()
    metrics: tuple[MetricSpec, ...] = ()


@dataclass(frozen=True)
class Located:
    """Where one element came from: file and line, for messages."""

    path: str
    line: int


@dataclass(frozen=True)
class Spec:
    """Everything read from one semantic-model file or folder, with each element's origin."""

    name: str
    path: str
    sha256: str
    semantic_models: tuple[SemanticModelSpec, ...]
    metrics: tuple[MetricSpec, ...]
    where: dict[tuple[str, str], Located]  # ("model"|"metric", name) → origin
    lines: dict[tuple[str, tuple[Any, ...]], int]  # (file, key path) → line

    def locate(self, kind: str, name: str, *keys: Any) -> tuple[str, int | None]:
        """File and line of an element (or of one of its keys, when known)."""
        loc = self.where.get((kind, name))
        if loc is None:
            return self.path, None
        for n in range(len(keys), -1, -1):
            line = self.lines.get((loc.path, (kind, name, *keys[:n])))
            if line is not None:
                return loc.path, line
        return loc.path, loc.line


def _plain(node: yaml.Node, path: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> Any:
    """A composed YAML node → plain Python, recording the line of each key path (1-based)."""
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for knode, vnode in node.value:
            key = yaml.safe_load(yaml.serialize(knode)) if not isinstance(knode, yaml.ScalarNode) else knode.value
            lines[(*path, key)] = knode.start_mark.line + 1
            out[key] = _plain(vnode, (*path, key), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_plain(v, (*path, i), lines) for i, v in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


def _read_file(path: Path) -> tuple[Any, dict[tuple[Any, ...], int]]:
    if not path.is_file():
        raise SemanticModelError("not a regular file", path=str(path))
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SemanticModelError(f"not UTF-8 (byte offset {exc.start})", path=str(path)) from None
    except OSError as exc:
        raise SemanticModelError(f"cannot read: {exc.strerror}", path=str(path)) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SemanticModelError(f"YAML syntax error: {exc.problem or exc}", path=str(path),
                                 line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise SemanticModelError(f"YAML error: {exc}", path=str(path)) from None
    if node is None:
        raise SemanticModelError("empty file: expected semantic_models: and/or metrics:", path=str(path))
    lines: dict[tuple[Any, ...], int] = {}
    return _plain(node, (), lines), lines


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in YAML_SUFFIXES and p.is_file())
        if not files:
            raise SemanticModelError("folder holds no .yml/.yaml file", path=str(path))
        return files
    if not path.exists():
        raise SemanticModelError("no such file or folder", path=str(path))
    return [path]


def read_spec(path: Path, *, name: str | None = None, display: str | None = None) -> Spec:
    """Read one file or every ``.yml``/``.yaml`` file under a folder into one :class:`Spec`."""
    import hashlib

    digest = hashlib.sha256()
    models: list[SemanticModelSpec] = []
    metrics: list[MetricSpec] = []
    where: dict[tuple[str, str], Located] = {}
    all_lines: dict[tuple[str, tuple[Any, ...]], int] = {}
    for file in _files(path):
        src = str(file)
        data, lines = _read_file(file)
        digest.update(file.read_bytes())
        if not isinstance(data, dict):
            raise SemanticModelError("top level must be a mapping with semantic_models: and/or metrics:",
                                     path=src, line=1)
        unknown = [k for k in data if k not in ("semantic_models", "metrics")]
        if unknown:
            raise SemanticModelError(f"unknown top-level key {unknown[0]!r} (expected semantic_models, metrics)",
                                     path=src, line=lines.get((unknown[0],)), field=str(unknown[0]))
        try:
            parsed = _File.model_validate({k: v if v is not None else [] for k, v in data.items()})
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = tuple(err["loc"])
            line = None
            for n in range(len(loc), -1, -1):
                line = lines.get(loc[:n])
                if line is not None:
                    break
            raise SemanticModelError(err["msg"], path=src, line=line,
                                     field=_field_name(data, loc)) from None
        for i, sm in enumerate(parsed.semantic_models):
            if ("model", sm.name) in where:
                first = where[("model", sm.name)]
                raise SemanticModelError(f"semantic model {sm.name!r} defined twice (first at {first.path}:"
                                         f"{first.line})", path=src,
                                         line=lines.get(("semantic_models", i)), field=f"semantic_models.{sm.name}")
            where[("model", sm.name)] = Located(src, lines.get(("semantic_models", i), 1))
            _index(all_lines, src, lines, ("semantic_models", i), ("model", sm.name), data["semantic_models"][i])
            models.append(sm)
        for i, m in enumerate(parsed.metrics):
            if ("metric", m.name) in where:
                first = where[("metric", m.name)]
                raise SemanticModelError(f"metric {m.name!r} defined twice (first at {first.path}:{first.line})",
                                         path=src, line=lines.get(("metrics", i)), field=f"metrics.{m.name}")
            where[("metric", m.name)] = Located(src, lines.get(("metrics", i), 1))
            _index(all_lines, src, lines, ("metrics", i), ("metric", m.name), data["metrics"][i])
            metrics.append(m)
    if not models:
        raise SemanticModelError("no semantic_models defined", path=str(path))
    if not metrics:
        raise SemanticModelError("no metrics defined", path=str(path))
    stem = path.stem if path.is_file() else path.name
    return Spec(name=name or stem, path=display or str(path), sha256=digest.hexdigest(),
                semantic_models=tuple(models), metrics=tuple(metrics), where=where, lines=all_lines)


def _index(out: dict[tuple[str, tuple[Any, ...]], int], src: str, lines: dict[tuple[Any, ...], int],
           prefix: tuple[Any, ...], key: tuple[str, str], raw: Any) -> None:
    """Re-key line numbers of one element by (kind, name, sub-keys with list items by name)."""
    n = len(prefix)
    for path, line in lines.items():
        if path[:n] != prefix:
            continue
        rest = list(path[n:])
        # entities/dimensions/measures items are addressed by their name, not their index
        if len(rest) >= 2 and isinstance(rest[1], int) and isinstance(raw, dict):
            items = raw.get(rest[0])
            if isinstance(items, list) and rest[1] < len(items) and isinstance(items[rest[1]], dict):
                rest[1] = items[rest[1]].get("name", rest[1])
        out[(src, (*key, *rest))] = line


def _field_name(data: Any, loc: tuple[Any, ...]) -> str:
    """A dotted key path where list items are named by their ``name`` when they have one."""
    parts: list[str] = []
    node = data
    for key in loc:
        if isinstance(node, list) and isinstance(key, int) and key < len(node):
            item = node[key]
            parts.append(str(item.get("name", key)) if isinstance(item, dict) else str(key))
            node = item
        elif isinstance(node, dict):
            parts.append(str(key))
            node = node.get(key)
        else:
            parts.append(str(key))
            node = None
    return ".".join(parts)


__all__ = ["Dimension", "Entity", "Measure", "MetricSpec", "SemanticModelSpec", "Spec", "read_spec"]

