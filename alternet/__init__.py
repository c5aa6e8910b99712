"""alternet: train, evaluate and analyse hybrid Conv + MSA image classifiers (AlterNet and friends).

``import alternet`` is cheap (no torch, no timm), so that ``alternet --help`` answers at once: ``create_model`` and
``list_models`` load :mod:`alternet.models` on first use, and the zoo registers its architectures with timm as soon
as timm is imported (at once if it already is), so ``import alternet; timm.create_model("alternet_r50")`` works in
either order.
"""

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # albumentations checks for updates on import otherwise

from .launch import register_resolvers
from .lazy import exports

register_resolvers()  # ${alternet.run_stamp:} in hydra.run.dir: one run directory for every rank of a job

__version__ = "0.1.0"
__all__ = ["__version__", "create_model", "list_models"]

MODELS = "alternet.models"  # imported, it registers the zoo with timm

__getattr__, __dir__ = exports(__name__, {"create_model": "models", "list_models": "models"})


class _ZooAfterTimm(importlib.abc.MetaPathFinder):
    """Imports :mod:`alternet.models` right after timm has been imported, then leaves ``sys.meta_path``."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "timm":
            return None
        sys.meta_path.remove(self)
        specs = (finder.find_spec(name, path, target) for finder in sys.meta_path if hasattr(finder, "find_spec"))
        spec = next((spec for spec in specs if spec is not None), None)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_timm = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            exec_timm(module)
            importlib.import_module(MODELS)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if "timm" in sys.modules:
    importlib.import_module(MODELS)
else:
    sys.meta_path.insert(0, _ZooAfterTimm())
