"""From a model config (``alternet/conf/model/*.yaml``: a name plus the keys a user overrides) to
``create_model`` arguments.

A ``null`` in the config means "the zoo's value": the architecture's defaults live in :mod:`alternet.models.zoo`
alone, so the config never restates them. Any other timm model (``model=timm model.name=NAME``) gets only the
keywords its constructor takes (:func:`alternet.models.external.constructor_args`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import timm
import torch

from ..errors import ConfigValueError
from .external import architecture, constructor_args
from .zoo import MODEL_NAMES

# the model's name, where its starting weights come from, and whether to warn about the paper's build-up rules
NOT_MODEL_ARGS = ("name", "pretrained", "buildup_rules")


def model_args(model: Mapping[str, Any], *, num_classes: int, img_size: int, drop_path_rate: float) -> dict[str, Any]:
    """Keyword arguments for ``create_model(model["name"], ...)``: the config's non-null keys over the recipe's
    stochastic depth, with the data's class count and image size (which the config may not contradict); for a
    timm model, only those its constructor takes."""
    given = {k: v for k, v in model.items() if k not in NOT_MODEL_ARGS and v is not None}
    args = {"drop_path_rate": drop_path_rate} | given
    for key, value, source in (
        ("num_classes", num_classes, "data.num_classes"),
        ("img_size", img_size, "data.image_size"),
    ):
        if args.get(key, value) != value:
            raise ConfigValueError(f"model.{key}={args[key]} contradicts {source}={value}; set {source} instead")
        args[key] = value
    name = str(model["name"])
    if architecture(name) in MODEL_NAMES:
        return args
    return constructor_args(name, args, given=tuple(given))


def check_builds(model: Mapping[str, Any], *, num_classes: int, img_size: int, drop_path_rate: float) -> None:
    """Build one of alternet's architectures on the meta device (no memory, no weights: milliseconds), so every
    check its constructor makes (the layout, windows and heads at this input size) fails before any data are read
    or, in a sweep, before the first job trains. Other timm models are left to their own build."""
    if architecture(str(model["name"])) not in MODEL_NAMES:
        return
    args = model_args(model, num_classes=num_classes, img_size=img_size, drop_path_rate=drop_path_rate)
    with torch.device("meta"):
        timm.create_model(str(model["name"]), **args)
