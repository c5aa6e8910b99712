"""Models: layouts, blocks, attention kinds, the AlterNet backbone and the named model zoo."""

from __future__ import annotations

from .attention import ATTENTION_KINDS, FocusedLinearAttention, PositionOnlyAttention, WindowAttention
from .backbone import AlterNet, BlockInfo
from .external import UnknownModelError
from .factory import create_model, list_models
from .layout import LayoutError, StageSpec, alternate_layout, format_layout, parse_layout, resolve_stages
from .zoo import MODEL_NAMES

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
