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
    """fp32 arithmetic as the analyses mean it: no TF32 in matmuls or cuDNN (10 mantissa bits, ~1e-3 relative:
    Lanczos' tolerance), which torch allows by default on a GPU, and no bf16 in oneDNN's on a CPU. Restored
    afterwards as it was, whether it was set through torch's legacy calls or its per-backend ``fp32_precision``;
    within, the legacy calls read "highest" and ``allow_tf32=False`` unless the caller had already mixed the two
    (torch then refuses the legacy reads)."""
    backends = torch.backends
    settings = (backends, backends.cuda.matmul, backends.cudnn, backends.mkldnn)  # each parent before its children
    settings += (backends.cudnn.conv, backends.cudnn.rnn, backends.mkldnn.matmul, backends.mkldnn.conv)
    settings += (backends.mkldnn.rnn,)
    saved = [(setting, setting.fp32_precision) for setting in settings]
    legacy = _legacy_precision()
    if legacy is not None:  # set as the legacy calls set it, so that they read it back within
        torch.set_float32_matmul_precision("highest")
        backends.cudnn.allow_tf32 = False
    else:
        for setting in (backends.cuda.matmul, backends.cudnn.conv, backends.cudnn.rnn, backends.mkldnn.matmul):
            setting.fp32_precision = "ieee"
    for setting in (backends.mkldnn.conv, backends.mkldnn.rnn):
        setting.fp32_precision = "ieee"
    try:
        yield
    finally:
        if legacy is not None:
            torch.set_float32_matmul_precision(legacy[0])
            backends.cudnn.allow_tf32 = legacy[1]
        for setting, precision in saved:
            setting.fp32_precision = precision


def _legacy_precision() -> tuple[str, bool] | None:
    """The legacy calls' matmul precision and cuDNN TF32 flag; None once the per-backend settings were mixed in."""
    try:
        return torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    except RuntimeError:
        return None


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
