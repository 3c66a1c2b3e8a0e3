"""The one driver of every load mode: endpoint binding, warm-up, resume, the level loop, notes, output.

A :class:`LoadMode` says *what* to measure (settings, next level, how a level runs, analysis,
rendering); :func:`drive` says *how*, once: it binds the endpoint (or starts and always stops a
local vLLM), refuses a used ``out`` without ``--force`` (a failure before the first level leaves it
as found), writes ``job.json`` so ``--resume`` recognises its run, runs the uncounted warm-up, asks
for levels until the mode is done, and writes ``STEM.json``/``STEM.md``/plots. Every load run is a
:class:`Mode` (settings in, typed result out); one measuring otherwise implements :meth:`Mode.run`.
Modes register by name (:func:`register`); :mod:`.modes` imports the package's own."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler, model_validator
from pydantic_core import ErrorDetails
from typing_extensions import TypeVar as DefaultedTypeVar

from nlq2sql.errors import InputError, RecordError
from nlq2sql.inputs import MAX_REQUESTS
from nlq2sql.load.levels import LEVEL, expand_evalset, run_level
from nlq2sql.load.output import Plot, write_outputs
from nlq2sql.records.store import read_json, write_json_atomic
from nlq2sql.records.typed import JsonValue, Typed
from nlq2sql.run.config import EvalConfig, preflight
from nlq2sql.run.endpoint_facts import EndpointFacts
from nlq2sql.run.live import bound_endpoint

__all__ = ["JOB", "MODES", "LevelContext", "LoadMode", "LoadSettings", "Mode", "ModeSettings", "Progress",
           "begin_level_sets", "check_resume", "drive", "fresh_out",
           "job_settings", "next_in", "option", "prepare_out", "register"]

Progress = Callable[[str], None]

#: pydantic's bound errors, said the way every other option's bound is (``inputs.at_most``).
_BOUNDS = {"less_than_equal": ("le", "at most"), "greater_than_equal": ("ge", "at least"),
           "less_than": ("lt", "less than"), "greater_than": ("gt", "more than")}


def _fmt(x: object) -> str:
    return f"{x:,}" if isinstance(x, int | float) and not isinstance(x, bool) else repr(x)


def _bound_message(e: ErrorDetails) -> str:
    """One validation error as a sentence: ``must be at most 1,000,000, got 99,999,…``."""
    bound = _BOUNDS.get(e.get("type", ""))
    ctx = e.get("ctx") or {}
    if bound and bound[0] in ctx and "input" in e:
        return f"must be {bound[1]} {_fmt(ctx[bound[0]])}, got {_fmt(e['input'])}"
    got = f", got {e['input']!r}" if "input" in e and not isinstance(e["input"], dict) else ""
    return f"{e['msg']}{got}"


def option(default: Any, flag: str, help: str | None = None, **constraints: Any) -> Any:
    """A settings field and its command-line option: the flag a refusal names (``--requests``) and,
    with ``help``, an option the CLI generates for the mode (``cli.load``)."""
    extra: dict[str, str] = {"option": flag} | ({"help": help} if help else {})
    return Field(default, json_schema_extra=extra, **constraints)  # type: ignore[arg-type]


T = TypeVar("T", bound="ModeSettings")


class ModeSettings(Typed):
    """A mode's settings (one declaration: the field constraints are the validation, and a violated
    one is an :class:`InputError` naming the option, however the settings were built — the CLI, a
    library caller or a test)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    @model_validator(mode="wrap")
    @classmethod
    def _named(cls, data: JsonValue, handler: ValidatorFunctionWrapHandler) -> ModeSettings:
        try:
            return handler(data)
        except ValidationError as exc:
            e = exc.errors()[0]
            name = str(e["loc"][0]) if e["loc"] else ""
            extra = cls.model_fields[name].json_schema_extra if name in cls.model_fields else None
            flag = extra.get("option") if isinstance(extra, dict) else None
            raise InputError(_bound_message(e), field=str(flag or "--" + name.replace("_", "-"))) from None

    def but(self: T, **changes: Any) -> T:
        """A copy with ``changes``, validated again (``model_copy`` would not check them)."""
        return type(self)(**(dict(self) | changes))


class LoadSettings(ModeSettings):
    """What every mode that sends requests level by level shares; its settings subclass this."""

    base: EvalConfig
    requests: int = option(64, "--requests", ge=1, le=MAX_REQUESTS)
    warmup: int = option(2, "--warmup", ge=0, le=MAX_REQUESTS)
    force: bool = False
    resume: bool = False  # keep the levels a same-settings run in ``out`` finished; rerun the rest


S = TypeVar("S", bound=LoadSettings)
R = TypeVar("R", bound=Typed)
#: A load mode's level (a concurrency, a rate, a grid cell) and what measuring one gives; a mode that
#: declares neither (a small one in a test) gets any.
LevelT = DefaultedTypeVar("LevelT", default=Any)
StatsT = DefaultedTypeVar("StatsT", default=Any)


