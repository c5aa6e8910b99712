"""Package facades that import on first use (PEP 562), so that ``import alternet`` and the command line's help stay
free of torch: ``alternet --help`` answers before torch, Lightning and timm would have loaded (seconds).

A package's ``__init__`` names what it offers and the submodule each comes from::

    __getattr__, __dir__ = exports(__name__, {"build_trainer": "builders", "ClassificationModule": "module"})

``from alternet.training import build_trainer`` then imports :mod:`alternet.training.builders` at that moment.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, table: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: each name of ``table`` read from its submodule
    (relative to the package) when first asked for, then kept in the package's namespace."""

    def getattr_(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{table[name]}", package), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *table})

    return getattr_, dir_
