"""Batch mixing (mixup / cutmix) as a recipe asks for it: one home for the rule, used by training and by the
analyses that measure the training objective (the loss landscape and Hessian on mixed batches, as HDVW)."""

from __future__ import annotations

from typing import Any

from timm.data import Mixup


def recipe_mixup(recipe: Any, num_classes: int) -> Mixup | None:
    """The batch mixing of a training recipe (a :class:`~alternet.training.config.RecipeConfig`): timm's ``Mixup``
    with the recipe's label smoothing, whose targets feed a soft-target cross-entropy; None when it mixes
    nothing."""
    mixup = recipe.mixup
    if not mixup.enabled:
        return None
    return Mixup(**mixup.to_dict(), label_smoothing=recipe.label_smoothing, num_classes=num_classes)
