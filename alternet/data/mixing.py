"""Batch mixing (mixup / cutmix) as a recipe asks for it: one home for the rule, used by training and by the
analyses that measure the training objective (the loss landscape and Hessian on mixed batches, as HDVW)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from timm.data import Mixup


def recipe_mixup(recipe: Mapping[str, Any], num_classes: int) -> Mixup | None:
    """The recipe's batch mixing (timm's ``Mixup`` with the recipe's label smoothing, whose targets feed a
    soft-target cross-entropy), or None when the recipe mixes nothing."""
    mixup = recipe.get("mixup")
    if not mixup or (not mixup.get("mixup_alpha") and not mixup.get("cutmix_alpha")):
        return None
    return Mixup(**dict(mixup), label_smoothing=float(recipe["label_smoothing"]), num_classes=num_classes)
