"""Read objects → MetricFlow's semantic manifest, transformed and validated by MetricFlow.

Each object is built on its own, so one malformed metric does not hide another's problem;
each carries its file and line as MetricFlow metadata, so MetricFlow's validation issues name
them.  The time spine is decided here: the one the project declares, else dbt's legacy
``metricflow_time_spine`` table when the database has it, else a generated day table
(:data:`GENERATED_SPINE`, which :mod:`nlq2sql.semantic.engine` inlines as a ``range()``
over the data's dates — the warehouse itself is never written).
"""

from __future__ import annotations

import copy
from typing import Any

from nlq2sql.semantic.mf import mf_problem, mf_reason, quiet
from nlq2sql.semantic.project import Problem, Project, SemanticProblems, TimeSpine, ref_table
from nlq2sql.semantic.yamlsafe import Doc

__all__ = ["GENERATED_SPINE", "LEGACY_SPINE", "SCHEMA", "build_manifest"]

#: dbt's legacy convention: a table of this name with a ``date_day`` column.
LEGACY_SPINE = TimeSpine(table="metricflow_time_spine", column="date_day")
#: The relation a generated spine is rendered as; replaced by an inline range() at compile time.
GENERATED_SPINE = TimeSpine(table="nlq2sql_generated_time_spine", column="date_day")
SCHEMA = "main"


def _node_relation(table: str) -> dict[str, str]:
    return {"alias": table, "schema_name": SCHEMA, "relation_name": f"{SCHEMA}.{table}"}


def _named(value: Any) -> Any:
    """dbt lets a metric input be a bare name; MetricFlow's parser wants ``{name: …}``."""
    return {"name": value} if isinstance(value, str) else value


def _semantic_model(raw: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(raw)
    if "model" in obj and "node_relation" not in obj:
        table = ref_table(obj["model"])
        if table is None:
            raise ValueError(f"model must be ref('TABLE'), got {obj['model']!r}")
        obj.pop("model")
        obj["node_relation"] = _node_relation(table)
    for group in ("entities", "dimensions", "measures"):
        if obj.get(group) is None and group in obj:
            obj[group] = []
    return obj


def _metric(raw: dict[str, Any]) -> dict[str, Any]:
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
                       doc: Doc | None = None, at: tuple[Any, ...] = ()) -> list[Problem]:
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


def _schema_problems(validator: Any, raw: dict[str, Any], doc: Doc, at: tuple[Any, ...], prefix: str) -> list[Problem]:
    """MetricFlow's own JSON Schema for the object: catches misspelt keys its pydantic models accept."""
    out = []
    for e in sorted(validator.iter_errors(raw), key=lambda e: list(map(str, e.absolute_path))):
        loc = tuple(e.absolute_path)
        out.append(Problem(doc.path, doc.line(*at, *loc), ".".join((prefix, *map(str, loc))),
                           " ".join(str(e.message).split())[:300]))
    return out


def build_manifest(project: Project, spine: TimeSpine) -> Any:
    """MetricFlow's manifest for ``project`` with ``spine``; raises :class:`SemanticProblems`."""
    from metricflow_semantic_interfaces.implementations.metric import PydanticMetric
    from metricflow_semantic_interfaces.implementations.project_configuration import PydanticProjectConfiguration
    from metricflow_semantic_interfaces.implementations.saved_query import PydanticSavedQuery
    from metricflow_semantic_interfaces.implementations.semantic_manifest import PydanticSemanticManifest
    from metricflow_semantic_interfaces.implementations.semantic_model import PydanticSemanticModel
    from metricflow_semantic_interfaces.parsing.schemas import (
        metric_validator,
        saved_query_validator,
        semantic_model_validator,
    )
    from metricflow_semantic_interfaces.transformations.semantic_manifest_transformer import (
        PydanticSemanticManifestTransformer,
    )

    quiet()
    validators = {"semantic_models": semantic_model_validator, "metrics": metric_validator,
                  "saved_queries": saved_query_validator}
    config = {"time_spines": [{"node_relation": _node_relation(spine.table),
                               "primary_column": {"name": spine.column, "time_granularity": "day"}}]}
    if project.manifest_json is not None:
        data = copy.deepcopy(project.manifest_json)
        data.setdefault("project_configuration", config)
        if not data["project_configuration"].get("time_spines"):
            data["project_configuration"]["time_spines"] = config["time_spines"]
        try:
            manifest = PydanticSemanticManifest.parse_obj(data)
        except Exception as exc:  # noqa: BLE001 — any parse failure is a reported problem
            raise SemanticProblems(_pydantic_problems(exc, project.path, None, "semantic_manifest")) from None
        return _validated(manifest, project)

    problems: list[Problem] = list(project.problems)
    built: dict[str, list[Any]] = {"semantic_models": [], "metrics": [], "saved_queries": []}
    kinds = (("semantic_models", project.semantic_models, PydanticSemanticModel, _semantic_model),
             ("metrics", project.metrics, PydanticMetric, _metric),
             ("saved_queries", project.saved_queries, PydanticSavedQuery, copy.deepcopy))
    seen: dict[tuple[str, str], str] = {}
    for kind, items, cls, convert in kinds:
        for raw, doc, at in items:
            line = doc.line(*at)
            label = f"{kind}.{raw.get('name', at[-1])}"
            key = (kind, str(raw.get("name")))
            if key in seen:
                problems.append(Problem(doc.path, line, label, f"defined twice (first at {seen[key]})"))
                continue
            seen[key] = f"{doc.path}:{line}"
            try:
                obj = convert(raw)
                found = _schema_problems(validators[kind], obj, doc, at, label)
                if found:
                    problems += found
                    continue
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


def _validated(manifest: Any, project: Project) -> Any:
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


def _issue_problem(issue: Any, project: Project) -> Problem:
    """A MetricFlow validation issue with the file, line and key it concerns."""
    ctx = issue.context
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
