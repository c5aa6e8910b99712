"""Models: blocks, attention kinds, the AlterNet backbone and the named model zoo, registered in timm on import
(their specs, layouts and names are data: :mod:`alternet.architectures`)."""

from __future__ import annotations

from ..architectures.layout import LayoutError, StageSpec, alternate_layout, format_layout, parse_layout, resolve_stages
from ..architectures.named import MODEL_NAMES
from ..architectures.rules import ATTENTION_KINDS
from . import zoo  # noqa: F401  (registers the zoo's names in timm)
from .attention import FocusedLinearAttention, PositionOnlyAttention, WindowAttention
from .backbone import AlterNet, BlockInfo
from .external import UnknownModelError
from .factory import create_model, list_models

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
