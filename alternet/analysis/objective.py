"""The loss the Hessian and landscape analyses probe: NLL plus the L2 term of the recipe's weight decay.

Convention: ``loss(w) = NLL(w) + 0.5 * weight_decay * sum ||w_i||^2`` over the parameters the training
recipe decays (``recipe.no_decay_norm_bias`` and the model's ``no_weight_decay()`` names excluded, as in
training), so that the gradient of the L2 term is ``weight_decay * w``: the decay an SGD step applies.
With AdamW's decoupled decay this is the objective's customary L2 reading, not what AdamW minimises exactly.
NLL is the mean cross-entropy with hard labels (``label_smoothing`` optional, 0 by default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..models.params import decay_groups
from .data import Batch


def decayed_parameters(model: nn.Module, recipe: Mapping[str, Any]) -> list[nn.Parameter]:
    """The parameters training applies weight decay to."""
    groups = decay_groups(model, 1.0, exclude_norm_bias=bool(recipe["no_decay_norm_bias"]))
    return [p for group in groups if group["weight_decay"] > 0 for p in group["params"]]


@dataclass
class Objective:
    """NLL (optionally label-smoothed) and ``0.5 * weight_decay * ||w||^2`` over ``decayed``."""

    weight_decay: float
    decayed: Sequence[nn.Parameter]
    label_smoothing: float = 0.0

    @classmethod
    def from_recipe(cls, model: nn.Module, recipe: Mapping[str, Any], label_smoothing: float = 0.0) -> Objective:
        weight_decay = float(recipe["optimizer"]["weight_decay"])
        return cls(weight_decay, decayed_parameters(model, recipe), label_smoothing)

    def nll(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), labels, label_smoothing=self.label_smoothing)

    def l2(self) -> torch.Tensor:
        """``0.5 * weight_decay * sum ||w||^2`` (differentiable)."""
        if not self.decayed or self.weight_decay == 0.0:
            return torch.zeros(())
        return 0.5 * self.weight_decay * sum(p.float().pow(2).sum() for p in self.decayed)


@torch.no_grad()
def accuracy(model: nn.Module, batches: Sequence[Batch]) -> float:
    """Top-1 accuracy of ``model`` over ``batches``."""
    correct = sum(int((model(images).argmax(dim=-1) == labels).sum()) for images, labels in batches)
    return correct / sum(len(labels) for _, labels in batches)


@torch.no_grad()
def nll_accuracy(model: nn.Module, batches: Sequence[Batch], objective: Objective) -> tuple[float, float]:
    """(mean NLL, top-1 accuracy) of ``model`` over ``batches``."""
    total, correct, nll = 0, 0, 0.0
    for images, labels in batches:
        logits = model(images)
        correct += int((logits.argmax(dim=-1) == labels).sum())
        nll += float(objective.nll(logits, labels)) * len(labels)
        total += len(labels)
    return nll / total, correct / total
