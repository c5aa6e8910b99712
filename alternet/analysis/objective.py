"""The loss the Hessian and landscape analyses probe: the NLL of the batch's targets (soft-target cross-entropy for
soft (B, classes) targets, cross-entropy with ``label_smoothing`` for hard labels) plus an L2 term from the recipe's
weight decay (``regulariser``: ``hdvw``, HDVW's unsquared ``weight_decay * sum_i ||w_i||``; ``decay_squared``; or
``none``). The terms, and why each is kept: docs/analysis.md, "Loss landscape".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..models.params import decay_groups
from .config import ObjectiveConfig
from .data import Batch, labels_of


def penalised_parameters(model: nn.Module, recipe: Any, regulariser: str) -> list[nn.Parameter]:
    """The parameters the L2 term covers: every trainable one (``hdvw``), the decayed ones (``decay_squared``)."""
    if regulariser == "hdvw":
        return [p for p in model.parameters() if p.requires_grad]
    if regulariser == "decay_squared":  # the parameters training applies weight decay to
        groups = decay_groups(model, 1.0, exclude_norm_bias=recipe.no_decay_norm_bias)
        return [p for group in groups if group["weight_decay"] > 0 for p in group["params"]]
    return []


def unsquared_norms(params: Sequence[nn.Parameter]) -> list[torch.Tensor]:
    """||w|| of each tensor that is not all zeros. ||w|| has no derivative at w = 0 (its gradient w / ||w|| is
    0/0 there, and autograd's second derivative NaN): a zero tensor (e.g. a norm shift at initialisation) adds 0
    to the value and, by this convention, nothing to the gradient or the Hessian."""
    return [torch.linalg.vector_norm(p.float()) for p in params if bool(p.detach().any())]


@dataclass
class Objective:
    """NLL of hard or soft targets plus the ``regulariser``'s L2 term over ``penalised``."""

    weight_decay: float
    penalised: Sequence[nn.Parameter]
    regulariser: str
    label_smoothing: float = 0.0
    log_of_softmax: bool = False  # HDVW's landscape: torch.log(softmax(z)) in place of the logits (see nll)

    @classmethod
    def from_recipe(cls, model: nn.Module, recipe: Any, regulariser: str, label_smoothing: float = 0.0) -> Objective:
        """The objective of a training recipe (a :class:`~alternet.training.config.RecipeConfig`)."""
        return cls(
            recipe.optimizer.weight_decay,
            penalised_parameters(model, recipe, regulariser),
            regulariser,
            label_smoothing,
        )

    def nll(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy; soft targets (B, classes) as timm's SoftTargetCrossEntropy. With
        ``log_of_softmax``, HDVW's ``ops/tests.py`` form: the loss of ``torch.log(softmax(z))``, which equals it
        until a probability underflows float32 to 0 far from the trained weights; then it is infinite (NaN under
        a zero soft target), where the stable form stays finite."""
        inputs = torch.log(F.softmax(logits.float(), dim=-1)) if self.log_of_softmax else logits.float()
        if targets.ndim == 2:
            return -(targets.float() * F.log_softmax(inputs, dim=-1)).sum(dim=-1).mean()
        return F.cross_entropy(inputs, targets, label_smoothing=self.label_smoothing)

    def l2(self) -> torch.Tensor:
        """The L2 term at the current weights (differentiable)."""
        if not self.penalised or self.weight_decay == 0.0:
            return torch.zeros(())
        if self.regulariser == "hdvw":
            return self.weight_decay * sum(unsquared_norms(self.penalised))
        return 0.5 * self.weight_decay * sum(p.float().pow(2).sum() for p in self.penalised)

    def describe(self) -> str:
        """The loss as a formula, for figure titles."""
        return {
            "hdvw": f"NLL + {self.weight_decay:g}·Σ‖w‖",
            "decay_squared": f"NLL + ½·{self.weight_decay:g}·Σ‖w‖²",
            "none": "NLL",
        }[self.regulariser]


@torch.no_grad()
def accuracy(model: nn.Module, batches: Sequence[Batch]) -> float:
    """Top-1 accuracy of ``model`` over ``batches`` (soft targets: their largest class)."""
    correct = sum(int((model(images).argmax(dim=-1) == labels_of(t)).sum()) for images, t in batches)
    return correct / sum(len(t) for _, t in batches)


@torch.no_grad()
def nll_accuracy(model: nn.Module, batches: Sequence[Batch], objective: Objective) -> tuple[float, float]:
    """(mean NLL over images, top-1 accuracy) of ``model`` over ``batches``."""
    total, correct, nll = 0, 0, 0.0
    for images, targets in batches:
        logits = model(images)
        correct += int((logits.argmax(dim=-1) == labels_of(targets)).sum())
        nll += float(objective.nll(logits, targets)) * len(targets)
        total += len(targets)
    return nll / total, correct / total


def batch_size_of(config: ObjectiveConfig, recipe: Any) -> int:
    """The configured batch size, or the recipe's (``batch_size: null``)."""
    return recipe.batch_size if config.batch_size is None else config.batch_size


def objective_of(model: nn.Module, recipe: Any, config: ObjectiveConfig) -> Objective:
    """The configured loss: hard labels are smoothed by the recipe's label smoothing under
    ``targets=training`` (training's loss without mixup) and by ``label_smoothing`` under ``targets=labels``."""
    smoothing = recipe.label_smoothing if config.targets == "training" else config.label_smoothing
    return Objective.from_recipe(model, recipe, config.regulariser, smoothing)
