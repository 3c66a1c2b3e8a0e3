"""Where a run's manifest begins: what was scored, by which harness, against which warehouse.

Every kind of run (``eval``, ``batch``, ``score``) opens its manifest with the same keys, in the
same order; :func:`manifest_base` builds them once, as a type, and each run's manifest model takes
them as keyword arguments (:meth:`RunOrigin.keys`) -- the one place they become plain values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from nlq2sql import __version__
from nlq2sql.env_info import git_info
from nlq2sql.records.manifest_parts import GuardrailArtefact
from nlq2sql.records.store import RECORD_VERSION
from nlq2sql.semantic.binding import Warehouse, WarehouseFacts
from nlq2sql.semantic.catalog import display_path
from nlq2sql.stages.evalset import CaseIndex, EvalSet
from nlq2sql.stages.guardrail import RuleSet
from nlq2sql.stages.learned_guardrail import LearnedRuleSet
from nlq2sql.stages.queryset import QuerySet

__all__ = ["RunOrigin", "manifest_base"]


class RunOrigin(msgspec.Struct, kw_only=True):
    """The manifest's opening keys in written order; UNSET ones are not written (a batch over a
    question file has no eval set; a run without a learned guardrail has no artefacts)."""

    record_version: int
    kind: str
    harness_version: str
    git_commit: str | None
    git_dirty: bool | None
    evalset: str | UnsetType = UNSET
    evalset_path: str | UnsetType = UNSET
    evalset_sha256: str | UnsetType = UNSET
    n_items: int
    guardrails: list[str]
    guardrail_artefacts: dict[str, GuardrailArtefact] | UnsetType = UNSET  # which learned model re-scored
    warehouse: WarehouseFacts | None = None  # its keys follow, flat

    def keys(self) -> dict[str, Any]:
        """As a manifest model's keyword arguments, in written order (the warehouse's keys flat)."""
        out = {f: v for f in self.__struct_fields__ if f != "warehouse" and (v := getattr(self, f)) is not UNSET}
        if self.guardrail_artefacts is not UNSET:
            out["guardrail_artefacts"] = {k: a.written() for k, a in self.guardrail_artefacts.items()}
        return out | (msgspec.structs.asdict(self.warehouse) if self.warehouse is not None else {})


def manifest_base(kind: str, evalset: EvalSet | CaseIndex | QuerySet, rulesets: list[RuleSet],
                  wh: Warehouse | None = None) -> RunOrigin:
    learned = {rs.name: rs.provenance() for rs in rulesets if isinstance(rs, LearnedRuleSet)}
    git = git_info()
    return RunOrigin(record_version=RECORD_VERSION, kind=kind, harness_version=__version__,
                     git_commit=git.git_commit, git_dirty=git.git_dirty, evalset=evalset.name,
                     evalset_path=display_path(Path(evalset.path)), evalset_sha256=evalset.sha256,
                     n_items=len(evalset.ids) if isinstance(evalset, CaseIndex) else len(evalset.cases),
                     guardrails=[rs.name for rs in rulesets], guardrail_artefacts=learned or UNSET,
                     warehouse=wh.manifest() if wh is not None else None)
