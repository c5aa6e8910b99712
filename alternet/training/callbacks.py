"""Callbacks and plugins that make runs reproducible and checkpoints safe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..files import atomic_write
from ..seeds import derive_seed


class EpochSeed(L.Callback):
    """Reseed Python, NumPy and torch at the start of every training epoch from (seed, epoch, rank).

    Dropout, stochastic depth and mixup then depend only on the epoch, so a run resumed from an
    epoch-boundary checkpoint replays exactly what an uninterrupted run would have done.
    """

    def __init__(self, seed: int):
        self.seed = seed

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch_seed = derive_seed(self.seed, "epoch", trainer.current_epoch, trainer.global_rank)
        L.seed_everything(epoch_seed, workers=True, verbose=False)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint through a temporary file renamed into place: a run killed while saving never
    leaves a truncated file under the final name."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        atomic_write(
            path, lambda tmp: super(AtomicCheckpointIO, self).save_checkpoint(checkpoint, tmp, storage_options)
        )
