"""The base of every named model's spec: a frozen dataclass of constructor keywords plus the class it builds."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

from torch import nn


class ModelSpec:
    """A frozen dataclass of constructor keywords for one named model, plus the class it builds."""

    model_class: ClassVar[type[nn.Module]]
    first_conv: ClassVar[str]  # timm pretrained_cfg: the input layer and the classifier
    classifier: ClassVar[str]

    def kwargs(self) -> dict[str, Any]:
        """The spec as constructor keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
