"""What every analysis receives: the model, the data, the training recipe and where to write."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import ImageDataModule
from .blocks import BlockSequence, block_sequence


@dataclass
class AnalysisContext:
    """The model under analysis (in eval mode), its data module and recipe, and the output directory."""

    model: nn.Module
    datamodule: ImageDataModule
    recipe: Any  # the training recipe (alternet.training.config.RecipeConfig), or None without one
    out_dir: Path

    @cached_property
    def blocks(self) -> BlockSequence:
        return block_sequence(self.model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def path(self, filename: str) -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self.out_dir / filename


@contextmanager
def full_float32() -> Iterator[None]:
    """fp32 arithmetic as the analyses mean it: no TF32 in cuDNN's convolutions or in matmuls (10 mantissa bits,
    ~1e-3 relative: Lanczos' tolerance), which torch allows by default on a GPU. Restored afterwards."""
    precision, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put every module in eval mode; restore each module's own mode afterwards."""
    modes = {module: module.training for module in model.modules()}
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes.items():
            module.training = training
