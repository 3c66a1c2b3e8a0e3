"""Conditions as registered plugins: one module declares a condition, the run reads the registry.

A condition is one :class:`Condition` subclass registered by name (:func:`register`). It declares
its **settings** (one pydantic model: the CLI options are generated from it and validated through
it; defaults mean "off"), the **answer kinds** it applies to and the conditions it **conflicts**
with (anything else is refused by name before a run writes anything), the **manifest keys** it owns
(``None`` when off, so they take part in ``--resume`` checks), and **hooks** around an item's request:
``before`` (prompt additions), ``answer`` (replaces the request), ``after`` (over the scored
record); what they choose per item is its **trace** (:class:`~nlq2sql.conditions.trace.Trace`).
Config, runner, manifest, resume, CLI, reports and viewer read :data:`REGISTRY`, whose order is
the order hooks run and manifest keys are written (``docs/conditions.md``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, get_args

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from nlq2sql.conditions.trace import Trace
from nlq2sql.errors import InputError
from nlq2sql.records.manifest_parts import Part
from nlq2sql.records.results import Manifest
from nlq2sql.stages.abstention import Selection, read_traces_with

if TYPE_CHECKING:
    from nlq2sql.records.item import ItemRecord
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.semantic.binding import Warehouse
    from nlq2sql.stages.sets import AnySet
    from nlq2sql.transport.client import Client, EndpointConfig, RetryBudget, Sampling
    from nlq2sql.transport.stream import Completion

__all__ = ["REGISTRY", "Condition", "ConditionSet", "Messages", "Registry", "Request", "Settings",
           "register"]

Messages = list[dict[str, str]]


class Settings(BaseModel):
    """A condition's options: frozen (a run's config is hashable and picklable), no unknown keys.
    Field ``description`` is the CLI help; ``json_schema_extra={"noun": …}`` names a choice field
    in messages ("unknown planner 'x'"); defaults mean the condition is off."""

    model_config = ConfigDict(frozen=True, extra="forbid")


S = TypeVar("S", bound=Settings, covariant=True)


@dataclass(frozen=True)
class Request:
    """What an ``answer`` hook gets to send an item's request(s) on one replica."""

    client: Client
    endpoint: EndpointConfig
    messages: Messages
    sampling: Sampling
    budget: RetryBudget
    fail_fast: frozenset[str]


#: Each condition class by its settings model, recorded when the class is *defined*: a worker
#: process or Ray actor that unpickles a run's settings imports the module declaring them, and so
#: can apply the condition without any registration of its own (registration is the driver's).
_DECLARED: dict[type[Settings], type[Condition[Settings]]] = {}


