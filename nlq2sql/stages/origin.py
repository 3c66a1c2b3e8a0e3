"""Where a run's manifest begins: what was scored, by which harness, against which warehouse.

Every kind of run (``eval``, ``batch``, ``score``) opens its manifest with the same keys, in the
same order (:class:`nlq2sql.records.manifest_parts.Origin`); :func:`manifest_base` builds them once,
and each run's manifest model takes them as keyword arguments (``Origin.given``).
"""

from __future__ import annotations

from pathlib import Path

from nlq2sql import __version__
from nlq2sql.env_info import git_info
from nlq2sql.records.manifest_parts import Origin
from nlq2sql.records.store import RECORD_VERSION
from nlq2sql.semantic.binding import Warehouse
from nlq2sql.semantic.catalog import display_path
from nlq2sql.stages.evalset import CaseIndex, EvalSet
from nlq2sql.stages.goldsql import GoldSqlSet
from nlq2sql.stages.guardrail import RuleSet
from nlq2sql.stages.learned_guardrail import LearnedRuleSet
from nlq2sql.stages.queryset import QuerySet

__all__ = ["manifest_base"]


def manifest_base(kind: str, evalset: EvalSet | CaseIndex | QuerySet | GoldSqlSet | None, rulesets: list[RuleSet],
                  wh: Warehouse | None = None, *, n_items: int | None = None) -> Origin:
    """The opening keys; ``evalset`` None (a batch over a question file): no eval set keys, and
    ``n_items`` must be given (it overrides the set's size where a run is cut, too)."""
    learned = {rs.name: rs.provenance() for rs in rulesets if isinstance(rs, LearnedRuleSet)}
    git = git_info()
    if n_items is None:
        if evalset is None:
            raise ValueError("manifest_base: n_items is needed without an eval set")
        n_items = len(evalset.ids) if isinstance(evalset, CaseIndex) else len(evalset.cases)
    scored = ({"evalset": evalset.name, "evalset_path": display_path(Path(evalset.path)),
               "evalset_sha256": evalset.sha256} if evalset is not None else {})
    return Origin.model_validate({  # (keys not given stay unset: not written)
        "record_version": RECORD_VERSION, "kind": kind, "harness_version": __version__,
        "git_commit": git.git_commit, "git_dirty": git.git_dirty, **scored, "n_items": n_items,
        "guardrails": [rs.name for rs in rulesets], **({"guardrail_artefacts": learned} if learned else {}),
        **({k: v for k, v in wh.manifest().to_json().items() if v is not None}
           if wh is not None else {})})
