"""Rule sets by name: the one loader for TOML rule sets, learned ones and value linking, above all
three so none imports another to resolve a name."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nlq2sql.stages.guardrail import VALUES, RuleSet, check_vocabulary, read_ruleset
from nlq2sql.stages.learned_guardrail import load_learned
from nlq2sql.stages.value_links import value_ruleset

if TYPE_CHECKING:
    from nlq2sql.semantic import Warehouse
    from nlq2sql.semantic.catalog import Catalog

__all__ = ["LEARNED_PREFIX", "load_guardrails", "load_ruleset"]

#: ``learned:NAME`` names a trained classifier (:mod:`nlq2sql.stages.learned_guardrail`).
LEARNED_PREFIX = "learned:"


def load_ruleset(name_or_path: str | Path) -> RuleSet:
    """Load a rule set by name (``guardrails/NAME.toml``) or by path; ``learned:NAME`` is a
    trained classifier (:mod:`nlq2sql.stages.learned_guardrail`)."""
    if isinstance(name_or_path, str) and name_or_path.startswith(LEARNED_PREFIX):
        return load_learned(name_or_path.removeprefix(LEARNED_PREFIX))
    return read_ruleset(name_or_path)


def load_guardrails(names: list[str] | tuple[str, ...], catalog: Catalog | None = None,
                    warehouse: Warehouse | None = None) -> list[RuleSet]:
    """Load rule sets by name; ``none`` (or an empty list) means no guardrail.  With a
    semantic model, every metric/dimension a rule names must be in its vocabulary.

    ``values`` (value linking, :mod:`nlq2sql.stages.value_links`) is built from the bound
    warehouse's values; without one (a preflight check) it is only recognised."""
    out: list[RuleSet] = []
    for n in names:
        if not n or n == "none":
            continue
        if n == VALUES:
            if warehouse is not None:
                out.append(value_ruleset(warehouse))
            continue
        out.append(load_ruleset(n))
    if warehouse is not None and catalog is None:
        catalog = warehouse.catalog
    if catalog is not None:
        for rs in out:
            check_vocabulary(rs, catalog.vocabulary)
    return out
