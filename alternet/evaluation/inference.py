"""Batched inference on the accelerator."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


def choose_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@torch.no_grad()
def predict(
    model: nn.Module,
    dataset: Dataset,
    *,
    device: torch.device,
    batch_size: int = 512,
    autocast: torch.dtype | None = None,
    num_workers: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Float32 logits and integer labels of a whole dataset, in order."""
    model.to(device).eval()
    loader = DataLoader(
        dataset, batch_size=batch_size, num_workers=num_workers, pin_memory=device.type == "cuda", shuffle=False
    )
    precision = torch.autocast(device.type, dtype=autocast) if autocast is not None else nullcontext()
    logits, labels = [], []
    with precision:
        for images, targets in loader:
            logits.append(model(images.to(device, non_blocking=True)).float().cpu())
            labels.append(targets)
    return torch.cat(logits).numpy(), torch.cat(labels).numpy()
