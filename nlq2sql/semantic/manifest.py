"""Read objects → MetricFlow's semantic manifest, transformed and validated by MetricFlow.

Each object is built on its own (one malformed metric hides no other problem) with its file and line
as metadata, so MetricFlow's issues name them. Objects are checked against MetricFlow's JSON Schema
widened by the keys dbt-core accepts (:data:`DBT_ONLY_KEYS`); a misspelt key is still refused. A
dbt ``semantic_manifest.json`` goes through MetricFlow's dbt reader. Relations render as
``schema.alias`` (DuckDB names an attached file after the file). Time spine (chosen by
:mod:`.catalog`): the declared one, else a ``metricflow_time_spine`` table, else
:data:`GENERATED_SPINE`, inlined as a ``range()`` over the data's dates (the warehouse is never written)."""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from nlq2sql.semantic.dbt_project import Relation
from nlq2sql.semantic.mf import mf_problem, mf_reason, quiet
from nlq2sql.semantic.project import Problem, Project, SemanticProblems, TimeSpine, ref_table
from nlq2sql.semantic.yamlsafe import Doc, KeyPath

if TYPE_CHECKING:
    from metricflow_semantic_interfaces.implementations.semantic_manifest import PydanticSemanticManifest
    from metricflow_semantic_interfaces.validations.validator_helpers import ValidationIssue

__all__ = ["DBT_ONLY_KEYS", "GENERATED_SPINE", "build_manifest"]

#: The relation a generated spine is rendered as; replaced by an inline range() at compile time.
GENERATED_SPINE = TimeSpine(table="nlq2sql_generated_time_spine", column="date_day")
_ANY_OBJECT: dict[str, Any] = {"type": "object"}
_TAGS: dict[str, Any] = {"type": ["string", "array"], "items": {"type": "string"}}
#: Keys dbt-core accepts (``dbt/contracts/graph/unparsed.py``: ``UnparsedSemanticModel``,
#: ``UnparsedEntity``, ``UnparsedDimension``, ``UnparsedMeasure``, ``UnparsedMetric``,
#: ``UnparsedSavedQuery``, ``UnparsedExport``) that MetricFlow's JSON Schema for the same object
#: lacks, by that schema's ``$id``.  ``config`` is a free mapping in dbt (``meta``, ``enabled``,
#: ``group``, ``tags`` …): every ``*_config_schema`` reference becomes a plain object.
DBT_ONLY_KEYS: dict[str, dict[str, Any]] = {
    "semantic_model_schema": {"config": _ANY_OBJECT},
    "entity_schema": {"description": {"type": "string"}, "config": _ANY_OBJECT},
    "dimension_schema": {"config": _ANY_OBJECT},
    "measure_schema": {"config": _ANY_OBJECT},
    "metric_schema": {"meta": _ANY_OBJECT, "tags": _TAGS, "config": _ANY_OBJECT},
    "saved_query_schema": {"config": _ANY_OBJECT, "tags": _TAGS},
    "export_schema": {"config": _ANY_OBJECT},
}


@lru_cache(maxsize=1)
def _validators() -> dict[str, Any]:
    """MetricFlow's JSON Schemas for a semantic model, a metric and a saved query, with
    :data:`DBT_ONLY_KEYS` added: as strict as dbt about unknown keys, no stricter."""
    from metricflow_semantic_interfaces.parsing import schemas
    from metricflow_semantic_interfaces.parsing.schema_validator import SchemaValidator
    from referencing import Registry
    from referencing.jsonschema import DRAFT7

    store = cast("dict[str, Any]", copy.deepcopy(schemas.schema_store))
    for sid, extra in DBT_ONLY_KEYS.items():
        store[sid]["properties"].update(copy.deepcopy(extra))
    registry: Any = Registry().with_resources([(str(k), DRAFT7.create_resource(v)) for k, v in store.items()])
    return {"semantic_models": SchemaValidator(store["semantic_model_schema"], registry=registry),
            "metrics": SchemaValidator(store["metric_schema"], registry=registry),
            "saved_queries": SchemaValidator(store["saved_query_schema"], registry=registry)}


