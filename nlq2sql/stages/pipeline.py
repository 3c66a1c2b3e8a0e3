"""What offline scoring is made of below the answer kinds: its configuration, the responses file
checked line by line, items without a response, the staging directory renamed into place, an eval
set checked, a records file summarised (the scoring itself: :mod:`nlq2sql.answers.offline`)."""

from __future__ import annotations

import difflib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql.errors import InputError, Nlq2SqlError
from nlq2sql.inputs import decode_line, json_object, regular_file, reusable_rest, split_id
from nlq2sql.records.item import ItemRecord, iter_item_records
from nlq2sql.records.results import Summary as SummaryModel
from nlq2sql.records.store import prepare_dir
from nlq2sql.semantic import Warehouse, warehouse
from nlq2sql.semantic.catalog import DEFAULT_WAREHOUSE
from nlq2sql.semantic.dbt_project import DbtOptions
from nlq2sql.stages.evalset import EvalSet
from nlq2sql.stages.execute import Executor
from nlq2sql.stages.guardrail import RuleSet
from nlq2sql.stages.intent import canonicalise
from nlq2sql.stages.sqlbuild import build_sql
from nlq2sql.stages.summary import Summary

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["RESPONSE_MEMO_SIZE", "EvalsetCheck", "Response", "ScoreConfig", "as_missing", "check_evalset",
           "make_executor", "publish", "read_responses", "refuse_missing", "staging_dir", "summarise_file"]


@dataclass(frozen=True)
class ScoreConfig:
    evalset: str
    responses: Path
    out: Path
    guardrails: tuple[str, ...] = ("ranking",)
    warehouse: Path | None = None  # the database (--db); default: the semantic model's shipped build
    force: bool = False
    allow_missing: bool = False  # items without a response are expected: status `missing`
    semantic_model: str = DEFAULT_WAREHOUSE  # name or path (the CLI's default, retail)
    dbt: DbtOptions | None = None  # --db-schema, --profiles-dir, --target: where the layer's relations live
    search_path: tuple[str, ...] | None = None  # --search-path; None: the layer's schemas (gold-SQL sets)


@dataclass
class Response:
    id: str
    text: str | None
    finish_reason: str | None = None


#: Distinct response lines (all but the id) whose parse is remembered while reading (bounded).
RESPONSE_MEMO_SIZE = 4096


def answer_kind_of(text: str | None) -> str | None:
    """What kind of answer a raw text plainly is (``intent``, ``query`` or ``sql``), or None when it
    cannot be told (prose, a refusal, broken JSON): a v1 intent has ``intent``/``metric`` keys, a v2
    query ``metrics``/``group_by``, SQL starts with SELECT or WITH."""
    if not isinstance(text, str):
        return None
    head = text.lstrip()[:8].upper()
    if head.startswith(("SELECT", "WITH")):
        return "sql"
    if not head.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if "metrics" in obj or "group_by" in obj:
        return "query"
    if "metric" in obj or "dimension" in obj:
        return "intent"
    return None


def read_responses(path: Path, known_ids: Mapping[str, int], answer: str | None = None, *, form: str | None = None
                   ) -> Iterator[Response]:
    """Stream ``{"id", "text"}`` lines, naming file, line and field on any problem.

    ``answer``: the kind the caller scores (``--answer``); the first line whose text is plainly
    another kind (:func:`answer_kind_of`) than its ``form`` (the kind's, ``answers.kinds``; default:
    ``answer``) is refused with the option to pass, so a file of v2 queries is not scored 0 % as v1 intents.

    ``known_ids`` maps each eval-set id to its position (a duplicate is found by position, so
    no set of every id read is built).  A line that repeats an earlier one but for its
    leading id (see :func:`inputs.split_id`) is not parsed again: its text and finish reason
    are the earlier line's (the same string objects, so later per-text caches hash them
    once), and only its id is checked.
    """
    seen = bytearray(len(known_ids))
    memo: dict[str, tuple[str | None, str | None]] = {}
    where = str(path)
    try:
        fh = open(regular_file(path, "responses"), "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read responses: {exc.strerror}", path=where) from None
    offset = 0
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            line = decode_line(raw, path=where, line=lineno, offset=offset)
            offset += len(raw)
            split = split_id(line)
            reused = memo.get(split[1]) if split is not None else None
            if split is not None and reused is not None:
                rid = split[0]
                text, finish = reused
            else:
                rid, text, finish = _parse_response(line, where, lineno)
            if not rid:
                raise InputError("missing or non-string id", path=where, line=lineno, field="id")
            pos = known_ids.get(rid)
            if pos is None:
                raise InputError(f"unknown id {rid!r} (not in the eval set)", path=where, line=lineno, field="id")
            if seen[pos]:
                raise InputError(f"duplicate id {rid!r}", path=where, line=lineno, field="id")
            seen[pos] = 1
            if answer is not None and reused is None:
                kind = answer_kind_of(text)
                if kind is not None:
                    if kind != (form or answer):
                        raise InputError(f"this answer is {_KIND_WORDS[kind]}, but --answer is {answer}: "
                                         f"pass --answer {kind}", path=where, line=lineno, field="text")
                    answer = None  # the first answer whose kind shows decides for the file
            if reused is None:
                if text is not None and not isinstance(text, str):
                    raise InputError("text must be a string or null", path=where, line=lineno, field="text")
                finish = finish if isinstance(finish, str) else None
                if split is not None and reusable_rest(split[1]):
                    if len(memo) >= RESPONSE_MEMO_SIZE:
                        memo.clear()
                    memo[split[1]] = (text, finish)
            yield Response(rid, text, finish)


