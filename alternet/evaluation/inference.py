"""Batched inference on the accelerator, and rebuilding a model from a checkpoint."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ..checkpoints import read_checkpoint
from ..errors import CheckpointError


def choose_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_checkpoint_module(path: str | Path, use_ema: bool = False) -> tuple[nn.Module, dict[str, Any]]:
    """The ``ClassificationModule`` stored in a Lightning checkpoint (optionally with its EMA weights
    as the model), in eval mode, and the checkpoint's hyperparameters."""
    from ..training.module import ClassificationModule

    checkpoint = read_checkpoint(path)
    hparams = checkpoint.get("hyper_parameters") or {}
    if not {"model", "recipe", "data"} <= set(hparams):
        raise CheckpointError(f"checkpoint {path} was not written by alternet (no model/recipe/data hyperparameters)")
    module = ClassificationModule(**{key: hparams[key] for key in ("model", "recipe", "data")})
    missing, unexpected = module.load_state_dict(checkpoint["state_dict"], strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {path} does not match its model {hparams['model'].get('name')!r}: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    if use_ema:
        if module.ema is None:
            raise CheckpointError(f"checkpoint {path} has no EMA weights (train with recipe.ema.decay=...)")
        module.model = module.ema
    return module.eval(), hparams


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
