"""The run's options, for the commands that run one: the run spec's generated option set
(:func:`spec_options`), :func:`base_config` for commands without it, and the parsers that need the
run's modules; apart from ``_common`` because its imports are heavy (pydantic, DuckDB, transport)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin

import typer
from typer._click.core import ParameterSource
from typer._click.globals import get_current_context

from nlq2sql.cli._common import CLI_WAREHOUSE, SPEC_PANEL, F, guardrail_names
from nlq2sql.conditions.registry import REGISTRY, ConditionSet, option
from nlq2sql.errors import InputError
from nlq2sql.paths import shipped_warehouses
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.endpoints import ReplicaSpec, parse_endpoints_file
from nlq2sql.run.models import DEFAULT_MODEL
from nlq2sql.run.presets import presets
from nlq2sql.run.spec import RunSpec, SpecValues
from nlq2sql.run.workers import auto_workers
from nlq2sql.stages.goldsql import parse_search_path
from nlq2sql.transport.client import Sampling

if TYPE_CHECKING:
    from nlq2sql.semantic.dbt_project import DbtOptions


def fleet_args(endpoints: list[str] | None, endpoints_file: Path | None) -> tuple[str | None, tuple[ReplicaSpec, ...]]:
    """``--endpoint`` (repeatable) and ``--endpoints-file`` → (first endpoint, the other replicas)."""
    specs = [ReplicaSpec(u) for u in endpoints or ()]
    if endpoints_file is not None:
        specs += parse_endpoints_file(str(endpoints_file))
    if not specs:
        return None, ()
    if specs[0].model is not None or specs[0].api_key_env is not None:
        raise InputError("the first endpoint uses --model and --api-key-env; give it with --endpoint "
                         "or without a model / key column", path=str(endpoints_file))
    return specs[0].url, tuple(specs[1:])


def parse_workers(text: str, concurrency: int) -> int:
    """``--workers N`` or ``auto``."""
    if text.strip() == "auto":
        return auto_workers(concurrency)
    try:
        return int(text)
    except ValueError:
        raise InputError(f"expected a number or 'auto', got {text!r}", field="--workers") from None


def search_path_arg(value: str | None) -> tuple[str, ...] | None:
    """--search-path as schema names (each a plain identifier), or None (the layer's)."""
    if value is None:
        return None
    return parse_search_path(value)


def base_config(evalset: str, endpoint: str | None, model: str, api_key_env: str | None, prompt: str,
                limit: int | None, max_tokens: int, out: Path, guardrails: tuple[str, ...] = ("ranking",),
                semantic: tuple[str, Path | None, str] = (CLI_WAREHOUSE, None, "flat"),
                conditions: ConditionSet | None = None, temperature: float = 0.0, dbt: DbtOptions | None = None
                ) -> EvalConfig:
    """The shared EvalConfig of the commands without the run spec (compact, grid, probes):
    ``semantic`` is (--semantic-model, --db, --schema), ``conditions`` a ConditionSet (default: none),
    ``dbt`` what :func:`~nlq2sql.cli._common.dbt_options` gave it (``--db-schema``, ``--profiles-dir``,
    ``--target``)."""
    semantic_model, db, schema = semantic
    cfg = EvalConfig(evalset=evalset, out=out, endpoint=endpoint, model=model, api_key_env=api_key_env,
                     prompt=prompt, guardrails=guardrails, limit=limit,
                     sampling=Sampling(max_tokens=max_tokens, schema=schema, temperature=temperature),
                     semantic_model=semantic_model, warehouse=db, dbt=dbt)
    return cfg if conditions is None else dataclasses.replace(cfg, conditions=conditions)


_ANSWER_HELP = ("intent (v1 intent JSON) | query (v2: a MetricFlow query or {\"unanswerable\": …}, constrained by a "
                "schema generated from the manifest, scored by rows) | sql (the model writes DuckDB SQL, free text, "
                "guarded and sandboxed, scored by result equivalence) | sql-grammar (the same, constrained by a SQL "
                "grammar from the warehouse).")


def _spec_params(defaults: SpecValues, exclude: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
    """(parameter name, default, annotation) of every run spec option, in help order."""
    def opt(*names: str, help: str) -> Any:
        return typer.Option(*names, help=help, rich_help_panel=SPEC_PANEL)

    own: list[tuple[str, Any, Any]] = [
        ("preset", None, Annotated[str | None, opt("--preset", help="A named run spec (main-job: the README's main "
                                                   "job); options given here win over it.")]),
        ("like", None, Annotated[Path | None, opt("--like", help="Repeat a recorded run's spec (RUN_DIR/manifest."
                                                  "json); options given here win over it.")]),
        ("model", DEFAULT_MODEL, Annotated[str, opt("--model", help="Served model name, or for a local server a "
                                                    "model alias / HF folder.")]),
        ("answer", "intent", Annotated[str, opt("--answer", help=_ANSWER_HELP)]),
        ("prompt", None, Annotated[str | None, opt("--prompt", help="Prompt name (baseline, contrastive, query, "
                                                   "sql) or file. Default: the answer kind's own.")]),
        ("guardrails", None, Annotated[list[str] | None, opt(
            "--guardrails", help="Rule set names (guardrails/NAME.toml, or learned:NAME: a trained classifier), "
            "comma-separated or repeated, or 'none'. Default: ranking for --answer intent, none otherwise.")]),
        ("temperature", 0.0, Annotated[float, opt("--temperature", help="Sampling temperature (0: greedy).")]),
        ("max_tokens", 128, Annotated[int, opt("--max-tokens", help="max_tokens per request.")]),
        ("structured", "json", Annotated[str, opt("--structured", help="json | response_format | none")]),
        ("schema_mode", "flat", Annotated[str, opt(
            "--schema", help="Intent JSON Schema sent to the server: flat (one object; consistency checked in "
            "code) | branches (one anyOf branch per intent kind: inconsistent intents cannot be generated).")]),
        ("semantic_model", CLI_WAREHOUSE, Annotated[str, opt(
            "--semantic-model", help=f"Warehouse semantic model: a shipped name ({', '.join(shipped_warehouses())}) "
            "or a dbt Semantic Layer YAML file/folder.")]),
        ("db", None, Annotated[Path | None, opt("--db", help="The DuckDB file (or a folder of Parquet/CSV files) the "
                                                "semantic model describes. Default: the shipped warehouse's cached "
                                                "build.")]),
        ("db_schema", None, Annotated[str | None, opt(
            "--db-schema", help="The database schema every relation of the semantic model is in (default: a dbt "
            "project's profile target schema with its custom schemas, else main).")]),
        ("profiles_dir", None, Annotated[Path | None, opt(
            "--profiles-dir", help="The folder of the dbt project's profiles.yml (default: $DBT_PROFILES_DIR, the "
            "project folder, ~/.dbt).")]),
        ("dbt_target", None, Annotated[str | None, opt("--target", help="The dbt profile's target (default: its "
                                                       "target:).")]),
        ("search_path", None, Annotated[str | None, opt(
            "--search-path", help="Schemas (comma-separated identifiers) unqualified table names in gold and model "
            "SQL resolve in, in order (DuckDB's search_path). Default: the schemas of the semantic layer's "
            "relations, the one holding most of them first.")]),
    ]
    for c in REGISTRY:
        for name, info in c.settings_model.model_fields.items():
            kind: Any = str if get_origin(info.annotation) is Literal else info.annotation  # typer reads str choices
            if any(get_origin(a) is Literal for a in get_args(info.annotation)):
                kind = str | None
            own.append((name, info.default, Annotated[kind, opt(option(name), help=info.description or "")]))
    unknown = set(defaults) - {n for n, _, _ in own}
    if unknown:
        raise ValueError(f"spec_options: no spec option {sorted(unknown)}")
    return [(n, defaults.get(n, d), a) for n, d, a in own if n not in exclude]


def _given(names: list[str], kwargs: SpecValues, defaults: SpecValues) -> set[str]:
    """The options given on the command line (click's parameter source); called outside click
    (a library caller, a test), the values that differ from their defaults."""
    ctx = get_current_context(silent=True)
    out = set()
    for n in names:
        source = ctx.get_parameter_source(n) if ctx is not None else None
        if source is None:
            if kwargs.get(n) != defaults.get(n):
                out.add(n)
        elif source not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP):
            out.add(n)
    return out


def spec_values(given: SpecValues) -> SpecValues:
    """Option values → the run spec's flat values (guardrails and search path parsed)."""
    out = dict(given)
    if "guardrails" in out:
        out["guardrails"] = guardrail_names(out["guardrails"]) if out["guardrails"] else None
    if "search_path" in out:
        out["search_path"] = search_path_arg(out["search_path"])
    if out.get("db_schema") is not None and not str(out["db_schema"]).strip():
        raise InputError("must name a schema", field="--db-schema")
    return out


def spec_options(fn: F | None = None, *, exclude: tuple[str, ...] = (), refuse: dict[str, str] | None = None,
                 **defaults: Any) -> Any:
    """Give a command every run spec option (``run.spec.RunSpec``'s fields, the dbt options and every
    registered condition's settings, generated from their declarations) in the "Run spec" help panel,
    with ``--preset NAME`` and ``--like RUN_DIR``; the command receives one built ``spec`` argument.

    Precedence: the command's defaults (``defaults``: e.g. ``max_tokens=96``), then the preset or the
    recorded run, then the options given on the command line.  ``exclude`` leaves options out (the
    command has its own of that name); ``refuse`` maps a spec value the command cannot apply to why:
    set (by an option, a preset or a recorded run) to anything but its default, it is refused by
    name, exit 2."""
    if fn is None:
        return functools.partial(spec_options, exclude=exclude, refuse=refuse, **defaults)
    sig = inspect.signature(fn, eval_str=True)
    params = _spec_params(defaults, exclude)
    base_defaults = {n: d for n, d, _ in params}
    extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a) for n, d, a in params]
    option_of = {n: {"schema_mode": "--schema", "dbt_target": "--target"}.get(n, "--" + n.replace("_", "-"))
                 for n, _, _ in params}
    names = [n for n, _, _ in params if n not in ("preset", "like")]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {n: kwargs.pop(n, base_defaults[n]) for n in base_defaults}
        given = _given(names, values, base_defaults)
        preset, like = values.pop("preset"), values.pop("like")
        if preset is not None and like is not None:
            raise InputError("give one of --preset (a named spec) or --like (a recorded run's)", field="--like")
        base = RunSpec.build(spec_values({n: v for n, v in base_defaults.items() if n not in ("preset", "like")
                                          and (n not in ("guardrails", "search_path") or v is not None)}))
        spec = base
        if preset is not None:
            spec = spec.over(presets()[preset].values)
        elif like is not None:
            spec = spec.over(RunSpec.from_run(like).values())
        if given:
            spec = spec.over(spec_values({n: values[n] for n in given}))
        command = fn.__name__.removesuffix("_cmd").replace("_", "-")
        for name, why in (refuse or {}).items():  # a part this command cannot apply, set anywhere: refused
            if name == "conditions":
                if spec.conditions:
                    what = ", ".join(c.given() for c in spec.conditions.active())
                    raise InputError(f"{command} cannot apply {what}: {why}", field=what.split(" ")[0])
            elif spec.values().get(name) != base.values().get(name):
                raise InputError(f"{command} cannot apply {option_of[name]}: {why}", field=option_of[name])
        return fn(*args, spec=spec, **kwargs)

    own = [p for p in sig.parameters.values() if p.name != "spec"]
    keyword = [p for p in own if p.kind is inspect.Parameter.VAR_KEYWORD]
    # The spec's options first (its panel heads the help); the command's own after, keyword-only.
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]
    wrapper.__signature__ = sig.replace(parameters=[*extra, *own, *keyword])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**{p.name: p.annotation for p in own}, **{p.name: p.annotation for p in extra}}
    return wrapper