def _mf_config(obj: dict[str, Any], meta: object = None) -> None:
    """dbt's ``config`` (any keys) → MetricFlow's (``meta`` only); a top-level ``meta`` merges in, as dbt does."""
    config = obj.get("config")
    merged = dict(meta) if isinstance(meta, dict) else {}
    if isinstance(config, dict) and isinstance(config.get("meta"), dict):
        merged.update(config["meta"])
    if "config" in obj or merged:
        obj["config"] = {"meta": merged} if merged else None
    if obj.get("config") is None:
        obj.pop("config", None)


def _to_mf(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Drop (or map) the keys dbt accepts that MetricFlow's objects do not take."""
    _mf_config(obj, obj.pop("meta", None))
    if kind == "metrics":
        obj.pop("tags", None)
    if kind == "semantic_models":
        for group in ("entities", "dimensions", "measures"):
            for el in obj.get(group) or ():
                if isinstance(el, dict):
                    _mf_config(el)
    if kind == "saved_queries":
        for export in obj.get("exports") or ():
            if isinstance(export, dict) and isinstance(export.get("config"), dict):
                conf = export["config"]
                if "schema_name" in conf and "schema" not in conf:
                    conf["schema"] = conf.pop("schema_name")
                export["config"] = {k: v for k, v in conf.items() if k in ("export_as", "schema", "alias")}
    return obj


def disabled(raw: dict[str, Any]) -> bool:
    """``config: {enabled: false}``: dbt leaves the object out."""
    config = raw.get("config")
    return isinstance(config, dict) and config.get("enabled") is False


def _named(value: object) -> object:
    """dbt lets a metric input be a bare name; MetricFlow's parser wants ``{name: …}``."""
    return {"name": value} if isinstance(value, str) else value


def _semantic_model(raw: dict[str, Any], project: Project) -> dict[str, Any]:
    obj = copy.deepcopy(raw)
    if "model" in obj and "node_relation" not in obj:
        table = ref_table(obj["model"])
        if table is None:
            raise ValueError(f"model must be ref('TABLE'), got {obj['model']!r}")
        obj.pop("model")
        obj["node_relation"] = project.relation(table).node_relation()
    for group in ("entities", "dimensions", "measures"):
        if obj.get(group) is None and group in obj:
            obj[group] = []
    return obj


def _metric(raw: dict[str, Any], project: Project) -> dict[str, Any]:
    obj = copy.deepcopy(raw)
    params = obj.get("type_params")
    if isinstance(params, dict):
        for key in ("measure", "numerator", "denominator"):
            if key in params:
                params[key] = _named(params[key])
        if isinstance(params.get("metrics"), list):
            params["metrics"] = [_named(m) for m in params["metrics"]]
        conv = params.get("conversion_type_params")
        if isinstance(conv, dict):
            for key in ("base_measure", "conversion_measure"):
                if key in conv:
                    conv[key] = _named(conv[key])
        cumulative = params.get("cumulative_type_params")
        if isinstance(cumulative, dict) and "metric" in cumulative:
            cumulative["metric"] = _named(cumulative["metric"])
    return obj


def _metadata(doc_path: str, line: int | None) -> dict[str, Any]:
    return {"repo_file_path": doc_path, "file_slice": {"filename": doc_path, "content": "",
                                                      "start_line_number": line or 1,
                                                      "end_line_number": line or 1}}


def _pydantic_problems(exc: Exception, path: str, line: int | None, prefix: str,
                       doc: Doc | None = None, at: KeyPath = ()) -> list[Problem]:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        out = []
        for e in errors():
            loc = tuple(x for x in e.get("loc", ()) if x != "__root__")
            key = ".".join((prefix, *map(str, loc)))
            out.append(Problem(path, doc.line(*at, *loc) if doc else line, key, str(e.get("msg"))))
        if out:
            return out
    return [Problem(path, line, prefix, mf_reason(exc))]


def _schema_problems(validator: Any, raw: dict[str, Any], doc: Doc, at: KeyPath, prefix: str) -> list[Problem]:
    """MetricFlow's own JSON Schema for the object: catches misspelt keys its pydantic models accept."""
    out = []
    for e in sorted(validator.iter_errors(raw), key=lambda e: list(map(str, e.absolute_path))):
        loc = tuple(e.absolute_path)
        out.append(Problem(doc.path, doc.line(*at, *loc), ".".join((prefix, *map(str, loc))),
                           " ".join(str(e.message).split())[:300]))
    return out


def _spine_config(spine: TimeSpine) -> dict[str, Any]:
    return {"node_relation": spine.relation.node_relation(),
            "primary_column": {"name": spine.column, "time_granularity": "day"}}


def _dbt_manifest(project: Project, spine: TimeSpine) -> PydanticSemanticManifest:
    """A dbt-written manifest through MetricFlow's reader for them, relations as ``schema.alias``."""
    from metricflow_semantics.model.dbt_manifest_parser import parse_manifest_from_dbt_generated_manifest

    assert project.manifest_json is not None
    data = copy.deepcopy(project.manifest_json)
    override = project.target.schema if project.target.override else None
    for sm in data.get("semantic_models") or ():
        rel = sm.get("node_relation") if isinstance(sm, dict) else None
        if isinstance(rel, dict) and rel.get("alias") and rel.get("schema_name"):
            sm["node_relation"] = Relation(schema=override or str(rel["schema_name"]), alias=str(rel["alias"]),
                                           database=rel.get("database")).node_relation()
    config = data.get("project_configuration")
    config = dict(config) if isinstance(config, dict) else {}
    declared = [s for s in config.get("time_spines") or () if isinstance(s, dict)]
    if spine == project.declared_spine and any(
            (s.get("node_relation") or {}).get("alias") == spine.table for s in declared):
        for s in declared:  # the project's own spines (custom granularities kept), relations rewritten
            rel = s.get("node_relation") or {}
            s["node_relation"] = Relation(schema=override or str(rel.get("schema_name")), alias=str(rel.get("alias")),
                                          database=rel.get("database")).node_relation()
        config["time_spines"] = declared
    else:
        config["time_spines"] = [_spine_config(spine)]
    config["time_spine_table_configurations"] = []  # the legacy one, if used, is ``spine`` now
    data["project_configuration"] = config
    try:
        manifest = parse_manifest_from_dbt_generated_manifest(json.dumps(data))
    except Exception as exc:  # noqa: BLE001 — any parse or transformation failure is a reported problem
        errors = getattr(exc, "errors", None)
        if callable(errors):
            raise SemanticProblems(_pydantic_problems(exc, project.path, None, "semantic_manifest")) from None
        raise SemanticProblems([Problem(project.path, None, None, f"MetricFlow: {mf_reason(exc)}")]) from None
    return _validated(manifest, project)


def build_manifest(project: Project, spine: TimeSpine) -> PydanticSemanticManifest:
    """MetricFlow's manifest for ``project`` with ``spine``; raises :class:`SemanticProblems`."""
    from metricflow_semantic_interfaces.implementations.metric import PydanticMetric
    from metricflow_semantic_interfaces.implementations.project_configuration import PydanticProjectConfiguration
    from metricflow_semantic_interfaces.implementations.saved_query import PydanticSavedQuery
    from metricflow_semantic_interfaces.implementations.semantic_manifest import PydanticSemanticManifest
    from metricflow_semantic_interfaces.implementations.semantic_model import PydanticSemanticModel
    from metricflow_semantic_interfaces.transformations.semantic_manifest_transformer import (
        PydanticSemanticManifestTransformer,
    )

    quiet()
    if project.manifest_json is not None:
        return _dbt_manifest(project, spine)
    validators = _validators()
    config = {"time_spines": [_spine_config(spine)]}
    problems: list[Problem] = list(project.problems)
    built: dict[str, list[Any]] = {"semantic_models": [], "metrics": [], "saved_queries": []}
    kinds = (("semantic_models", project.semantic_models, PydanticSemanticModel, _semantic_model),
             ("metrics", project.metrics, PydanticMetric, _metric),
             ("saved_queries", project.saved_queries, PydanticSavedQuery, lambda raw, _p: copy.deepcopy(raw)))
    seen: dict[tuple[str, str], str] = {}
    for kind, items, cls, convert in kinds:
        for raw, doc, at in items:
            line = doc.line(*at)
            label = f"{kind}.{raw.get('name', at[-1])}"
            key = (kind, str(raw.get("name")))
            if disabled(raw):
                continue
            if key in seen:
                problems.append(Problem(doc.path, line, label, f"defined twice (first at {seen[key]})"))
                continue
            seen[key] = f"{doc.path}:{line}"
            try:
                obj = convert(raw, project)
                found = _schema_problems(validators[kind], obj, doc, at, label)
                if found:
                    problems += found
                    continue
                obj = _to_mf(kind, obj)
                obj["metadata"] = _metadata(doc.path, line)
                built[kind].append(cls.parse_obj(obj))
            except Exception as exc:  # noqa: BLE001 — every object's failure is collected, not raised
                problems += _pydantic_problems(exc, doc.path, line, label, doc, at)
    if problems:
        raise SemanticProblems(problems)
    try:
        manifest = PydanticSemanticManifest(project_configuration=PydanticProjectConfiguration.parse_obj(config),
                                            **built)
        manifest = PydanticSemanticManifestTransformer.transform(manifest)
    except Exception as exc:  # noqa: BLE001 — MetricFlow's transformations raise plain exceptions
        raise SemanticProblems([mf_problem(exc, project.path)]) from None
    return _validated(manifest, project)


def _validated(manifest: PydanticSemanticManifest, project: Project) -> PydanticSemanticManifest:
    from metricflow_semantic_interfaces.validations.semantic_manifest_validator import SemanticManifestValidator

    try:
        results = SemanticManifestValidator().validate_semantic_manifest(manifest)
    except Exception as exc:  # noqa: BLE001 — a validator crash is a problem of this project
        raise SemanticProblems([Problem(project.path, None, None,
                                        f"MetricFlow validation failed: {mf_reason(exc)}")]) from None
    errors = list(results.errors)
    if errors:
        raise SemanticProblems([_issue_problem(issue, project) for issue in errors])
    return manifest


def _issue_problem(issue: ValidationIssue, project: Project) -> Problem:
    """A MetricFlow validation issue with the file, line and key it concerns."""
    ctx: Any = issue.context  # one of MetricFlow's context classes, told apart by their fields

    message = " ".join(str(issue.message).split("Traceback", 1)[0].split())
    path, line, key = project.path, None, None
    fc = getattr(ctx, "file_context", None)
    if fc is not None and fc.file_name:
        path, line = fc.file_name, fc.line_number
    if hasattr(ctx, "semantic_model_element"):
        ref = ctx.semantic_model_element
        group = {"measure": "measures", "dimension": "dimensions", "entity": "entities"}[ctx.element_type.value]
        path, line = project.locate("semantic_model", ref.semantic_model_name, group, ref.element_name)
        key = f"semantic_models.{ref.semantic_model_name}.{group}.{ref.element_name}"
    elif hasattr(ctx, "semantic_model"):
        key = f"semantic_models.{ctx.semantic_model.semantic_model_name}"
    elif hasattr(ctx, "metric"):
        key = f"metrics.{ctx.metric.metric_name}"
    elif hasattr(ctx, "object_name"):
        key = f"{ctx.object_type}.{ctx.object_name}"
    return Problem(path, line, key, message)
