"""The training step every benchmark times: forward under autocast (bf16) or not, on the images' device,
cross-entropy, backward, optimizer step."""

from __future__ import annotations

from collections.abc import Callable

import torch


def training_step(
    model: torch.nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    dtype: torch.dtype | None,
) -> Callable[[], None]:
    def step() -> None:
        with torch.autocast(images.device.type, dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step
