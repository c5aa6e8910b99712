"""The reference implementation (xxxnell/how-do-vits-work) as a model to time beside ours, read from a checkout the
user gives by path; nothing of it is copied here. Its ``models/__init__.py`` imports every model family (and
``requests``), so the ``models`` package is registered without running it and only ``models.alternet`` is loaded.
It needs ``einops`` (``pip install einops``)."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

from torch import nn


def reference_alternet_50(path: str | Path, num_classes: int = 100, image_size: int = 32) -> nn.Module:
    """The reference's ``dnn_50`` (AlterNet-50, 6 MSAs: our ``alternet_r50_hdvw``) at CIFAR settings (no pooling
    stem, window 4) below 128 px, else its ImageNet stem with window 7."""
    root = Path(path).expanduser().resolve()
    if not (root / "models" / "alternet.py").is_file():
        raise SystemExit(f"--reference {root}: not a how-do-vits-work checkout (no models/alternet.py)")
    alternet = import_reference(root, "models.alternet")
    small = image_size < 128
    return alternet.dnn_50(num_classes=num_classes, stem=not small, window_size=4 if small else 7)


def import_reference(root: Path, module: str) -> types.ModuleType:
    """A module of the checkout at ``root`` (``models.alternet``, ``ops.loss_landscapes``), its ``models`` package
    registered without running its ``__init__``; a missing dependency ends the bench in one line."""
    if "models" not in sys.modules:
        package = types.ModuleType("models")
        package.__path__ = [str(root / "models")]
        sys.modules["models"] = package
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise SystemExit(f"the reference implementation needs {error.name}: pip install {error.name}") from None
