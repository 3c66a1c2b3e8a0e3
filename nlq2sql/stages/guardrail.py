"""Deterministic guardrails: named rule sets (``guardrails/NAME.toml``) loaded by name.

A rule declares its scope (one ``field``, the ``from`` values it may change, the ``to`` value it sets)
and its trigger: ``where`` on other fields, question *cues* ``when`` present / ``unless`` absent
(regexes, exclusions blanked first: "top-line revenue" is not a ranking); it may ``set`` other
fields from a cue. Rules are idempotent: after firing, the field is outside ``from``."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nlq2sql.errors import GuardrailError
from nlq2sql.inputs import read_text, regular_file
from nlq2sql.paths import PROJECT_ROOT
from nlq2sql.semantic.catalog import Vocabulary
from nlq2sql.stages.intent import Intent, consistency_problem

__all__ = ["GUARDRAIL_DIR", "NUMBER_WORDS", "VALUES", "Cue", "CueFound", "Intervention", "Rule", "RuleSet", "apply_all",
           "check_vocabulary", "propose", "read_ruleset"]

GUARDRAIL_DIR = PROJECT_ROOT / "guardrails"
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15,
                "twenty": 20, "fifty": 50, "hundred": 100, "a dozen": 12, "dozen": 12}
NULL = "null"
#: The value-linking guardrail's name (built from the warehouse, not from a TOML file).
VALUES = "values"
CUE_MEMO_SIZE = 4096
#: What a cue finds in a question: None (absent), True, a number (group ``n``) or a value's key.
CueFound = bool | int | str | None


@dataclass(frozen=True)
class Cue:
    """A question feature: boolean (``any``), a number (group ``n``) or a keyed value."""

    name: str
    exclude: tuple[re.Pattern[str], ...] = ()
    any: tuple[re.Pattern[str], ...] = ()
    values: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...] = ()
    _memo: dict[str, CueFound] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def find(self, question: str) -> CueFound:
        """None when absent; else True, an int (group ``n``) or the matching value key.

        Remembered per question (a bounded memo: eval sets ask each question many times).
        """
        try:
            return self._memo[question]
        except KeyError:
            pass
        found = self._find(question)
        if len(self._memo) >= CUE_MEMO_SIZE:
            self._memo.clear()
        self._memo[question] = found
        return found

    def _find(self, question: str) -> CueFound:
        text = question.lower()
        for pat in self.exclude:
            text = pat.sub(" ", text)
        for key, pats in self.values:
            if any(p.search(text) for p in pats):
                return key
        for pat in self.any:
            m = pat.search(text)
            if m:
                n = m.groupdict().get("n")
                if n is None:
                    return True
                return int(n) if n.isdigit() else NUMBER_WORDS.get(n, True)
        return None


@dataclass(frozen=True)
class Rule:
    id: str
    field: str
    from_values: tuple[Any, ...]
    to: Any
    description: str = ""
    where: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    when: str | None = None
    unless: str | None = None
    set: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Intervention:
    """One firing of one rule: what changed, from what, to what."""

    rule: str
    fields: tuple[str, ...]
    before: dict[str, Any]
    after: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "fields": list(self.fields), "before": self.before,
                "after": self.after}


@dataclass(frozen=True)
class RuleSet:
    name: str
    rules: tuple[Rule, ...]
    cues: dict[str, Cue] = field(default_factory=dict)
    description: str = ""

    def scope(self, raw: dict[str, Any], gold: dict[str, Any]) -> list[str]:
        """The rules that could have helped an item (for recall): the raw value is one the rule
        may change and the gold value is the one it sets."""
        return [rule.id for rule in self.rules if raw[rule.field] in rule.from_values and gold[rule.field] == rule.to]

    def apply(self, intent: Intent, question: str) -> tuple[Intent, list[Intervention]]:
        """Apply each rule once, in order; returns the new intent and its interventions."""
        found: list[Intervention] = []
        current = intent.model_dump(mode="json")
        for rule in self.rules:
            if current[rule.field] not in rule.from_values:
                continue
            if any(current[f] not in vals for f, vals in rule.where):
                continue
            if rule.when and self.cues[rule.when].find(question) is None:
                continue
            if rule.unless and self.cues[rule.unless].find(question) is not None:
                continue
            update: dict[str, Any] = {rule.field: rule.to}
            for target, cue_name in rule.set:
                value = self.cues[cue_name].find(question)
                update[target] = None if value is True else value
            step = propose(rule.id, current, update)
            if step is not None:
                intent, current = step[0], step[1]
                found.append(step[2])
        return intent, found


def propose(rule_id: str, current: dict[str, Any], update: dict[str, Any], *, consistent: bool = False
            ) -> tuple[Intent, dict[str, Any], Intervention] | None:
    """One rule's update applied to a dumped intent: (new intent, its dump, the intervention),
    or None when nothing changes or the result would be invalid (or, with ``consistent``,
    inconsistent) — a rule skips rather than crash or produce such an intent."""
    try:
        new = Intent.model_validate({**current, **update})
    except ValidationError:
        return None
    if consistent and consistency_problem(new) is not None:
        return None
    after = new.model_dump(mode="json")
    changed = tuple(k for k in update if after[k] != current[k])
    if not changed:
        return None
    return new, after, Intervention(rule_id, changed, {k: current[k] for k in changed},
                                    {k: after[k] for k in changed})


def _compile(pats: Any, where: str, path: str) -> tuple[re.Pattern[str], ...]:
    if not isinstance(pats, list) or not all(isinstance(p, str) for p in pats):
        raise GuardrailError("must be a list of regular expressions", path=path, field=where)
    try:
        return tuple(re.compile(p) for p in pats)
    except re.error as exc:
        raise GuardrailError(f"bad regular expression: {exc}", path=path, field=where) from None


def _table(value: Any, where: str, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise GuardrailError("must be a table", path=path, field=where)
    return value


def _list(value: Any, where: str, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise GuardrailError("must be a list", path=path, field=where)
    return value


def _null(v: Any) -> Any:
    return None if v == NULL else v


def read_ruleset(name_or_path: str | Path) -> RuleSet:
    """Read a TOML rule set by name (``guardrails/NAME.toml``) or by path (the other kinds of
    rule set, ``learned:NAME`` and ``values``, are loaded by :mod:`nlq2sql.stages.rulesets`)."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = GUARDRAIL_DIR / f"{name_or_path}.toml"
    elif os.path.lexists(path):
        regular_file(path, "rule set")  # a directory, FIFO or dangling link: say so
    if not path.is_file():
        known = sorted(p.stem for p in GUARDRAIL_DIR.glob("*.toml"))
        raise GuardrailError(f"no guardrail rule set '{name_or_path}' (known: {', '.join([*known, VALUES])}, "
                             "learned:NAME)")
    try:
        data = tomllib.loads(read_text(path, "rule set"))
    except tomllib.TOMLDecodeError as exc:
        raise GuardrailError(f"invalid TOML: {exc}", path=str(path)) from None
    src = str(path)
    cues: dict[str, Cue] = {}
    for cname, spec in _table(data.get("cues", {}), "cues", src).items():
        spec = _table(spec, f"cues.{cname}", src)
        values = tuple((k, _compile(v, f"cues.{cname}.values.{k}", src))
                       for k, v in _table(spec.get("values", {}), f"cues.{cname}.values", src).items())
        cues[cname] = Cue(cname, _compile(spec.get("exclude", []), f"cues.{cname}.exclude", src),
                          _compile(spec.get("any", []), f"cues.{cname}.any", src), values)
    specs = data.get("rules", [])
    if not isinstance(specs, list) or not all(isinstance(r, dict) for r in specs):
        raise GuardrailError("must be an array of tables ([[rules]])", path=src, field="rules")
    rules = []
    for i, spec in enumerate(specs):
        where = f"rules[{i}]"
        for key in ("id", "field", "from", "to"):
            if key not in spec:
                raise GuardrailError("missing key", path=src, field=f"{where}.{key}")
        if spec["field"] not in Intent.model_fields:
            raise GuardrailError(f"unknown intent field {spec['field']!r}", path=src,
                                 field=f"{where}.field")
        from_values = _list(spec["from"], f"{where}.from", src)
        conditions = _table(spec.get("where", {}), f"{where}.where", src)
        setters = _table(spec.get("set", {}), f"{where}.set", src)
        for key, vals in conditions.items():
            if key not in Intent.model_fields:
                raise GuardrailError(f"unknown intent field {key!r}", path=src, field=f"{where}.where.{key}")
            _list(vals, f"{where}.where.{key}", src)
        for target in setters:
            if target not in Intent.model_fields:
                raise GuardrailError(f"unknown intent field {target!r}", path=src,
                                     field=f"{where}.set.{target}")
        refs = [("when", spec.get("when")), ("unless", spec.get("unless")),
                *((f"set.{k}", v) for k, v in setters.items())]
        for key, ref in refs:
            if ref is not None and ref not in cues:
                raise GuardrailError(f"unknown cue {ref!r}", path=src, field=f"{where}.{key}")
        rules.append(Rule(
            id=spec["id"], field=spec["field"], to=_null(spec["to"]),
            from_values=tuple(_null(v) for v in from_values),
            description=spec.get("description", ""),
            where=tuple((k, tuple(_null(x) for x in v)) for k, v in conditions.items()),
            when=spec.get("when"), unless=spec.get("unless"),
            set=tuple(setters.items())))
    return RuleSet(data.get("name", path.stem), tuple(rules), cues, data.get("description", ""))


def check_vocabulary(rs: RuleSet, vocab: Vocabulary, path: str | None = None) -> None:
    """A rule naming a metric or dimension the warehouse does not have is a load error."""
    allowed: dict[str, set[str | None]] = {"metric": set(vocab.metrics),
                                           "dimension": {*vocab.dimensions, None}}
    for rule in rs.rules:
        checks = [(rule.field, "from", v) for v in rule.from_values] + [(rule.field, "to", rule.to)]
        checks += [(f, f"where.{f}", v) for f, vals in rule.where for v in vals]
        for fld, key, value in checks:
            if fld in allowed and value not in allowed[fld]:
                raise GuardrailError(f"rule {rule.id!r} names {fld} {value!r}, which is not in the "
                                     f"semantic model's vocabulary", path=path or rs.name, field=f"{rule.id}.{key}")


def apply_all(rulesets: list[RuleSet], intent: Intent, question: str
              ) -> tuple[Intent, list[Intervention]]:
    """Apply rule sets in the given order; interventions accumulate."""
    out: list[Intervention] = []
    for rs in rulesets:
        intent, found = rs.apply(intent, question)
        out.extend(found)
    return intent, out