def _parse_response(line: str, where: str, lineno: int) -> tuple[str, JsonValue, JsonValue]:
    """(id, text, finish_reason) of one line, as parsed (types of text and finish unchecked)."""
    if not line.strip():
        raise InputError("empty line", path=where, line=lineno)
    obj = json_object(line, path=where, line=lineno)
    rid = obj.get("id")
    if not isinstance(rid, str):
        raise InputError("missing or non-string id", path=where, line=lineno, field="id")
    if "text" not in obj:  # a line without the model's text is not "no answer": it is a malformed line
        close = difflib.get_close_matches("text", [str(k) for k in obj if k != "id"], n=1, cutoff=0.5)
        hint = f" (found {close[0]!r}: rename it to 'text')" if close else ' (null when the model gave none)'
        raise InputError("missing field 'text'" + hint, path=where, line=lineno, field="text")
    return rid, obj.get("text"), obj.get("finish_reason")


_KIND_WORDS = {"intent": "a v1 intent", "query": "a v2 query (MetricFlow)", "sql": "SQL"}


def as_missing(rec: ItemRecord) -> ItemRecord:
    """An item the responses file does not answer (``--allow-missing``): status ``missing``,
    counted as such (and as wrong), not as a request error -- no request was made (in place;
    returns it)."""
    reason = "no response in the responses file"
    rec.merge({"status": "missing", "final_status": "missing", "error_raw": "missing", "error_final": "missing",
               "status_reason": reason, "final_status_reason": reason})
    return rec


def make_executor(wh: Warehouse | Path | None = None) -> Executor:
    """An executor on a bound warehouse's database (a path or None: the default warehouse's)."""
    if isinstance(wh, Warehouse):
        return Executor(wh.db_path)
    return Executor(warehouse.ensure(wh))


@dataclass(frozen=True)
class EvalsetCheck:
    """What ``evalset check`` reports: read by the CLI, never written, so a plain value."""
    evalset: str
    cases: int
    semantic_model: str
    gold_rows: int
    problems: list[str]
    failures: tuple[tuple[str, str], ...] = ()  # (case id, why) of each problem, in set order


def check_evalset(es: EvalSet, wh: Warehouse) -> EvalsetCheck:
    """Every gold intent must build, execute and return rows (filter values are checked when
    the set is loaded against the warehouse)."""
    failures: list[tuple[str, str]] = []
    rows = 0
    with make_executor(wh) as ex:
        for case in es.cases:
            try:
                result = ex.run(build_sql(canonicalise(case.gold), wh.catalog))
                rows += len(result)
                if not result:
                    failures.append((case.id, "gold query returns no rows"))
            except Nlq2SqlError as exc:
                failures.append((case.id, str(exc)))
    return EvalsetCheck(evalset=es.name, cases=len(es.cases), semantic_model=wh.name, gold_rows=rows,
                        problems=[f"{cid}: {why}" for cid, why in failures], failures=tuple(failures))


def summarise_file(records_path: Path, rulesets: list[RuleSet],
                   fields_of: Callable[[str | None, bool], tuple[str, ...]]) -> SummaryModel:
    """Re-derive the summary from a records file (reports never trust a cached summary).

    ``fields_of(answer, gold_sql)``: the fields the recorded answer kind is summarised over (the
    kind's, ``answers.kinds``: the v1 intent's, the v2 query's parts, none for SQL or gold SQL)."""
    summ: Summary | None = None
    answer = None
    for rec in iter_item_records(records_path):
        if summ is None:
            answer = rec.answer.answer
            gold_sql = rec.judgement is not None and rec.judgement.column_rule is not None
            summ = Summary(rulesets, fields=fields_of(answer, gold_sql))
        summ.add(rec)
    figures = (summ or Summary(rulesets)).figures()
    return SummaryModel.of(figures, answer=answer) if answer is not None else SummaryModel.of(figures)


def staging_dir(cfg: ScoreConfig) -> Path:
    """The sibling temp directory a scoring run writes to (renamed into place by :func:`publish`);
    an existing non-empty ``cfg.out`` is refused first unless ``cfg.force``."""
    if cfg.out.exists() and (not cfg.out.is_dir() or (not cfg.force and any(cfg.out.iterdir()))):
        prepare_dir(cfg.out, resume=False, force=False)  # raises the standard message
    tmp = cfg.out.with_name(f".{cfg.out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        raise InputError(f"output directory is not writable: {exc.strerror}", path=str(cfg.out)) from None
    return tmp


def refuse_missing(missing: list[str], n: int, cfg: ScoreConfig) -> None:
    """Items without a response are bad input unless ``--allow-missing``."""
    if missing and not cfg.allow_missing:
        raise InputError(f"{len(missing)} of {n} eval set items have no response (first: "
                         f"{', '.join(missing[:5])}); pass --allow-missing if that is expected",
                         path=str(cfg.responses))


def publish(tmp: Path, out: Path) -> None:
    """Move a finished run directory into place (replacing ``out`` when --force allowed it)."""
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
