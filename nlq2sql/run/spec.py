"""One run specification: what a run asks of the model, every command the same way.

A :class:`RunSpec` comes from a command's "Run spec" options, a preset (:mod:`nlq2sql.run.presets`)
or a recorded run (:meth:`RunSpec.from_run`); the manifest records it, so any run can be repeated.
Values travel flat (:meth:`RunSpec.values`, :meth:`RunSpec.build`): field names plus every registered
condition's settings, merged key by key, the later winning."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nlq2sql.answers.kinds import KINDS
from nlq2sql.conditions.registry import REGISTRY, ConditionSet
from nlq2sql.errors import InputError
from nlq2sql.paths import shipped_warehouses
from nlq2sql.records.manifest_parts import SpecPart
from nlq2sql.records.store import MANIFEST, read_json
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.models import DEFAULT_MODEL
from nlq2sql.run.repeats import repeat_dirs
from nlq2sql.semantic.catalog import DEFAULT_WAREHOUSE, display_path
from nlq2sql.semantic.dbt_project import DbtOptions
from nlq2sql.transport.client import STRUCTURED_MODES

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["FIELDS", "RunSpec", "SpecValues", "answer_guardrails", "answer_prompt", "condition_values"]

#: Flat spec values: option values by setting name, as a command line, a preset or a recorded run
#: gives them (the edge where untyped option values enter; :meth:`RunSpec.build` types them).
SpecValues = dict[str, Any]

def answer_prompt(answer: str) -> str:
    """The prompt an answer kind uses when none is named (the kind declares it)."""
    return KINDS[answer].prompt


def answer_guardrails(answer: str) -> tuple[str, ...]:
    """The guardrails an answer kind runs when none are named: the ranking rule set where the kind
    takes guardrails by default (v1 intents), none otherwise (rule sets rewrite intent and query fields)."""
    return ("ranking",) if KINDS[answer].default_guardrails else ()


def condition_values(conditions: ConditionSet) -> SpecValues:
    """The settings of the conditions that are on, flat (``{"examples": 8, "link_values": "both"}``),
    left out where at their defaults: what :meth:`Registry.from_options` takes back."""
    out: SpecValues = {}
    for c in conditions.active():
        default = type(c.settings)()
        for name in type(c.settings).model_fields:
            if getattr(c.settings, name) != getattr(default, name):
                out[name] = getattr(c.settings, name)
    return out


class RunSpec(BaseModel):
    """What a run asks: frozen, hashable with its config.  ``prompt`` and ``guardrails`` None mean
    the answer kind's own (:func:`answer_prompt`, :func:`answer_guardrails`): a preset that leaves
    them open follows an ``--answer`` given over it."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    model: str = DEFAULT_MODEL
    answer: str = "intent"
    prompt: str | None = None
    guardrails: tuple[str, ...] | None = None
    conditions: ConditionSet = Field(default_factory=ConditionSet)
    temperature: float = 0.0
    max_tokens: int = 128
    structured: str = "json"  # json | response_format | none (transport.client.STRUCTURED_MODES)
    schema_mode: str = "flat"  # --schema: flat | branches (the v1 intent's JSON Schema)
    semantic_model: str = DEFAULT_WAREHOUSE
    db: Path | None = None
    dbt: DbtOptions | None = None
    search_path: tuple[str, ...] | None = None

    # -- the flat form -------------------------------------------------------------------------
    @classmethod
    def build(cls, values: Mapping[str, Any]) -> RunSpec:
        """A spec from flat values (fields, ``db_schema`` / ``profiles_dir`` / ``dbt_target`` and
        condition settings); an unknown key or a bad value is one InputError naming its option."""
        own = {k: v for k, v in values.items() if k in FIELDS}
        dbt = {k: values[k] for k in _DBT if k in values}
        conds = {k: v for k, v in values.items() if k not in FIELDS and k not in _DBT}
        settings = {f for c in REGISTRY for f in c.settings_model.model_fields}
        if unknown := sorted(set(conds) - settings):
            raise InputError(f"not a run spec setting: {', '.join(unknown)} (known: "
                             f"{', '.join([*FIELDS, *_DBT, *sorted(settings)])})", field=unknown[0])
        if any(v is not None for v in dbt.values()):
            own["dbt"] = DbtOptions(dbt.get("db_schema"), _text(dbt.get("profiles_dir")), dbt.get("dbt_target"))
        for key in ("guardrails", "search_path"):
            if own.get(key) is not None:
                own[key] = tuple(own[key])
        if own.get("structured") is not None and own["structured"] not in STRUCTURED_MODES:
            raise InputError(f"unknown mode {own['structured']!r} (known: {', '.join(STRUCTURED_MODES)})",
                             field="--structured")
        if own.get("db") is not None:
            own["db"] = Path(own["db"])
        own["conditions"] = REGISTRY.from_options(**conds)
        try:
            return cls(**own)
        except ValidationError as exc:
            first = exc.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else "spec"
            raise InputError(f"{first['msg']}, got {values.get(name)!r}",
                             field=_OPTION.get(name, "--" + name.replace("_", "-"))) from None

    def values(self) -> SpecValues:
        """The flat form (:meth:`build` gives this spec back): every field, the dbt options and the
        conditions' settings that are not at their defaults."""
        out: SpecValues = {f: getattr(self, f) for f in FIELDS}
        dbt = self.dbt or DbtOptions()
        out |= {"db_schema": dbt.db_schema, "profiles_dir": dbt.profiles_dir, "dbt_target": dbt.target}
        return out | condition_values(self.conditions)

    def over(self, values: Mapping[str, Any]) -> RunSpec:
        """This spec with ``values`` (flat) set over it: a condition's settings are merged setting by
        setting (``--examples 4`` over a preset's ``--examples 8 --link-values both`` keeps the linking)."""
        return RunSpec.build({**self.values(), **values})

    # -- resolved ------------------------------------------------------------------------------
    def resolved(self) -> RunSpec:
        """The prompt and guardrails made concrete for the answer kind (what a run records)."""
        return self.model_copy(update={"prompt": self.prompt or answer_prompt(self.answer),
                                       "guardrails": (self.guardrails if self.guardrails is not None
                                                      else answer_guardrails(self.answer))})

    def apply(self, cfg: EvalConfig) -> EvalConfig:
        """``cfg`` with everything this spec says (its other settings: endpoint, load, output… kept)."""
        r = self.resolved()
        assert r.prompt is not None and r.guardrails is not None
        return replace(cfg, model=r.model, answer=r.answer, prompt=r.prompt, guardrails=r.guardrails,
                       conditions=r.conditions,
                       sampling=replace(cfg.sampling, temperature=r.temperature, max_tokens=r.max_tokens,
                                        structured=r.structured, schema=r.schema_mode),
                       semantic_model=r.semantic_model, warehouse=r.db, dbt=r.dbt, search_path=r.search_path)

    @classmethod
    def of(cls, cfg: EvalConfig) -> RunSpec:
        """The spec a config runs (prompt and guardrails as it has them)."""
        s = cfg.sampling
        return cls(model=cfg.model, answer=cfg.answer, prompt=cfg.prompt, guardrails=tuple(cfg.guardrails),
                   conditions=cfg.conditions, temperature=s.temperature, max_tokens=s.max_tokens,
                   structured=s.structured, schema_mode=s.schema, semantic_model=cfg.semantic_model,
                   db=cfg.warehouse, dbt=cfg.dbt, search_path=cfg.search_path)

    # -- recorded --------------------------------------------------------------------------------
    def recorded(self) -> SpecPart:
        """The manifest's ``spec`` section: the resolved spec as JSON values, with no machine path
        (:func:`_shown`: a path outside the project as its file name, as the manifest's ``db`` is)."""
        r = self.resolved()
        dbt = r.dbt or DbtOptions()
        part = SpecPart(model=_shown(r.model), answer=r.answer, prompt=_shown(r.prompt or ""),
                        guardrails=list(r.guardrails or ()), conditions=condition_values(r.conditions),
                        temperature=r.temperature, max_tokens=r.max_tokens, structured=r.structured,
                        semantic_model=_shown(r.semantic_model), db=_shown(r.db) if r.db is not None else None,
                        db_schema=dbt.db_schema, profiles_dir=_shown(dbt.profiles_dir) if dbt.profiles_dir else None,
                        target=dbt.target,
                        search_path=list(r.search_path) if r.search_path is not None else None)
        part.schema_mode = r.schema_mode  # (written as "schema", as the sampling section writes it)
        return part

    @classmethod
    def from_part(cls, part: SpecPart) -> RunSpec:
        """A recorded ``spec`` section back as a spec; a prompt or guardrails that are the answer
        kind's own are left open again (an ``--answer`` given over it brings its own)."""
        values: SpecValues = {
            "model": part.model, "answer": part.answer, "temperature": part.temperature,
            "max_tokens": part.max_tokens, "structured": part.structured, "schema_mode": part.schema_mode,
            "semantic_model": part.semantic_model, "db": part.db, "db_schema": part.db_schema,
            "profiles_dir": part.profiles_dir, "dbt_target": part.target, "search_path": part.search_path,
            "prompt": None if part.prompt == answer_prompt(part.answer) else part.prompt,
            "guardrails": None if tuple(part.guardrails) == answer_guardrails(part.answer) else part.guardrails,
            **part.conditions}
        return cls.build(values)

    @classmethod
    def from_run(cls, run_dir: Path) -> RunSpec:
        """The spec of a recorded run (``eval --like``): its manifest's ``spec`` section, or for a manifest
        without one, the manifest's own keys.  A directory without a manifest (a repeated run:
        its first repeat's), or a manifest that cannot give a spec, is refused naming file and field."""

        path = run_dir / MANIFEST
        if not path.is_file() and (reps := repeat_dirs(run_dir)):
            path = reps[0] / MANIFEST
        if not path.is_file():
            raise InputError(f"not a recorded run: no {MANIFEST} (a run writes one when it starts)",
                             path=str(run_dir), field="--like")
        data = read_json(path)
        if not isinstance(data, dict):
            raise InputError("not a run's manifest (a JSON object)", path=str(path))
        if data.get("spec") is not None:
            try:
                part = SpecPart.model_validate(data["spec"])
            except ValidationError as exc:
                first = exc.errors()[0]
                raise InputError(f"cannot give a run spec: {first['msg']}", path=str(path),
                                 field=".".join(["spec", *map(str, first["loc"])])) from None
            return cls.from_part(part)
        return _from_legacy(data, path)


