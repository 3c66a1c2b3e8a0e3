"""Named run specifications (``--preset NAME``), one module each, registered by name.

A :class:`Preset` is a name, one line of help and flat spec values (keys of
:meth:`nlq2sql.run.spec.RunSpec.build`). Modules here register with :func:`register` when
:func:`presets` first runs (a module elsewhere once imported). Command-line options win over it."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from nlq2sql.errors import InputError
from nlq2sql.run.spec import RunSpec

__all__ = ["Preset", "PresetRegistry", "presets", "register"]


@dataclass(frozen=True)
class Preset:
    """A named spec: ``values`` are flat spec values (``{"answer": "query", "examples": 8}``);
    what it leaves out keeps the command's default."""

    name: str
    help: str
    values: Mapping[str, Any] = field(default_factory=dict)


class PresetRegistry:
    """Presets by name, in registration order."""

    def __init__(self) -> None:
        self._by_name: dict[str, Preset] = {}

    def add(self, preset: Preset) -> None:
        if preset.name in self._by_name and self._by_name[preset.name] != preset:
            raise ValueError(f"preset {preset.name!r} is registered twice")

        RunSpec.build(preset.values)  # a preset that cannot give a spec fails where it is declared
        self._by_name[preset.name] = preset

    def remove(self, name: str) -> None:
        """Unregister (a test's preset, after the test)."""
        self._by_name.pop(name, None)

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def __iter__(self) -> Iterator[Preset]:
        return iter(tuple(self._by_name.values()))

    def __getitem__(self, name: str) -> Preset:
        try:
            return self._by_name[name]
        except KeyError:
            raise InputError(f"unknown preset {name!r} (known: {', '.join(self._by_name) or 'none'})",
                             field="--preset") from None


_REGISTRY = PresetRegistry()
_loaded = False


def register(preset: Preset) -> Preset:
    """Add a preset to the registry (a preset module calls this at import)."""
    _REGISTRY.add(preset)
    return preset


def presets() -> PresetRegistry:
    """The registry, with every module of this package imported (each registers its preset)."""
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{mod.name}")
    return _REGISTRY
