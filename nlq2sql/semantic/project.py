"""A team's dbt project, as it is, → one MetricFlow semantic manifest (every problem at once).

Does the conversion dbt-core does for ``target/semantic_manifest.json`` (also read directly): plural
lists beside ordinary dbt keys and ``model: ref('orders')`` → MetricFlow's objects with file and line,
its transformations and validator. Nothing of the meaning is ours: problems are MetricFlow's words
with the file, line and key."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlq2sql.errors import SemanticModelError
from nlq2sql.semantic.dbt_project import DbtOptions, DbtTarget, Relation, dbt_target, find_dbt_project
from nlq2sql.semantic.yamlsafe import Doc, Key, KeyPath, YamlProblem, load_documents

__all__ = ["DBT_KEYS", "Problem", "Project", "SemanticProblems", "TimeSpine", "project_name", "read_project",
           "ref_table"]

#: Ordinary dbt keys a properties file may hold beside the semantic layer: skipped.
DBT_KEYS = frozenset({"version", "models", "sources", "seeds", "snapshots", "analyses", "macros", "unit_tests",
                      "data_tests", "exposures", "groups", "config", "meta", "tests", "semantic_layer"})
_SKIP_FILES = frozenset({"dbt_project.yml", "profiles.yml", "packages.yml", "selectors.yml", "dependencies.yml",
                         "package-lock.yml"})
_SKIP_DIRS = frozenset({"target", "dbt_packages", "logs", "node_modules", ".venv", ".git"})
_REF = re.compile(r"""^\s*ref\(\s*(['"])([^'"]+)\1\s*(?:,\s*(['"])[^'"]*\3\s*)?\)\s*$""")
MAX_FILES = 2_000
MAX_FILE_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class Problem(YamlProblem):
    """One problem of a project; printed as ``file:line: field 'key': message``."""

    def __str__(self) -> str:
        where = self.path + (f":{self.line}" if self.line else "")
        return where + (f": field '{self.key}'" if self.key else "") + f": {self.message}"


class SemanticProblems(SemanticModelError):
    """Every problem found in one pass; the CLI prints them all and exits 2."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        first = problems[0]
        head = (f"{len(problems)} problems in the semantic layer:\n" if len(problems) > 1 else "")
        body = "\n".join(str(p) for p in problems) if len(problems) > 1 else first.message
        if len(problems) > 1:
            super().__init__(head + body)
        else:
            super().__init__(body, path=first.path, line=first.line, field=first.key)


@dataclass(frozen=True)
class TimeSpine:
    """A daily time spine: the one a project declares (dbt ``time_spine:`` config, or a dbt
    manifest's ``project_configuration``), dbt's legacy table, or the generated one."""

    table: str
    column: str
    schema: str = "main"

    @property
    def relation(self) -> Relation:
        return Relation(schema=self.schema, alias=self.table)


@dataclass
class Project:
    """What was read: the raw objects with their origins, before MetricFlow builds them."""

    name: str
    path: str
    sha256: str
    semantic_models: list[tuple[dict[str, Any], Doc, KeyPath]] = field(default_factory=list)
    metrics: list[tuple[dict[str, Any], Doc, KeyPath]] = field(default_factory=list)
    saved_queries: list[tuple[dict[str, Any], Doc, KeyPath]] = field(default_factory=list)
    declared_spine: TimeSpine | None = None
    problems: list[Problem] = field(default_factory=list)  # found while reading: reported with MetricFlow's
    manifest_json: dict[str, Any] | None = None  # a dbt-written semantic_manifest.json, read as is
    target: DbtTarget = field(default_factory=lambda: DbtTarget(schema="main", source="default"))
    spine_models: list[tuple[str, str]] = field(default_factory=list)  # folder: (model, column) with time_spine:

    def relation(self, model: str) -> Relation:
        """Where ``ref(model)`` lives (:mod:`.dbt_project`)."""
        return self.target.relation(model)

    @property
    def legacy_spine(self) -> TimeSpine:
        """dbt's legacy convention: a ``metricflow_time_spine`` model with a ``date_day`` column,
        where ``ref('metricflow_time_spine')`` would be built."""
        rel = self.relation("metricflow_time_spine")
        return TimeSpine(table=rel.alias, column="date_day", schema=rel.schema)

    def origin(self, kind: str, name: str) -> tuple[Doc, KeyPath] | None:
        items = {"semantic_model": self.semantic_models, "metric": self.metrics,
                 "saved_query": self.saved_queries}[kind]
        for obj, doc, at in items:
            if obj.get("name") == name:
                return doc, at
        return None

    def locate(self, kind: str, name: str, *keys: Key) -> tuple[str, int | None]:
        """File and line of an object (or of one of its keys; list items addressed by name)."""
        found = self.origin(kind, name)
        if found is None:
            return self.path, None
        doc, at = found
        path: list[Key] = list(at)
        node: Any = doc.data  # the YAML document, walked
        for k in at:
            node = node[k]
        for key in keys:
            if isinstance(node, list):
                idx = next((i for i, x in enumerate(node) if isinstance(x, dict) and x.get("name") == key), None)
                if idx is None:
                    break
                path.append(idx)
                node = node[idx]
            elif isinstance(node, dict) and key in node:
                path.append(key)
                node = node[key]
            else:
                break
        return doc.path, doc.line(*path)


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise SemanticModelError("no such file or folder", path=str(root))
    found: list[Path] = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).parts
        if any(part in _SKIP_DIRS or part.startswith(".") for part in rel):  # dot-files too (dbt's .user.yml)
            continue
        if p.suffix in (".yml", ".yaml") and p.name not in _SKIP_FILES and p.is_file():
            found.append(p)
    if not found:
        raise SemanticModelError("folder holds no .yml/.yaml file", path=str(root))
    if len(found) > MAX_FILES:
        raise SemanticModelError(f"more than {MAX_FILES} YAML files: point at the models folder", path=str(root))
    return found


def _spine_of(model: object) -> tuple[str, str] | None:
    """dbt 1.9's time spine model: ``time_spine: {standard_granularity_column: date_day}`` → (model, column)."""
    if not isinstance(model, dict) or not isinstance(model.get("time_spine"), dict):
        return None
    col = model["time_spine"].get("standard_granularity_column")
    name = model.get("name")
    if isinstance(col, str) and isinstance(name, str):
        return name, col
    return None


def project_name(path: Path) -> str | None:
    """The dbt project's ``name`` (its ``dbt_project.yml`` at or above ``path``), else None."""
    folder = find_dbt_project(path)
    if folder is None:
        return None
    try:
        docs, _ = load_documents("dbt_project.yml", (folder / "dbt_project.yml").read_bytes())
    except OSError:
        return None
    data = docs[0].data if docs else None
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else folder.name


def read_project(root: Path, *, name: str, display: str, dbt: DbtOptions | None = None) -> Project:
    """Read a file or folder; raises :class:`SemanticProblems` listing every problem found.
    ``dbt``: how relations resolve (``--db-schema``, ``--profiles-dir``, ``--target``)."""
    if root.is_file() and root.suffix == ".json":
        return _read_manifest_json(root, name=name, display=display, dbt=dbt)
    files = _files(root)
    digest = hashlib.sha256()
    problems: list[Problem] = []
    project = Project(name=name, path=display, sha256="", target=dbt_target(root, dbt))
    for file in files:
        shown = _display_file(file, root, display)
        try:
            if file.stat().st_size > MAX_FILE_BYTES:
                problems.append(Problem(shown, None, None, f"larger than {MAX_FILE_BYTES // 1024 // 1024} MiB"))
                continue
            raw = file.read_bytes()
        except OSError as exc:
            problems.append(Problem(shown, None, None, f"cannot read: {exc.strerror or exc}"))
            continue
        digest.update(shown.encode() + b"\0" + raw + b"\0")
        docs, yproblems = load_documents(shown, raw)
        problems += [Problem(p.path, p.line, p.key, p.message) for p in yproblems]
        for doc in docs:
            problems += _take(project, doc)
    project.sha256 = digest.hexdigest()
    if project.spine_models:
        model, column = project.spine_models[-1]
        rel = project.relation(model)
        project.declared_spine = TimeSpine(table=rel.alias, column=column, schema=rel.schema)
    elif "metricflow_time_spine" in project.target.custom:  # dbt declares the legacy spine for such a model
        project.declared_spine = project.legacy_spine
    if not project.semantic_models:
        if not problems:
            problems.append(Problem(display, None, None, "no semantic_models defined"))
        raise SemanticProblems(problems)
    project.problems = problems  # the objects that were read still go to MetricFlow: one report of all
    return project


_KINDS = {"semantic_models": "semantic_models", "semantic_model": "semantic_models", "metrics": "metrics",
          "metric": "metrics", "saved_queries": "saved_queries", "saved_query": "saved_queries"}


def _take(project: Project, doc: Doc) -> list[Problem]:
    """File one document's objects into the project; the problems of its shape."""
    if doc.data is None:
        return []
    if not isinstance(doc.data, dict):
        return [Problem(doc.path, doc.line(), None, "top level must be a mapping (semantic_models:, metrics: …)")]
    out: list[Problem] = []
    for key, value in doc.data.items():
        if key in DBT_KEYS:
            if key == "models" and isinstance(value, list):
                for m in value:
                    spine = _spine_of(m)
                    if spine is not None:
                        project.spine_models.append(spine)
            continue
        if key == "project_configuration":
            continue  # MetricFlow's own format: the time spine is chosen by the binding
        kind = _KINDS.get(str(key))
        if kind is None:
            out.append(Problem(doc.path, doc.line(key), str(key),
                               "unknown top-level key (expected semantic_models, metrics, saved_queries or a dbt key)"))
            continue
        if value is None:
            continue  # an empty key, as dbt allows
        items = [(value, (key,))] if not key.endswith("s") else (
            [(v, (key, i)) for i, v in enumerate(value)] if isinstance(value, list) else [])
        if key.endswith("s") and not isinstance(value, list):
            out.append(Problem(doc.path, doc.line(key), str(key), "must be a list"))
            continue
        for obj, at in items:
            if not isinstance(obj, dict):
                out.append(Problem(doc.path, doc.line(*at), ".".join(map(str, at)), "must be a mapping"))
                continue
            getattr(project, kind).append((obj, doc, at))
    return out


def _display_file(file: Path, root: Path, display: str) -> str:
    if root.is_file():
        return display
    return str(Path(display) / file.relative_to(root))


def _read_manifest_json(path: Path, *, name: str, display: str, dbt: DbtOptions | None) -> Project:
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SemanticModelError(f"cannot read semantic_manifest.json: {exc}", path=display) from None
    if not isinstance(data, dict) or "semantic_models" not in data:
        raise SemanticModelError("not a dbt semantic_manifest.json (no semantic_models key)", path=display)
    override = dbt.db_schema if dbt is not None else None
    schemas = [sm["node_relation"].get("schema_name") for sm in data.get("semantic_models") or ()
               if isinstance(sm, dict) and isinstance(sm.get("node_relation"), dict)]
    usual = max(set(schemas), key=schemas.count) if schemas else "main"  # dbt's target schema, most likely
    target = (DbtTarget(schema=override, source="--db-schema", override=True) if override
              else DbtTarget(schema=str(usual), source="manifest"))
    project = Project(name=name, path=display, sha256=hashlib.sha256(raw).hexdigest(), manifest_json=data,
                      target=target)
    project.declared_spine = _manifest_spine(data.get("project_configuration"), override)
    return project


def _unquote(part: str) -> str:
    part = part.strip()
    return part[1:-1].replace('""', '"') if len(part) > 1 and part[0] == part[-1] == '"' else part


def _manifest_spine(config: object, override: str | None) -> TimeSpine | None:
    """The day-grain time spine a dbt manifest's ``project_configuration`` declares: ``time_spines``
    (dbt 1.9+), else the legacy ``time_spine_table_configurations``; None when it declares none."""
    if not isinstance(config, dict):
        return None
    spines = [s for s in config.get("time_spines") or () if isinstance(s, dict)]
    for s in sorted(spines, key=lambda s: str((s.get("primary_column") or {}).get("time_granularity")) != "day"):
        rel, col = s.get("node_relation") or {}, (s.get("primary_column") or {}).get("name")
        if isinstance(rel, dict) and rel.get("alias") and rel.get("schema_name") and isinstance(col, str):
            return TimeSpine(table=str(rel["alias"]), column=col, schema=override or str(rel["schema_name"]))
    for legacy in config.get("time_spine_table_configurations") or ():
        if not isinstance(legacy, dict) or str(legacy.get("grain", "day")).lower() != "day":
            continue
        parts = [_unquote(p) for p in str(legacy.get("location", "")).split(".")]
        if len(parts) >= 2 and isinstance(legacy.get("column_name"), str):
            return TimeSpine(table=parts[-1], column=legacy["column_name"], schema=override or parts[-2])
    return None


def ref_table(model: object) -> str | None:
    """``ref('orders')`` → ``orders`` (dbt's model reference), else None."""
    if not isinstance(model, str):
        return None
    m = _REF.match(model)
    return m.group(2) if m else None
