"""Test-time flip augmentation: a prediction that averages the logits of an image and of its mirror image.

CIFAR and ImageNet classes are mirror-symmetric, and every recipe trains with horizontal flips, so the two views are
equally valid inputs; averaging them is the cheapest test-time augmentation (``recipe.test_flip``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def flip_averaged_logits(net: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor) -> torch.Tensor:
    """The mean of ``net``'s logits for ``images`` (N, C, H, W) and for the images mirrored left to right."""
    return (net(images) + net(images.flip(-1))) / 2


class FlipAveraged(nn.Module):
    """``model`` whose forward pass is :func:`flip_averaged_logits` (evaluate.py's view of a ``test_flip`` run)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return flip_averaged_logits(self.model, images)
