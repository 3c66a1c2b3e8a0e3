"""Each guardrail intervention with its rule and the cues that rule reads, found in the question.

Cues live in the rule set file, so they are read from ``guardrails/NAME.toml`` as it is now and
evaluated on the recorded question (the page says so); rule set names from the manifest are used
only when they are plain names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nlq2sql.errors import GuardrailError
from nlq2sql.stages.guardrail import VALUES, CueFound, RuleSet
from nlq2sql.stages.rulesets import load_ruleset

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["SAFE_NAME", "CueExplainer", "CueFinding", "Explanation"]

SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class CueFinding:
    """One cue the rule reads, its role (when / unless / sets a field) and what it finds in the question."""

    cue: str
    role: str
    found: CueFound


@dataclass
class Explanation:
    """One intervention explained (the page's keys, in this order): its rule, the rule set and
    description it came from, the cues it reads, or why none could be shown."""

    rule: str | None
    ruleset: str | None = None
    description: str | None = None
    cues: list[CueFinding] = field(default_factory=list)
    problem: str | None = None


class CueExplainer:
    def __init__(self) -> None:
        self._sets: dict[str, RuleSet | str] = {}

    def ruleset(self, name: str) -> RuleSet | str:
        """The rule set, or why it could not be loaded."""
        if name not in self._sets:
            if name.startswith("learned:"):
                self._sets[name] = f"{name} is a trained classifier: it has no cues"
            elif name == VALUES:
                self._sets[name] = "values links the warehouse values the question names: it has no cues"
            elif not SAFE_NAME.match(name):
                self._sets[name] = f"rule set name {name!r} is not a plain name; not loaded"
            else:
                try:
                    rs = load_ruleset(name)
                except GuardrailError as exc:
                    self._sets[name] = str(exc)
                else:
                    self._sets[name] = rs if isinstance(rs, RuleSet) else f"rule set {name!r} has no cues"
        return self._sets[name]

    def explain(self, guardrails: list[str], question: str, interventions: list[JsonValue]) -> list[Explanation]:
        """Each recorded intervention (a JSON value as the record holds it) explained."""
        out: list[Explanation] = []
        for iv in interventions:
            rule_id = iv.get("rule") if isinstance(iv, dict) else None
            info = Explanation(rule_id if isinstance(rule_id, str) else None)
            problems: list[str] = []
            for name in guardrails:
                rs = self.ruleset(name)
                if isinstance(rs, str):
                    problems.append(rs)
                    continue
                rule = next((r for r in rs.rules if r.id == rule_id), None)
                if rule is None:
                    continue
                info.ruleset, info.description = rs.name, rule.description
                roles = ([("when (must be present)", rule.when)] if rule.when else []) + \
                        ([("unless (must be absent)", rule.unless)] if rule.unless else []) + \
                        [(f"sets {target}", cue) for target, cue in rule.set]
                for role, cue_name in roles:
                    cue = rs.cues.get(cue_name)
                    info.cues.append(CueFinding(cue_name, role, cue.find(question) if cue is not None else None))
                break
            else:
                problems.append(f"rule {rule_id!r} is in none of the run's rule sets as they are now "
                                f"({', '.join(guardrails) or 'none recorded'})")
                info.problem = "; ".join(problems)
            out.append(info)
        return out
