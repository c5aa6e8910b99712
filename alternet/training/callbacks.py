"""Callbacks and plugins that make runs reproducible and checkpoints safe."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.plugins.io import TorchCheckpointIO


class EpochSeed(L.Callback):
    """Reseed Python, NumPy and torch at the start of every training epoch from (seed, epoch, rank).

    Dropout, stochastic depth and mixup then depend only on the epoch, so a run resumed from an
    epoch-boundary checkpoint replays exactly what an uninterrupted run would have done.
    """

    def __init__(self, seed: int):
        self.seed = seed

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch_seed = (self.seed * 1_000_003 + trainer.current_epoch * 1_009 + trainer.global_rank) % 2**32
        L.seed_everything(epoch_seed, workers=True, verbose=False)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint to a temporary file in the same directory, then rename it into place.

    A run killed while saving never leaves a truncated file under the final name.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            super().save_checkpoint(checkpoint, tmp, storage_options)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