@dataclass
class LevelContext(Generic[S]):
    """What a mode's ``run_level`` and ``analyse`` get from the driver."""

    settings: S  # bound: ``settings.base.endpoint`` is set
    server_info: EndpointFacts
    evalsets: dict[str, Path]  # the expanded eval sets (``""``: the mode's only one)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    @property
    def out(self) -> Path:
        return self.settings.base.out

    @property
    def evalset_path(self) -> Path:
        return self.evalsets[""]


class Mode(ABC, Generic[T, R]):
    """One kind of load run: settings ``T`` in, result ``R`` out (written as ``STEM.json`` and
    ``STEM.md``).  Subclass, set the class attributes, implement :meth:`run` and :meth:`render`,
    decorate with :func:`register`; :func:`.modes.run_mode` runs it by name."""

    name: ClassVar[str]  # registry key
    stem: ClassVar[str]  # output files: STEM.json, STEM.md
    settings_model: ClassVar[type[ModeSettings]]

    @abstractmethod
    def run(self, settings: T, progress: Progress | None = None) -> R:
        """Measure (or read), analyse and write; the result as written."""

    @abstractmethod
    def render(self, result: R) -> str:
        """STEM.md from the result as written."""

    def wrote(self, out: Path) -> str:
        """Which files a run wrote, for the user."""
        return f"{out / (self.stem + '.json')} and {out / (self.stem + '.md')}"


class LoadMode(Mode[S, R], Generic[S, R, LevelT, StatsT]):
    """A load run the driver runs level by level (settings ``S``, result ``R``, each level a ``LevelT``
    measured as a ``StatsT``).  Subclass, set the
    class attributes, implement the four methods, decorate with :func:`register` — the driver does
    the rest."""

    name: ClassVar[str]  # registry key (and the ``who`` of ``job.json``)
    settings_model: ClassVar[type[LoadSettings]]
    plot: ClassVar[Plot[Any] | None] = None

    def run(self, settings: S, progress: Progress | None = None) -> R:
        return drive(self, settings, progress)

    def who(self) -> str:
        """The name ``job.json`` records (``--resume`` refuses another mode's directory)."""
        return self.name

    def check(self, settings: S) -> None:
        """Cross-field refusals the field constraints cannot say (before anything is touched)."""

    def evalsets(self, settings: S) -> dict[str, int]:
        """Expanded eval sets to write: name → requests (default: one, ``settings.requests``)."""
        return {"": settings.requests}

    def order_seed(self, settings: S) -> int | None:
        """Shuffle the expanded set's order with this seed (None: the set's order, cycled)."""
        return None

    @abstractmethod
    def next_level(self, settings: S, done: list[StatsT]) -> LevelT | None:
        """The next level to run given those measured (in order), or None when finished."""

    @abstractmethod
    def run_level(self, ctx: LevelContext[S], level: LevelT) -> StatsT:
        """Measure one level (a kept one, under ``--resume``, is read back, not re-run)."""

    def describe(self, level: LevelT, stats: StatsT) -> str:
        return f"level {level}: done"

    @abstractmethod
    def analyse(self, ctx: LevelContext[S], done: list[StatsT]) -> R:
        """The result (with ``kind``; typed), written as STEM.json."""


MODES: dict[str, type[Mode[Any, Any]]] = {}
M = TypeVar("M", bound=type[Mode[Any, Any]])
L = TypeVar("L")


def next_in(levels: Sequence[L], done: Sequence[object]) -> L | None:
    """A fixed list's next level: the first not yet measured (levels run in list order)."""
    return levels[len(done)] if len(done) < len(levels) else None


def register(cls: M) -> M:
    """Add a mode to :data:`MODES` under ``cls.name`` (one name, one mode)."""
    if MODES.get(cls.name, cls) is not cls:
        raise ValueError(f"load mode {cls.name!r} is registered twice")
    MODES[cls.name] = cls
    return cls


def drive(mode: LoadMode[S, R, LevelT, StatsT], settings: S, progress: Progress | None = None,
          server_info: EndpointFacts | None = None) -> R:
    """Run ``mode`` with ``settings`` from binding the endpoint to writing its files; return the result
    as written.

    ``server_info``: what the caller knows of an endpoint it bound itself (a server sweep's
    local server), recorded instead of the bare URL."""
    check_resume(settings.resume, settings.force)
    mode.check(settings)
    with bound_endpoint(settings.base) as (bound, info):  # the endpoint's facts as it states them
        if server_info is not None and settings.base.endpoint is not None:
            info = server_info
        s = settings.but(base=bound)
        paths, notes = begin_level_sets(bound, mode.evalsets(s), s.warmup, s.force, mode.who(), job=s,
                                        resume=s.resume, order_seed=mode.order_seed(s))
        ctx = LevelContext(settings=s, server_info=info, evalsets=paths, notes=notes)
        done: list[StatsT] = []
        while (level := mode.next_level(s, done)) is not None:
            stats = mode.run_level(ctx, level)
            done.append(stats)
            if progress:
                progress(mode.describe(level, stats))
        return write_outputs(ctx.out, mode.stem, mode.analyse(ctx, done), mode.render, mode.plot,
                             elapsed_s=time.time() - ctx.started)


# -- the output directory and --resume ------------------------------------------------------

