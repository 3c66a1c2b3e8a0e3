"""Answer kinds as registered plugins: one class declares what a kind of answer is, the run reads it.

An answer kind (``--answer``: ``intent``, ``query``, ``sql``, ``sql-grammar``) is one
:class:`AnswerKind` subclass registered with :func:`register`. It declares what the harness would
otherwise decide by the kind's name: help line, **form** of its raw answers, case type and loading,
its **structured-output request part** (a plain :class:`StructuredRequest`: the transport knows no
kind), default prompt, whether **guardrails** apply, how it is **scored** (record, gold SQL, summary
fields) and whether the model **writes SQL** (sandbox per run, ``search_path`` in the manifest).
Which conditions apply stays declared by each condition. Adding a kind is one module; the built-ins
below register when this module loads."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast

from nlq2sql.answers.sql.gold import (
    GoldAnswer,
    GoldRunner,
    gold_sql_record,
    read_intent_answer,
    read_query_answer,
    read_sql_answer,
)
from nlq2sql.answers.sql.grammar import sql_grammar
from nlq2sql.answers.sql.sandbox import Sandbox
from nlq2sql.answers.sql.score import sql_record
from nlq2sql.answers.unscored import Question
from nlq2sql.errors import InputError
from nlq2sql.records.item import ItemRecord
from nlq2sql.semantic.contract import PARTS, KnownValues, answer_schema
from nlq2sql.stages.evalset import EvalCase, load_evalset
from nlq2sql.stages.goldsql import is_gold_sql_set, load_gold_sql_set
from nlq2sql.stages.intent import intent_schema
from nlq2sql.stages.query_score import query_record
from nlq2sql.stages.queryset import QueryCase, load_query_set
from nlq2sql.stages.score import intent_record
from nlq2sql.stages.sets import AnySet, Case
from nlq2sql.stages.summary import FIELDS

if TYPE_CHECKING:
    from nlq2sql.answers.sql.grammar import SqlGrammar
    from nlq2sql.records.typed import JsonValue
    from nlq2sql.semantic.binding import Warehouse
    from nlq2sql.semantic.catalog import Catalog
    from nlq2sql.stages.execute import Executor
    from nlq2sql.stages.goldsql import GoldSqlCase
    from nlq2sql.stages.guardrail import RuleSet

__all__ = ["KINDS", "AnswerKind", "IntentKind", "QueryKind", "Registry", "SqlGrammarKind", "SqlKind",
           "StructuredRequest", "answer_kind", "bind_sampling", "load_eval_set", "register", "summary_fields"]


@dataclass(frozen=True)
class StructuredRequest:
    """What a kind's requests carry to constrain the answer, as the sampling's fields: the mode
    (``None``: the run's ``--structured`` stands), the JSON Schema text, the grammar text (``None``
    with ``keep_grammar``: the sampling's stands).  Plain data: it is JSON and back (:meth:`to_json`)."""

    structured: str | None = None
    schema_json: str | None = None
    grammar: str | None = None
    keep_grammar: bool = True

    def changes(self) -> dict[str, str | None]:
        """The sampling fields this part sets (``dataclasses.replace`` keywords)."""
        out: dict[str, str | None] = {"schema_json": self.schema_json}
        if self.structured is not None:
            out["structured"] = self.structured
        if not self.keep_grammar:
            out["grammar"] = self.grammar
        return out

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StructuredRequest:
        return cls(**json.loads(text))


class _Sampling(Protocol):
    """What binding reads of the transport's sampling: its schema mode (``flat`` / ``branches``)."""

    @property
    def schema(self) -> str: ...


SamplingT = TypeVar("SamplingT", bound=_Sampling)
#: A scorer of one item: ``(case, raw text, executor, catalog, *, finish_reason=…, request_error=…)``.
Scorer = Callable[..., ItemRecord]


class AnswerKind:
    """One answer kind.  Subclasses set the class variables and override what differs; the
    defaults are a v2-style kind (query cases, no guardrails unless named, its own prompt)."""

    name: ClassVar[str]
    help: ClassVar[str] = ""
    #: What its raw answers look like (``pipeline.answer_kind_of``): ``intent``, ``query`` or ``sql``.
    form: ClassVar[str] = "query"
    #: The type of the cases it is scored on (a set of them: :meth:`load_cases`).
    case_type: ClassVar[type[Case]] = QueryCase
    #: The prompt ``--prompt baseline`` means for it.
    prompt: ClassVar[str] = "baseline"
    #: Guardrails: applied when none are named (the v1 defaults), accepted when named, or refused.
    default_guardrails: ClassVar[bool] = False
    takes_guardrails: ClassVar[bool] = True
    #: The summary's per-field scores (empty: judged by rows only).
    summary_fields: ClassVar[tuple[str, ...]] = ()
    #: The model writes SQL: it runs in the sandbox and the run records its ``search_path``.
    writes_sql: ClassVar[bool] = False
    #: Its runs carry no ``answer`` key (a run without one is of this kind).
    implicit: ClassVar[bool] = False
    #: The structured mode its requests carry regardless of ``--structured`` (None: the run's).
    structured_mode: ClassVar[str | None] = None
    #: Runs of it take ``--workers`` / ``--engine`` (other than local).
    parallel: ClassVar[bool] = True

    # -- what a run asks ---------------------------------------------------------------------
    @classmethod
    def grammar(cls, wh: Warehouse) -> SqlGrammar | None:
        """The grammar its requests are constrained by (an ``SqlGrammar``; None: none)."""
        return None

    @classmethod
    def structured(cls, catalog: Catalog, schema_mode: str, values: KnownValues = (), grammar: str | None = None
                   ) -> StructuredRequest:
        """Its requests' structured-output part on ``catalog`` (``schema_mode``: flat / branches)."""
        return StructuredRequest(schema_json=_compact(answer_schema(catalog, schema_mode, values=values)))

    @classmethod
    def constraint_mode(cls, structured: str) -> str:
        """The constraint mode its requests carry under the run's ``--structured``."""
        return cls.structured_mode or structured

    # -- what it is scored on ----------------------------------------------------------------
    @classmethod
    def load_cases(cls, path: str | Path, wh: Warehouse) -> AnySet:
        """Its eval set (checked against the warehouse; every problem of the file at once)."""
        return load_query_set(path, wh.catalog)

    @classmethod
    def fields(cls, gold_sql: bool = False) -> tuple[str, ...]:
        """The summary's fields: a gold-SQL set judges every kind by rows only."""
        return () if gold_sql else cls.summary_fields

    @classmethod
    def record(cls, case: Any, raw_text: str | None, executor: Executor, catalog: Catalog, *,
               rulesets: Sequence[RuleSet] = (), sandbox: Sandbox | None = None,
               finish_reason: str | None = None, request_error: str | None = None) -> ItemRecord:
        """One item's record: its answer read, run and judged against the case's gold."""
        raise NotImplementedError

    @classmethod
    def gold_read(cls, case: GoldSqlCase, raw_text: str | None, *, golds: GoldRunner, executor: Executor,
                  catalog: Catalog, rulesets: Sequence[RuleSet], finish_reason: str | None,
                  request_error: str | None) -> GoldAnswer:
        """Its answer to a gold-SQL item reduced to rows (``answers.sql.gold``)."""
        raise NotImplementedError(f"answer kind {cls.name!r} is not scored against gold SQL")

    @classmethod
    def gold_record(cls, case: GoldSqlCase, raw_text: str | None, *, executor: Executor, catalog: Catalog,
                    golds: GoldRunner, rulesets: Sequence[RuleSet] = (), finish_reason: str | None = None,
                    request_error: str | None = None) -> ItemRecord:
        """One gold-SQL item's record (:func:`~nlq2sql.answers.sql.gold.gold_sql_record`) with its reader."""
        return gold_sql_record(case, raw_text, answer=cls.name, read=cls.gold_read, executor=executor,
                               catalog=catalog, golds=golds, rulesets=rulesets, finish_reason=finish_reason,
                               request_error=request_error)

    @classmethod
    @contextlib.contextmanager
    def scorer(cls, wh: Warehouse, rulesets: Sequence[RuleSet], *, gold_sql: bool = False,
               search_path: Sequence[str] | None = None) -> Iterator[Scorer]:
        """Its scorer for one run: a sandbox shared by the run where it (or a gold-SQL set) needs one."""
        if not (gold_sql or cls.writes_sql):
            yield functools.partial(cls.record, rulesets=rulesets)
            return
        with Sandbox(wh.db_path, search_path=search_path) as box:
            if not gold_sql:
                yield functools.partial(cls.record, rulesets=rulesets, sandbox=box)
                return
            golds = GoldRunner(box)

            def score(case: GoldSqlCase, text: str | None, ex: Executor, catalog: Catalog, **kw: str | None
                      ) -> ItemRecord:
                return cls.gold_record(case, text, executor=ex, catalog=catalog, golds=golds, rulesets=rulesets,
                                       **kw)

            yield score


def _compact(schema: JsonValue) -> str:
    return json.dumps(schema, separators=(",", ":"))


K = TypeVar("K", bound=type[AnswerKind])


class Registry:
    """Answer kinds by name, in registration order (the order the CLI lists them)."""

    def __init__(self) -> None:
        self._by_name: dict[str, type[AnswerKind]] = {}

    def add(self, cls: type[AnswerKind]) -> None:
        if cls.name in self._by_name:
            raise ValueError(f"answer kind {cls.name!r} is registered twice")
        self._by_name[cls.name] = cls

    def remove(self, name: str) -> None:
        """Unregister (a test's kind, after the test)."""
        self._by_name.pop(name, None)

    def __iter__(self) -> Iterator[type[AnswerKind]]:
        return iter(tuple(self._by_name.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def __getitem__(self, name: str) -> type[AnswerKind]:
        try:
            return self._by_name[name]
        except KeyError:
            near = difflib.get_close_matches(str(name), list(self._by_name), n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise InputError(f"unknown answer kind {name!r} (known: {', '.join(self._by_name)}){hint}",
                             field="--answer") from None

    def help(self) -> str:
        """The kinds for ``--answer``'s help: each name and its line."""
        return "; ".join(f"'{k.name}' ({k.help})" for k in self)


#: Every answer kind this process knows.
KINDS = Registry()


def register(cls: K) -> K:
    """Class decorator: add an answer kind to :data:`KINDS`."""
    KINDS.add(cls)
    return cls


def answer_kind(name: str | None) -> type[AnswerKind]:
    """The kind named (``None``: a run that recorded none, i.e. the implicit kind)."""
    if name is None:
        return next(k for k in KINDS if k.implicit)
    return KINDS[name]


def load_eval_set(name_or_path: str | Path, answer: str, wh: Warehouse) -> AnySet:
    """The one dispatch of an eval set (``eval`` and ``batch`` both load theirs here): a gold-SQL
    set (recognised by its lines) whatever the answer, else the answer kind's own cases.  Every
    problem of the file is raised together (:class:`~nlq2sql.errors.EvalSetProblems`)."""
    if is_gold_sql_set(name_or_path, wh.name):
        return load_gold_sql_set(name_or_path, wh.name)
    sets: AnySet = KINDS[answer].load_cases(name_or_path, wh)
    return sets


def summary_fields(answer: str | None, gold_sql: bool = False) -> tuple[str, ...]:
    """The fields a recorded run of ``answer`` is summarised over (``pipeline.summarise_file``)."""
    return answer_kind(answer).fields(gold_sql)


def bind_sampling(s: SamplingT, source: Catalog | Warehouse | None, answer: str = "intent",
                  grammar: str | None = None) -> SamplingT:
    """The sampling with the answer kind's structured-output part fixed into it: on a catalog (or a
    bound warehouse: its known values of small categorical fields too), in ``s.schema`` mode;
    ``grammar``: the kind's grammar text, bound by the caller (:meth:`AnswerKind.grammar`)."""
    if source is None:
        return s
    catalog = cast("Catalog", getattr(source, "catalog", source))  # a warehouse's, or the catalog given
    part = KINDS[answer].structured(catalog, s.schema, values=getattr(source, "schema_values", ()), grammar=grammar)
    return dataclasses.replace(s, **part.changes())  # type: ignore[type-var]


# -- the built-in kinds ----------------------------------------------------------------------

@register
class IntentKind(AnswerKind):
    name = "intent"
    help = "v1 intents"
    form = "intent"
    case_type = EvalCase
    default_guardrails = True
    summary_fields = FIELDS
    implicit = True

    @classmethod
    def structured(cls, catalog: Catalog, schema_mode: str, values: KnownValues = (), grammar: str | None = None
                   ) -> StructuredRequest:
        return StructuredRequest(schema_json=_compact(intent_schema(catalog, schema_mode)))

    @classmethod
    def load_cases(cls, path: str | Path, wh: Warehouse) -> AnySet:
        return load_evalset(path, wh)

    @classmethod
    def record(cls, case: Any, raw_text: str | None, executor: Executor, catalog: Catalog, *,
               rulesets: Sequence[RuleSet] = (), sandbox: Sandbox | None = None,
               finish_reason: str | None = None, request_error: str | None = None) -> ItemRecord:
        return intent_record(case.id, case.question, raw_text, list(rulesets), executor,
                             gold=None if isinstance(case, Question) else case.gold,
                             category=getattr(case, "category", None), pair_id=getattr(case, "pair_id", None),
                             finish_reason=finish_reason, request_error=request_error, catalog=catalog)

    @classmethod
    def gold_read(cls, case: GoldSqlCase, raw_text: str | None, *, golds: GoldRunner, executor: Executor,
                  catalog: Catalog, rulesets: Sequence[RuleSet], finish_reason: str | None,
                  request_error: str | None) -> GoldAnswer:
        return read_intent_answer(case, raw_text, executor, catalog, rulesets, finish_reason, request_error)


@register
class QueryKind(AnswerKind):
    name = "query"
    help = "v2: a MetricFlow query or {\"unanswerable\": …}, scored by rows"
    prompt = "query"
    summary_fields = PARTS

    @classmethod
    def record(cls, case: Any, raw_text: str | None, executor: Executor, catalog: Catalog, *,
               rulesets: Sequence[RuleSet] = (), sandbox: Sandbox | None = None,
               finish_reason: str | None = None, request_error: str | None = None) -> ItemRecord:
        return query_record(case, raw_text, executor, catalog, finish_reason=finish_reason,
                            request_error=request_error, rulesets=rulesets)

    @classmethod
    def gold_read(cls, case: GoldSqlCase, raw_text: str | None, *, golds: GoldRunner, executor: Executor,
                  catalog: Catalog, rulesets: Sequence[RuleSet], finish_reason: str | None,
                  request_error: str | None) -> GoldAnswer:
        return read_query_answer(case, raw_text, executor, catalog, rulesets, finish_reason, request_error)


@register
class SqlKind(AnswerKind):
    name = "sql"
    help = "SQL the model wrote: guarded, sandboxed, compared by result equivalence"
    form = "sql"
    prompt = "sql"
    takes_guardrails = False
    writes_sql = True
    structured_mode = "none"
    parallel = False

    @classmethod
    def structured(cls, catalog: Catalog, schema_mode: str, values: KnownValues = (), grammar: str | None = None
                   ) -> StructuredRequest:
        # free text: the SQL is checked and sandboxed after, not constrained before
        return StructuredRequest(structured="none")

    @classmethod
    def record(cls, case: Any, raw_text: str | None, executor: Executor, catalog: Catalog, *,
               rulesets: Sequence[RuleSet] = (), sandbox: Sandbox | None = None,
               finish_reason: str | None = None, request_error: str | None = None) -> ItemRecord:
        return sql_record(case, raw_text, executor, catalog, sandbox=sandbox, finish_reason=finish_reason,
                          request_error=request_error, answer=cls.name)

    @classmethod
    def gold_read(cls, case: GoldSqlCase, raw_text: str | None, *, golds: GoldRunner, executor: Executor,
                  catalog: Catalog, rulesets: Sequence[RuleSet], finish_reason: str | None,
                  request_error: str | None) -> GoldAnswer:
        return read_sql_answer(raw_text, golds, cls.name, case.ordered, finish_reason, request_error)


@register
class SqlGrammarKind(SqlKind):
    name = "sql-grammar"
    help = "the same, under the warehouse's SQL grammar"
    structured_mode = "grammar"

    @classmethod
    def grammar(cls, wh: Warehouse) -> SqlGrammar | None:
        return sql_grammar(wh.catalog, wh)

    @classmethod
    def structured(cls, catalog: Catalog, schema_mode: str, values: KnownValues = (), grammar: str | None = None
                   ) -> StructuredRequest:
        if grammar is None:
            raise ValueError("--answer sql-grammar needs the warehouse's grammar")
        return StructuredRequest(structured="grammar", grammar=grammar, keep_grammar=False)
