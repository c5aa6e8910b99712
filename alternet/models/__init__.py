"""Models: layouts, blocks, attention kinds, the AlterNet backbone and the named model zoo."""

from __future__ import annotations

from typing import Any

import timm
from torch import nn

from ..errors import AlternetError
from .attention import ATTENTION_KINDS, FocusedLinearAttention, WindowAttention
from .backbone import AlterNet, BlockInfo
from .layout import LayoutError, StageSpec, alternate_layout, format_layout, parse_layout, resolve_stages
from .zoo import ARCHITECTURES, COMPARISON_MODELS

MODEL_NAMES: tuple[str, ...] = (*ARCHITECTURES, *COMPARISON_MODELS)


class UnknownModelError(AlternetError, ValueError):
    """A model name that neither alternet nor timm knows."""


def list_models() -> list[str]:
    """Names of the models alternet defines (each also a timm model and an ``alternet/conf/model`` option)."""
    return sorted(MODEL_NAMES)


def create_model(name: str, **kwargs: Any) -> nn.Module:
    """Build a model by name: an alternet model, or any other timm model."""
    if name not in MODEL_NAMES and name not in timm.list_models():
        raise UnknownModelError(
            f"unknown model {name!r}. alternet models: {', '.join(list_models())}. "
            "Any timm model name also works (see timm.list_models())."
        )
    return timm.create_model(name, **kwargs)


__all__ = [
    "ATTENTION_KINDS",
    "MODEL_NAMES",
    "AlterNet",
    "BlockInfo",
    "FocusedLinearAttention",
    "LayoutError",
    "StageSpec",
    "UnknownModelError",
    "WindowAttention",
    "alternate_layout",
    "create_model",
    "format_layout",
    "list_models",
    "parse_layout",
    "resolve_stages",
]
