"""From a model config (``alternet/conf/model/*.yaml``: a name plus the keys a user overrides) to
``create_model`` arguments.

A ``null`` in the config means "the zoo's value": the architecture's defaults live in :mod:`alternet.models.zoo`
alone, so the config never restates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigValueError

# the model's name, where its starting weights come from, and whether to warn about the paper's build-up rules
NOT_MODEL_ARGS = ("name", "pretrained", "buildup_rules")


def model_args(model: Mapping[str, Any], *, num_classes: int, img_size: int, drop_path_rate: float) -> dict[str, Any]:
    """Keyword arguments for ``create_model(model["name"], ...)``: the config's non-null keys over the recipe's
    stochastic depth, with the data's class count and image size (which the config may not contradict)."""
    args = {"drop_path_rate": drop_path_rate}
    args |= {k: v for k, v in model.items() if k not in NOT_MODEL_ARGS and v is not None}
    for key, value, source in (
        ("num_classes", num_classes, "data.num_classes"),
        ("img_size", img_size, "data.image_size"),
    ):
        if args.get(key, value) != value:
            raise ConfigValueError(f"model.{key}={args[key]} contradicts {source}={value}; set {source} instead")
        args[key] = value
    return args