class Condition(Generic[S]):
    """One condition bound to its settings.  Subclasses set the class variables and override the
    hooks they need; every hook has a do-nothing default."""

    name: ClassVar[str]
    settings_model: ClassVar[type[Settings]]
    answers: ClassVar[frozenset[str]] = frozenset({"intent"})
    conflicts: ClassVar[tuple[str, ...]] = ()
    manifest_keys: ClassVar[tuple[str, ...]] = ()
    #: The manifest keys' types (``X | None`` is declared for each; unlisted keys: any JSON).
    manifest_types: ClassVar[Mapping[str, Any]] = {}
    _part: ClassVar[type[Part]]  # manifest_part's, made once per class
    #: Read with ``--answer`` kinds it does not apply to: what to say after the options.
    refusal: ClassVar[str] = ""
    #: Where its label goes in a condition's name (quality report, viewer): lower first.
    label_rank: ClassVar[float] = 50.0
    #: Whether a run with it on can still be a report's baseline (it does not change what is asked).
    neutral: ClassVar[bool] = False
    #: Whether it replaces the item's single request (``answer``): at most one such per run.
    replaces_request: ClassVar[bool] = False
    #: Constraint modes its own requests carry besides the run's (the canary checks each).
    constraint_modes: ClassVar[tuple[str, ...]] = ()
    #: What it records per item: the type its hooks return (fields: record keys).
    trace: ClassVar[type[Trace]] = Trace

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "settings_model" in cls.__dict__:
            _DECLARED[cls.settings_model] = cls

    def __init__(self, settings: S) -> None:
        self.settings = settings

    # -- declarations ------------------------------------------------------------------------
    @property
    def on(self) -> bool:
        """Off when every setting is at its default."""
        return self.settings != type(self.settings)()

    @classmethod
    def options(cls) -> tuple[str, ...]:
        return tuple(option(f) for f in cls.settings_model.model_fields)

    def given(self) -> str:
        """The options this run set, for messages ("--examples", "--abstain / --abstain-below")."""
        default = type(self.settings)()
        names = [option(f) for f in type(self.settings).model_fields
                 if getattr(self.settings, f) != getattr(default, f)]
        return " / ".join(names or self.options()[:1])

    def check(self, sampling: Sampling) -> None:
        """Rules across settings and the run's sampling (bounds are the settings model's)."""

    def guardrails(self) -> tuple[str, ...]:
        """Rule sets this condition adds to the run's guardrails."""
        return ()

    def sampling(self, s: Sampling) -> Sampling:
        """What every request asks for under this condition (e.g. token logprobs)."""
        return s

    def load(self, wh: Warehouse, answer: str) -> None:
        """Per process, once: load what the hooks need (a bank, an index)."""

    def check_against(self, evalset: AnySet) -> None:
        """Once per run, before anything is written: refuse a set this condition cannot run on."""

    @classmethod
    def manifest_part(cls) -> type[Part]:
        """Its manifest keys as a model (``manifest_types``, each ``X | None``): what :meth:`manifest` returns."""
        if "_part" not in cls.__dict__:
            cls._part = create_model(f"{cls.__name__}Manifest", __base__=Part, **_optional(cls))
        return cls._part

    def manifest(self) -> Part:
        """Its manifest keys (all of :attr:`manifest_keys`; ``None`` when off)."""
        return self.manifest_part().model_validate(dict.fromkeys(self.manifest_keys))

    @classmethod
    def label(cls, manifest: Mapping[str, JsonValue]) -> str | None:
        """A recorded run's short label for this condition (None: off in that run)."""
        return None

    # -- hooks around one item's request ---------------------------------------------------
    def before(self, question: str, messages: Messages) -> tuple[Messages, Trace]:
        """The messages to send, and what it chose for this item (its :attr:`trace`: record keys)."""
        return messages, Trace()

    async def answer(self, req: Request) -> tuple[Completion, Trace]:
        """Replace the single request: (the answer's completion, its :attr:`trace`: record keys)."""
        raise NotImplementedError

    def after(self, rec: ItemRecord, comp: Completion, scored: bool) -> None:
        """Over the item's record once it is built (``scored``: the item has a gold): what it adds
        goes through ``rec.merge`` (its :attr:`trace`; a key to the part that owns it, else a trace)."""


def _optional(*conditions: type[Condition[Settings]]) -> dict[str, Any]:
    """Conditions' manifest keys as create_model's field definitions: (type form ``X | None``, default
    None) each -- type forms, not data.  Typed ``Any`` because it is unpacked as ``**`` into create_model,
    whose other keywords (``__config__``, ``__base__``…) each value would have to fit too."""
    return {k: (c.manifest_types.get(k, Any) | None, None) for c in conditions for k in c.manifest_keys}


def option(field: str) -> str:
    return "--" + field.replace("_", "-")


C = TypeVar("C", bound=type[Condition[Settings]])


