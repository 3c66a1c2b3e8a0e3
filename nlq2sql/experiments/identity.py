"""Whether two runs ran on the same warehouse: the same data and the same semantic layer, by content.

Data: ``db_sha256``; layer: ``layer_sha256``, MetricFlow's manifest as canonical JSON, independent of
path and harness release. A run with only ``semantic_model_sha256`` (a file hash whose method varied
by release) matches when that hash is equal or it names the same semantic model on the same data; one
naming none ran on :data:`LEGACY_WAREHOUSE`. ``gate`` and ``load-check --runs`` refuse runs that
differ, ``compare`` does not pair them; each names the field and both values (:class:`Difference`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nlq2sql.records.results import LEGACY_WAREHOUSE

if TYPE_CHECKING:
    from nlq2sql.records.typed import JsonValue

__all__ = ["Difference", "RunIdentity", "difference"]


@dataclass(frozen=True)
class RunIdentity:
    """What a run's manifest says of its warehouse, as written (any age: missing keys are None)."""

    semantic_model: str | None
    semantic_model_sha256: str | None
    layer_sha256: str | None
    db_sha256: str | None

    @classmethod
    def of(cls, manifest: Mapping[str, JsonValue] | object) -> RunIdentity:
        """From a manifest as read (a JSON object) or through its model (attributes)."""
        def text(key: str) -> str | None:
            v = manifest.get(key) if isinstance(manifest, Mapping) else getattr(manifest, key, None)
            return v if isinstance(v, str) else None

        return cls(semantic_model=text("semantic_model"), semantic_model_sha256=text("semantic_model_sha256"),
                   layer_sha256=text("layer_sha256"), db_sha256=text("db_sha256"))

    @property
    def name(self) -> str:
        return self.semantic_model or LEGACY_WAREHOUSE


@dataclass(frozen=True)
class Difference:
    """What differs between two runs' warehouses: the manifest field, each run's value, and what
    that field identifies (``noun``: database, semantic layer, semantic model) and so what differs
    (``header``: warehouses, semantic layers)."""

    field: str
    base: str
    other: str
    noun: str
    header: str

    def text(self, base_label: str = "the baseline", other_label: str = "the candidate") -> str:
        return (f"different {self.header}: {base_label}'s {self.noun} ({self.field}) is {self.base}, "
                f"{other_label}'s is {self.other}")


def difference(base: RunIdentity, other: RunIdentity) -> Difference | None:
    """None when the two runs ran on the same data and layer (see the module), else what differs."""
    if base.db_sha256 and other.db_sha256 and base.db_sha256 != other.db_sha256:
        return Difference("db_sha256", base.db_sha256, other.db_sha256, "database", "warehouses")
    if base.layer_sha256 and other.layer_sha256:  # both name the layer by content: that decides
        if base.layer_sha256 != other.layer_sha256:
            return Difference("layer_sha256", f"{base.layer_sha256} ({base.name})",
                              f"{other.layer_sha256} ({other.name})", "semantic layer", "semantic layers")
        return None
    if base.semantic_model_sha256 == other.semantic_model_sha256:  # equal, or both unrecorded (the default)
        return None
    if base.name == other.name and base.db_sha256 and base.db_sha256 == other.db_sha256:
        return None  # no layer content recorded: the same semantic model on the same data
    return Difference("semantic_model", _shown(base), _shown(other), "semantic model", "warehouses")


def _shown(r: RunIdentity) -> str:
    sha = r.semantic_model_sha256
    return (f"{r.semantic_model or LEGACY_WAREHOUSE + ' (not recorded: the default)'} "
            f"(semantic_model_sha256 {sha if sha else 'not recorded'})")
