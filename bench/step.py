"""The training step every benchmark times: forward under autocast (bf16) or not, on the images' device,
cross-entropy, backward, optimizer step."""

from __future__ import annotations

from collections.abc import Callable

import torch


def batch_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, dtype: torch.dtype | None
) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """The step as a function of its batch (a loader's, say)."""

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(images.device.type, dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def training_step(
    model: torch.nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    dtype: torch.dtype | None,
) -> Callable[[], None]:
    """The step on one fixed batch."""
    step = batch_step(model, optimizer, dtype)
    return lambda: step(images, labels)