class Registry:
    """Conditions by name, in registration order (the order hooks run and keys are written)."""

    def __init__(self) -> None:
        self._by_name: dict[str, type[Condition[Settings]]] = {}
        self._model: tuple[tuple[str, ...], type[Manifest]] | None = None
        self._part: tuple[tuple[str, ...], type[Part]] | None = None

    def add(self, cls: type[Condition[Settings]]) -> None:
        if cls.name in self._by_name:
            raise ValueError(f"condition {cls.name!r} is registered twice")
        fields = {f for c in self._by_name.values() for f in c.settings_model.model_fields}
        keys = {k for c in self._by_name.values() for k in c.manifest_keys}
        if clash := fields & set(cls.settings_model.model_fields):
            raise ValueError(f"condition {cls.name!r}: setting(s) {sorted(clash)} already declared")
        if clash := keys & set(cls.manifest_keys):
            raise ValueError(f"condition {cls.name!r}: manifest key(s) {sorted(clash)} already declared")
        self._by_name[cls.name] = cls

    def remove(self, name: str) -> None:
        """Unregister (a test's condition, after the test)."""
        self._by_name.pop(name, None)

    def __iter__(self) -> Iterator[type[Condition[Settings]]]:
        return iter(tuple(self._by_name.values()))

    def __getitem__(self, name: str) -> type[Condition[Settings]]:
        try:
            return self._by_name[name]
        except KeyError:
            raise InputError(f"unknown condition {name!r} (known: {', '.join(self._by_name)})",
                             field="conditions") from None

    def manifest_keys(self) -> tuple[str, ...]:
        return tuple(k for c in self for k in c.manifest_keys)

    def manifest_model(self) -> type[Manifest]:
        """The manifest's model: the run's keys (``records.results.Manifest``) and every registered
        condition's, each optional (absent in runs from before it, ``None`` when off)."""
        key = self.manifest_keys()
        if self._model is None or self._model[0] != key:
            self._model = (key, create_model("Manifest", __base__=Manifest, **_optional(*self)))
        return self._model[1]

    def conditions_part(self) -> type[Part]:
        """Every registered condition's manifest keys as one model (:meth:`ConditionSet.manifest`)."""
        key = self.manifest_keys()
        if self._part is None or self._part[0] != key:
            self._part = (key, create_model("ConditionsManifest", __base__=Part, **_optional(*self)))
        return self._part[1]

    def from_options(self, **values: Any) -> ConditionSet:
        """Settings from flat option values (``examples=2, link_values="both"``), each validated
        through its settings model; an unknown or out-of-bounds value is one InputError naming
        its option.  Conditions left at their defaults are off (not in the set)."""
        owners = {f: c for c in self for f in c.settings_model.model_fields}
        per: dict[str, dict[str, Any]] = {}  # raw option values by condition: the input edge, validated below
        for key, value in values.items():
            if key not in owners:
                raise InputError(f"no condition has a setting {key!r}", field=option(key))
            per.setdefault(owners[key].name, {})[key] = value
        return ConditionSet.of(*(settings(self._by_name[n].settings_model, kw) for n, kw in per.items()))

    def labels(self, manifest: Mapping[str, JsonValue]) -> list[str]:
        """The labels of a recorded run's conditions, in label order."""
        found = [(c.label_rank, c.label(manifest)) for c in self]
        return [text for _, text in sorted(found, key=lambda x: x[0]) if text]

    def changes_baseline(self, manifest: Mapping[str, JsonValue]) -> bool:
        """Whether a recorded run used a condition that keeps it from being a baseline."""
        return any(not c.neutral and c.label(manifest) for c in self)

    # -- a record read through the conditions' traces (``stages.abstention.ConditionTraces``) ----------
    def traces(self) -> list[type[Trace]]:
        """Each registered condition's trace type, once, in registry order."""
        return list(dict.fromkeys(c.trace for c in self))

    def abstain_reason(self, rec: ItemRecord) -> str | None:
        """Why the item abstains: the first condition whose recorded evidence says so."""
        return next((r for t in self.traces() if (r := t.reason_to_abstain(rec)) is not None), None)

    def confidence(self, rec: ItemRecord) -> float | None:
        """The item's confidence, from the first condition that measured one (the vote share before
        the intent-token evidence: registry order)."""
        return next((x for t in self.traces() if (x := t.confidence(rec)) is not None), None)

    def selection(self, rec: ItemRecord) -> Selection | None:
        """The item's recorded abstention, from the condition that decides it."""
        return next((x for t in self.traces() if (x := t.selection(rec)) is not None), None)

    def timing_keys(self) -> tuple[str, ...]:
        """Each condition's cost keys for the summary's ``timing``, once each, in registry order."""
        return tuple(dict.fromkeys(k for t in self.traces() for k in t.timing_keys))

    def carry_evidence(self, old: ItemRecord, new: ItemRecord) -> None:
        """The keys each condition's decision reads, from ``old`` into ``new`` (where ``old`` has them)."""
        keys = dict.fromkeys(k for t in self.traces() for k in t.evidence_keys)
        new.merge({k: old.traces[k] for k in keys if k in old.traces})

    def decision(self, reason: str | None, answer_correct: bool) -> Trace:
        """The trace keys recording an abstention decision, from the condition that decides it."""
        found = next((x for t in self.traces() if (x := t.decision(reason, answer_correct)) is not None), None)
        if found is None:
            raise RuntimeError("no registered condition records an abstention decision")
        return found


#: Every condition this process knows; the built-ins register when ``nlq2sql.conditions`` loads.
REGISTRY = Registry()
read_traces_with(REGISTRY)  # scoring (below the conditions) reads records' traces through it


def register(cls: C) -> C:
    """Class decorator: add a condition to :data:`REGISTRY`."""
    REGISTRY.add(cls)
    return cls