def prepare_out(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory", field="--out")
    if out.exists() and any(out.iterdir()) and not force:
        raise InputError(f"{out} exists and is not empty; pass --force to replace it", field="--out")
    if out.exists() and force:
        shutil.rmtree(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {out}: {exc.strerror}", field="--out") from None


@contextlib.contextmanager
def fresh_out(out: Path, force: bool) -> Iterator[None]:
    """:func:`prepare_out`; when the block then fails, ``out`` is left as it was found before
    anything was measured: absent, or (an existing directory) empty."""
    existed = out.is_dir()
    prepare_out(out, force)
    try:
        yield
    except BaseException:
        if not existed:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for p in out.iterdir():
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink()
        raise


def check_resume(resume: bool, force: bool) -> None:
    """``--resume`` keeps what ``--force`` would replace: refused together, before anything starts."""
    if resume and force:
        raise InputError("--resume keeps the finished levels and --force replaces them: pass one of them",
                         field="--force")


#: A multi-level run's settings, written first, so that ``--resume`` can tell its own levels.
JOB = "job.json"


def job_settings(job: LoadSettings) -> dict[str, Any]:  # the JSON ``job.json`` holds: the dump edge
    """What a multi-level run measures, as JSON: its mode's settings and the eval config, less
    where it writes and how it was asked to start (``out``, ``force``, ``resume``) and the
    endpoint URL (a local server gets a fresh port each session; the model name stays).  Built
    only where ``job.json`` is written or compared; the settings travel as their model."""
    d = job.model_dump(mode="json", exclude={"base", "force", "resume"})
    base = dataclasses.asdict(job.base)
    for key in ("force", "resume", "out", "endpoint"):
        base.pop(key, None)
    d["base"] = base
    return json.loads(json.dumps(d, sort_keys=True, default=str))  # type: ignore[no-any-return]


def _differing(a: JsonValue, b: JsonValue, at: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [x for k in sorted(set(a) | set(b)) for x in _differing(a.get(k), b.get(k), f"{at}.{k}" if at else k)]
    return [] if a == b else [at or "(all)"]


def _resumable(out: Path, who: str, job: LoadSettings | None) -> list[Path]:
    """The finished levels of the same job in ``out`` (refusing another job's directory)."""
    settings = job_settings(job) if job is not None else {}
    try:
        got = read_json(out / JOB)
    except RecordError:  # absent or unreadable: not a resumable run
        raise InputError(f"{out} holds no readable {JOB}: not a multi-level run this version can resume; "
                         "rerun without --resume (with --force to replace it)", field="--resume") from None
    if got.get("who") != who or got.get("settings") != settings:
        diff = [f"mode {got.get('who')!r}"] if got.get("who") != who else \
            _differing(got.get("settings"), settings)
        raise InputError(f"{out} holds a run with other settings (differs in: {', '.join(diff[:6])}); rerun "
                         "without --resume (with --force to replace it)", field="--resume")
    return sorted(p.parent for p in out.rglob(LEVEL))


def begin_level_sets(base: EvalConfig, sets: dict[str, int], warmup: int, force: bool, who: str, *,
                     job: LoadSettings | None = None, resume: bool = False, order_seed: int | None = None
                     ) -> tuple[dict[str, Path], list[str]]:
    """Common start of every multi-level load run: the fresh out dir, ``job.json``, one expanded
    eval set per name (written under ``out/<name>``; "" writes it in ``out``) and the uncounted
    warm-up; returns the eval set paths and the notes so far.

    The options, key and endpoint are checked before the output directory is touched, and a
    failure before the first level (a bad eval set or prompt, the warm-up failing) leaves it as
    it was found.  With ``resume`` (``job``: the mode's settings) a directory holding the same
    job is kept as it is: the levels it finished are kept by :func:`.levels.run_level`."""
    if base.endpoint is None:
        raise InputError(f"{who} needs a bound endpoint (use bound_endpoint)", field="--endpoint")
    check_resume(resume, force)
    preflight(base)
    notes = []
    kept: list[Path] = []
    if resume and base.out.is_dir() and any(base.out.iterdir()):
        kept = _resumable(base.out, who, job)
        start: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    else:
        start = fresh_out(base.out, force)
    with start:
        if job is not None:
            write_json_atomic(base.out / JOB, {"who": who, "settings": job_settings(job)})
        paths = {name: expand_evalset(base.evalset, n, base.out / name if name else base.out, base.semantic_model,
                                      seed=order_seed)
                 for name, n in sets.items()}
        if warmup:
            wpath = expand_evalset(base.evalset, warmup, base.out / "warmup", base.semantic_model)
            run_level(base, wpath, 1, base.out / "warmup" / "run")
            notes.append(f"{warmup} warm-up request(s) at c=1 ran first and are not counted.")
    kept = [p for p in kept if p.parent.name != "warmup"]
    if kept:
        notes.append(f"Resumed: {len(kept)} level(s) measured in an earlier session were kept as they were "
                     f"({', '.join(str(p.relative_to(base.out)) for p in kept)}); the others ran in this one.")
    return paths, notes
