"""Which parameters get weight decay: the one rule that training's optimiser and the analyses' L2 term share."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import nn


def decay_groups(
    model: nn.Module,
    weight_decay: float,
    *,
    exclude_norm_bias: bool = False,
    named_params: Iterable[tuple[str, nn.Parameter]] | None = None,
    lr_scale: float = 1.0,
) -> list[dict[str, Any]]:
    """A decayed and (when not empty) an undecayed group of ``model``'s trainable parameters.

    With ``exclude_norm_bias``, 1-D parameters (norm scales and shifts, biases) and the names the model lists in
    ``no_weight_decay()`` (e.g. relative position bias tables) get no weight decay. ``named_params`` restricts
    the split to a subset of the model's parameters (e.g. its backbone); ``lr_scale`` is recorded on each group.
    """
    no_decay_names = set(getattr(model, "no_weight_decay", set)())
    decay, no_decay = [], []
    for name, param in model.named_parameters() if named_params is None else named_params:
        if not param.requires_grad:
            continue
        skip = exclude_norm_bias and (param.ndim <= 1 or name in no_decay_names)
        (no_decay if skip else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay, "lr_scale": lr_scale}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0, "lr_scale": lr_scale})
    return groups
