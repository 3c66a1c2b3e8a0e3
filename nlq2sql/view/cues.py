"""Each guardrail intervention with its rule and the cues that rule reads, found in the question.

A record keeps an intervention's rule id, the fields it changed and their values before and
after.  What made the rule fire — its ``when`` / ``unless`` cue, and the cues it ``set`` fields
from — lives in the rule set file, so it is read from ``guardrails/NAME.toml`` as that file is
now and evaluated on the recorded question (the page says so).  Rule set names come from the
run's manifest and are used only when they are plain names.
"""

from __future__ import annotations

import re
from typing import Any

from nlq2sql.errors import GuardrailError
from nlq2sql.stages.guardrail import VALUES, RuleSet
from nlq2sql.stages.rulesets import load_ruleset

__all__ = ["SAFE_NAME", "CueExplainer"]

SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


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

    def explain(self, guardrails: list[str], question: str, interventions: list[Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for iv in interventions:
            rule_id = iv.get("rule") if isinstance(iv, dict) else None
            info: dict[str, Any] = {"rule": rule_id if isinstance(rule_id, str) else None, "ruleset": None,
                                    "description": None, "cues": [], "problem": None}
            problems: list[str] = []
            for name in guardrails:
                rs = self.ruleset(name)
                if isinstance(rs, str):
                    problems.append(rs)
                    continue
                rule = next((r for r in rs.rules if r.id == rule_id), None)
                if rule is None:
                    continue
                info["ruleset"], info["description"] = rs.name, rule.description
                roles = ([("when (must be present)", rule.when)] if rule.when else []) + \
                        ([("unless (must be absent)", rule.unless)] if rule.unless else []) + \
                        [(f"sets {target}", cue) for target, cue in rule.set]
                for role, cue_name in roles:
                    cue = rs.cues.get(cue_name)
                    info["cues"].append({"cue": cue_name, "role": role,
                                         "found": cue.find(question) if cue is not None else None})
                break
            else:
                problems.append(f"rule {rule_id!r} is in none of the run's rule sets as they are now "
                                f"({', '.join(guardrails) or 'none recorded'})")
                info["problem"] = "; ".join(problems)
            out.append(info)
        return out