def settings(model: type[Settings], values: Mapping[str, Any]) -> Settings:
    """``model(**values)``, or one InputError naming the option and its bounds or choices."""
    try:
        return model(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else next(iter(values))
        raise InputError(_bad(model, name, values.get(name)), field=option(name)) from None


def _bad(model: type[Settings], name: str, value: object) -> str:
    """The message for a value its field refuses: its choices or bounds, else pydantic's type."""
    info = model.model_fields[name]
    choices = [a for t in (info.annotation, *get_args(info.annotation)) for a in get_args(t) if isinstance(a, str)]
    if choices:
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        return f"unknown {extra.get('noun', 'value')} {value!r} (known: {', '.join(choices)})"
    lo = next((m for m in info.metadata if isinstance(m, Ge | Gt)), None)
    hi = next((m for m in info.metadata if isinstance(m, Le | Lt)), None)
    low = lo.ge if isinstance(lo, Ge) else lo.gt if lo is not None else None
    high = hi.le if isinstance(hi, Le) else hi.lt if hi is not None else None
    if isinstance(lo, Gt) and isinstance(hi, Lt):
        return f"must be strictly between {low} and {high}, got {value}"
    if lo is not None and hi is not None:
        return f"must be between {low} and {high}, got {value}"
    if lo is not None:
        return f"must be {'above' if isinstance(lo, Gt) else 'at least'} {low}, got {value}"
    return f"not a valid value: {value!r}"


class ConditionSet:
    """The conditions a run applies: settings of the conditions that are on, by name (hashable,
    picklable: it travels inside the run's config to worker processes and Ray actors)."""

    __slots__ = ("_items",)

    def __init__(self, items: tuple[tuple[str, Settings], ...] = ()) -> None:
        self._items = items

    @classmethod
    def of(cls, *all_settings: Settings) -> ConditionSet:
        by_model = {c.settings_model: c.name for c in REGISTRY}
        named = {by_model[type(s)]: s for s in all_settings if type(s) in by_model}
        if len(named) < len(all_settings):
            raise ValueError("settings of an unregistered condition")
        return cls(tuple((c.name, named[c.name]) for c in REGISTRY
                         if c.name in named and c(named[c.name]).on))

    def __reduce__(self) -> tuple[Any, ...]:
        return (ConditionSet, (self._items,))

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConditionSet) and self._items == other._items

    def __repr__(self) -> str:
        return f"ConditionSet({', '.join(f'{n}={s!r}' for n, s in self._items)})"

    def __bool__(self) -> bool:
        return bool(self._items)

    def get(self, name: str) -> Settings | None:
        return dict(self._items).get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self._items)

    def bound(self) -> list[Condition[Settings]]:
        """Every registered condition bound to this run's settings (the defaults when off), in
        registry order: what manifests and checks walk."""
        mine = dict(self._items)
        return [c(mine.get(c.name, c.settings_model())) for c in REGISTRY]

    def active(self) -> list[Condition[Settings]]:
        """The conditions that are on, bound to their settings, in registry order (each found from
        its settings' class: this works in a worker that registered nothing)."""
        return [_DECLARED[type(s)](s) for _, s in self._items]

    def validate(self, answer: str, sampling: Sampling) -> None:
        """Each condition's own rules, its answer kinds and its conflicts, refused by name."""
        active = self.active()
        for c in active:
            if answer not in c.answers:
                raise InputError(f"not available with --answer {answer} yet: {c.given()}{c.refusal}",
                                 field="--answer")
        names = {c.name: c for c in active}
        for c in active:
            for other in c.conflicts:
                if other in names:
                    raise InputError(f"{c.given()} and {names[other].given()} do not combine (yet): choose one",
                                     field=c.options()[0])
        requesting = [c for c in active if c.replaces_request]
        if len(requesting) > 1:
            raise InputError(f"{requesting[0].given()} and {requesting[1].given()} each replace the request: "
                             "choose one", field=requesting[0].options()[0])
        for c in active:
            c.check(sampling)

    def guardrails(self, names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
        """The run's rule sets with those the conditions add (once each, in order)."""
        out = tuple(names)
        for c in self.active():
            out += tuple(g for g in c.guardrails() if g not in out)
        return out

    def sampling(self, s: Sampling) -> Sampling:
        for c in self.active():
            s = c.sampling(s)
        return s

    def manifest(self, loaded: list[Condition[Settings]] | None = None) -> Part:
        """Every registered condition's manifest keys (``None`` for those off), from the loaded
        conditions where given (a bank's hash is known only once it is loaded)."""
        by_name = {c.name: c for c in loaded or ()}
        parts = [by_name.get(c.name, c).manifest() for c in self.bound()]
        return REGISTRY.conditions_part().model_validate({k: v for part in parts for k, v in part})

    def refuse(self, engine: str) -> None:
        """For an engine that applies no condition: one message naming those set, exit 2."""
        if self:
            raise InputError(f"{engine} does not apply conditions; drop "
                             f"{', '.join(c.given() for c in self.active())}", field="--engine")

