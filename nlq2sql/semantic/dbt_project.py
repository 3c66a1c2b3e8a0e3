"""Where dbt put a model: ``ref('x')`` → the schema and alias dbt builds it as, for a folder of dbt YAML.

As dbt's default ``generate_schema_name``: the profile target's schema, or
``<target schema>_<custom>`` for a custom schema, under a configured ``alias``; read from the
``dbt_project.yml`` at or above the folder, its profile (``--profiles-dir``, ``$DBT_PROFILES_DIR``,
the project folder, ``~/.dbt``), folder ``+schema``/``+alias``, properties ``config:`` and SQL
``{{ config(...) }}``. ``--db-schema`` overrides every relation. With neither, the schema is
``main``; a ``dbt_project.yml`` without its profile is a problem, never a silent ``main``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlq2sql.errors import SemanticModelError
from nlq2sql.semantic.yamlsafe import load_documents

__all__ = ["DEFAULT_SCHEMA", "DbtOptions", "DbtTarget", "Relation", "dbt_target", "find_dbt_project", "quote_ident"]

#: DuckDB's default schema: where a relation lives when nothing says otherwise.
DEFAULT_SCHEMA = "main"
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")
_SQL_CONFIG = re.compile(r"\{\{\s*config\s*\((.*?)\)\s*\}\}", re.S)
_ENV_VAR = re.compile(r"""\{\{\s*env_var\(\s*(['"])([^'"]+)\1\s*(?:,\s*(['"])([^'"]*)\3\s*)?\)\s*\}\}""")


def quote_ident(name: str) -> str:
    """An identifier as SQL: bare when plain lower-case, else double-quoted."""
    return name if _PLAIN.fullmatch(name) else '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Relation:
    """Where a model's rows are: schema and alias (dbt's database name is kept, not rendered:
    DuckDB names an attached file's catalog after the file, so the default catalog is used)."""

    schema: str
    alias: str
    database: str | None = None

    @property
    def sql(self) -> str:
        return f"{quote_ident(self.schema)}.{quote_ident(self.alias)}"

    def node_relation(self) -> dict[str, Any]:
        """MetricFlow's ``node_relation``; ``relation_name`` (what its SQL names) without the database."""
        out: dict[str, Any] = {"alias": self.alias, "schema_name": self.schema, "relation_name": self.sql}
        if self.database is not None:
            out["database"] = self.database
        return out


@dataclass(frozen=True)
class DbtOptions:
    """The CLI's options for resolving relations: ``--db-schema``, ``--profiles-dir``, ``--target``."""

    db_schema: str | None = None
    profiles_dir: str | None = None
    target: str | None = None


@dataclass
class DbtTarget:
    """How ``ref()`` resolves for one semantic layer: the target schema, the project's custom
    schemas and aliases by model, and where that came from (said in messages)."""

    schema: str
    source: str  # "--db-schema", "default", or "profile NAME target T (file)"
    override: bool = False
    project_name: str | None = None
    project_dir: Path | None = None
    custom: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # model → (schema, alias)

    @property
    def is_default(self) -> bool:
        return self.source == "default"

    def relation(self, model: str) -> Relation:
        """``ref(model)`` as dbt builds it (dbt's default ``generate_schema_name`` and alias)."""
        custom, alias = self.custom.get(model, (None, None))
        schema = self.schema if self.override or not custom else f"{self.schema}_{custom.strip()}"
        return Relation(schema=schema, alias=alias or model)


def find_dbt_project(start: Path) -> Path | None:
    """The folder holding ``dbt_project.yml`` at or above ``start``."""
    here = start.resolve()
    if here.is_file():
        here = here.parent
    for folder in (here, *here.parents):
        if (folder / "dbt_project.yml").is_file():
            return folder
    return None


def _yaml(path: Path) -> Any:
    docs, problems = load_documents(str(path), path.read_bytes())
    if problems:
        p = problems[0]
        raise SemanticModelError(p.message, path=p.path, line=p.line, field=p.key)
    return docs[0].data if docs else None


def _render(value: object, where: str) -> str:
    """A profile value: ``{{ env_var('X', 'default') }}`` is read as dbt does; other Jinja is refused."""
    text = str(value)

    def env(m: re.Match[str]) -> str:
        got = os.environ.get(m.group(2), m.group(4))
        if got is None:
            raise SemanticModelError(f"environment variable {m.group(2)} is not set (pass --db-schema)", field=where)
        return got

    text = _ENV_VAR.sub(env, text)
    if "{{" in text or "{%" in text:
        raise SemanticModelError(f"cannot evaluate the Jinja in {value!r}: pass --db-schema", field=where)
    return text


def _profiles_file(project_dir: Path, opts: DbtOptions) -> tuple[Path | None, list[str]]:
    dirs = [d for d in (opts.profiles_dir, os.environ.get("DBT_PROFILES_DIR")) if d]
    dirs += [str(project_dir), str(Path.home() / ".dbt")]
    for d in dirs:
        if (Path(d) / "profiles.yml").is_file():
            return Path(d) / "profiles.yml", dirs
    return None, dirs


def _profile_schema(project_dir: Path, profile: str, opts: DbtOptions) -> tuple[str, str]:
    """The target schema of the project's profile and a description of where it was found."""
    file, searched = _profiles_file(project_dir, opts)
    hint = "pass --profiles-dir (the folder of profiles.yml) or --db-schema"
    if file is None:
        raise SemanticModelError(f"dbt project's profile {profile!r}: no profiles.yml in {', '.join(searched)}; {hint}",
                                 path=str(project_dir / "dbt_project.yml"), field="profile")
    data = _yaml(file)
    prof = data.get(profile) if isinstance(data, dict) else None
    if not isinstance(prof, dict) or not isinstance(prof.get("outputs"), dict):
        raise SemanticModelError(f"no profile {profile!r} with outputs: in it; {hint}", path=str(file), field=profile)
    target = opts.target or _render(prof.get("target", "default"), f"{profile}.target")
    out = prof["outputs"].get(target)
    if not isinstance(out, dict):
        known = ", ".join(map(str, prof["outputs"])) or "none"
        raise SemanticModelError(f"no target {target!r} (targets: {known}); pass --target", path=str(file),
                                 field=f"{profile}.outputs")
    schema = out.get("schema")
    if schema is None and str(out.get("type", "")).lower() == "duckdb":
        schema = DEFAULT_SCHEMA  # dbt-duckdb's default
    if schema is None:
        raise SemanticModelError(f"target {target!r} names no schema; pass --db-schema", path=str(file),
                                 field=f"{profile}.outputs.{target}")
    return _render(schema, f"{profile}.outputs.{target}.schema"), f"profile {profile!r} target {target!r} ({file})"


def _config_tree(node: object, parts: tuple[str, ...]) -> dict[str, str]:
    """``+schema``/``+alias`` along a folder path of ``dbt_project.yml``'s ``models:``/``seeds:`` (deepest wins)."""
    got: dict[str, str] = {}
    for i in range(len(parts) + 1):
        if not isinstance(node, dict):
            break
        for key in ("schema", "alias"):
            value = node.get("+" + key, node.get(key))
            if isinstance(value, str):
                got[key] = value
        if i < len(parts):
            node = node.get(parts[i])
    return got


def _paths(cfg: dict[str, Any], key: str, default: str) -> list[str]:
    value = cfg.get(key, [default])
    return [str(v) for v in value] if isinstance(value, list) else [default]


def _custom(project_dir: Path, cfg: dict[str, Any], name: str) -> dict[str, tuple[str | None, str | None]]:
    """Every model's and seed's custom schema and alias, by name: dbt_project.yml by folder, then
    properties ``config:``, then the SQL's ``{{ config() }}`` (dbt's precedence, last wins)."""
    layers: tuple[dict[str, dict[str, str]], ...] = ({}, {}, {})
    for kind, key, default, suffix in (("models", "model-paths", "models", ".sql"),
                                       ("seeds", "seed-paths", "seeds", ".csv")):
        tree = cfg.get(kind)
        for base in _paths(cfg, key, default):
            root = project_dir / base
            if not root.is_dir():
                continue
            for f in sorted(root.rglob("*")):
                if not f.is_file():
                    continue
                if f.suffix == suffix:
                    parts = (name, *f.relative_to(root).parts[:-1])
                    layers[0][f.stem] = _config_tree(tree, parts) if isinstance(tree, dict) else {}
                    if suffix == ".sql":
                        layers[2][f.stem] = _sql_config(f)
                elif f.suffix in (".yml", ".yaml"):
                    _properties(f, kind, layers[1])
    out: dict[str, tuple[str | None, str | None]] = {}
    for model in set().union(*layers):
        merged: dict[str, str] = {}
        for layer in layers:
            merged.update(layer.get(model, {}))
        out[model] = (merged.get("schema"), merged.get("alias"))
    return out


def _properties(file: Path, kind: str, found: dict[str, dict[str, str]]) -> None:
    try:
        data = _yaml(file)
    except (SemanticModelError, OSError, UnicodeDecodeError):
        return  # the semantic layer's own reading reports a broken file
    items = data.get(kind) if isinstance(data, dict) else None
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("config"), dict):
            conf = {k: item["config"][k] for k in ("schema", "alias") if isinstance(item["config"].get(k), str)}
            found.setdefault(item["name"], {}).update(conf)


def _sql_config(file: Path) -> dict[str, str]:
    try:
        text = file.read_text(errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for m in _SQL_CONFIG.finditer(text):
        for key in ("schema", "alias"):
            got = re.search(rf"""\b{key}\s*=\s*(['"])([^'"]+)\1""", m.group(1))
            if got:
                out[key] = got.group(2)
    return out


def dbt_target(path: Path, opts: DbtOptions | None = None) -> DbtTarget:
    """How ``ref()`` resolves for the semantic layer at ``path`` (a file or folder of dbt YAML)."""
    opts = opts or DbtOptions()
    project_dir = find_dbt_project(path)
    if project_dir is None:
        if opts.db_schema:
            return DbtTarget(schema=opts.db_schema, source="--db-schema", override=True)
        return DbtTarget(schema=DEFAULT_SCHEMA, source="default")
    cfg = _yaml(project_dir / "dbt_project.yml")
    if not isinstance(cfg, dict):
        raise SemanticModelError("not a dbt project file (expected a mapping)",
                                 path=str(project_dir / "dbt_project.yml"))
    name = str(cfg.get("name") or project_dir.name)
    custom = _custom(project_dir, cfg, name)
    if opts.db_schema:
        return DbtTarget(schema=opts.db_schema, source="--db-schema", override=True, project_name=name,
                         project_dir=project_dir, custom=custom)
    profile = cfg.get("profile")
    if not isinstance(profile, str):
        raise SemanticModelError("dbt_project.yml names no profile: pass --db-schema",
                                 path=str(project_dir / "dbt_project.yml"), field="profile")
    schema, source = _profile_schema(project_dir, profile, opts)
    return DbtTarget(schema=schema, source=source, project_name=name, project_dir=project_dir, custom=custom)
