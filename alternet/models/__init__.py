"""Models: layouts, blocks, attention kinds, the AlterNet backbone and the named model zoo."""

from __future__ import annotations

from typing import Any

import timm
from torch import nn

from .attention import ATTENTION_KINDS, FocusedLinearAttention, PositionOnlyAttention, WindowAttention
from .backbone import AlterNet, BlockInfo
from .external import UnknownModelError, check_name
from .layout import LayoutError, StageSpec, alternate_layout, format_layout, parse_layout, resolve_stages
from .zoo import MODEL_NAMES


def list_models() -> list[str]:
    """Names of the models alternet defines (each also a timm model and an ``alternet/conf/model`` option)."""
    return sorted(MODEL_NAMES)


def create_model(name: str, **kwargs: Any) -> nn.Module:
    """Build a model by name, exactly as ``timm.create_model`` would: an alternet model or any other timm model,
    with a pretrained tag (``resnet50.a1_in1k``), or a ``hf-hub:`` / ``local-dir:`` source. An unknown
    architecture fails here, listing ours and the closest names."""
    check_name(name, MODEL_NAMES)
    return timm.create_model(name, **kwargs)


__all__ = [
    "ATTENTION_KINDS",
    "MODEL_NAMES",
    "AlterNet",
    "BlockInfo",
    "FocusedLinearAttention",
    "LayoutError",
    "PositionOnlyAttention",
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