#: The flat keys that are fields (``dbt`` is given as its three options, ``conditions`` as theirs).
FIELDS = tuple(f for f in RunSpec.model_fields if f not in ("dbt", "conditions"))
_DBT = ("db_schema", "profiles_dir", "dbt_target")
_OPTION = {"schema_mode": "--schema", "dbt_target": "--target"}


def _shown(value: str | Path) -> str:
    """A value that may name a file, as a manifest records it: as given unless absolute; an absolute
    path relative to the project when inside it, else its name (no machine path is recorded)."""

    path = Path(value)
    if not path.is_absolute():
        return str(value)
    shown = display_path(path.expanduser())
    return shown if not Path(shown).is_absolute() else path.name


def _text(value: object) -> str | None:
    return str(value) if value is not None else None


def _from_legacy(data: SpecValues, path: Path) -> RunSpec:
    """A manifest written before the ``spec`` section: its model, answer, prompt, sampling,
    warehouse and conditions' keys (each condition's recorded section read back to its settings)."""

    def need(key: str) -> JsonValue:
        if data.get(key) is None:
            raise InputError("cannot give a run spec: the manifest records no " + key, path=str(path), field=key)
        return data[key]

    model, sampling = need("model"), need("sampling")
    if not isinstance(sampling, dict):
        raise InputError("cannot give a run spec: not an object", path=str(path), field="sampling")
    answer = data.get("answer") or "intent"
    conds: SpecValues = {}
    settings = {f for c in REGISTRY for f in c.settings_model.model_fields}
    for key in REGISTRY.manifest_keys():
        value = data.get(key)
        if value is None or value is False:
            continue
        if key == "examples" and isinstance(value, dict) and "k" in value:
            conds["examples"] = value["k"]
            if value.get("synthetic"):
                conds["example_bank"] = "synthetic"
            elif value.get("bank") not in (None, "dev"):
                conds["example_bank"] = value.get("bank_path") or value["bank"]
        elif key == "link_schema" and isinstance(value, dict) and "mode" in value:
            conds["link_schema"], conds["link_budget"] = value["mode"], value.get("budget", 600)
        elif key in settings and not isinstance(value, (dict, list)):
            conds[key] = value
        else:
            raise InputError("cannot give a run spec: this condition's record does not say its settings",
                             path=str(path), field=key)
    cs = REGISTRY.from_options(**conds)
    added = cs.guardrails(())
    semantic = str(data.get("semantic_model") or "retail")
    shipped = semantic in shipped_warehouses()
    if not shipped:
        semantic = str(data.get("semantic_model_path") or semantic)
    db = data.get("db")
    if shipped and db is not None and "/" not in str(db):
        db = None  # the shipped warehouse's own build (recorded by its file name)
    guardrails = [g for g in need("guardrails") if g not in added]
    prompt = need("prompt")
    structured = sampling.get("structured", "json")  # a grammar or regex is the answer kind's own
    values = {"model": model, "answer": answer,
              "prompt": None if prompt == answer_prompt(answer) else prompt,
              "guardrails": None if tuple(guardrails) == answer_guardrails(answer) else guardrails,
              "temperature": sampling.get("temperature", 0.0), "max_tokens": sampling.get("max_tokens", 128),
              "structured": structured if structured in ("json", "response_format", "none") else "json",
              "schema_mode": sampling.get("schema") or "flat",
              "semantic_model": semantic, "db": db, "db_schema": data.get("db_schema"),
              "search_path": data.get("search_path"), **conds}
    return RunSpec.build(values)
