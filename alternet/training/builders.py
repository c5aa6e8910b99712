"""The Lightning pieces of a training run, built from a composed config: module, callbacks, trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import Logger

from .callbacks import AtomicCheckpointIO, EpochSeed
from .module import ClassificationModule


def build_module(config: dict[str, Any], data: dict[str, Any]) -> ClassificationModule:
    """The LightningModule of ``config`` (its model, recipe and ``performance`` sections) for the data module
    whose :meth:`~alternet.data.ImageDataModule.facts` are ``data``."""
    module = ClassificationModule(model=config["model"], recipe=config["recipe"], data=data)
    performance = config["performance"]
    if performance["channels_last"]:
        module.use_channels_last()
    if performance["compile"]:
        module.compile_model()
    return module


def build_callbacks(config: dict[str, Any], run_dir: Path, has_val: bool) -> list[Callback]:
    """Checkpointing (best by the monitored validation metric when there is a validation split, and last),
    per-epoch reseeding, optional early stopping."""
    callbacks_cfg = config["callbacks"]
    checkpoint = dict(callbacks_cfg["checkpoint"])
    if not has_val:  # without a validation split only the last checkpoint is kept
        checkpoint.update(monitor=None, save_top_k=0)
    callbacks: list[Callback] = [
        ModelCheckpoint(
            dirpath=str(run_dir / "checkpoints"),
            filename="best-epoch{epoch:03d}",
            auto_insert_metric_name=False,
            **checkpoint,
        ),
        EpochSeed(int(config["seed"])),
    ]
    if callbacks_cfg["early_stopping"] and has_val:
        callbacks.append(EarlyStopping(**callbacks_cfg["early_stopping"]))
    return callbacks


def build_trainer(config: dict[str, Any], run_dir: Path, has_val: bool, loggers: list[Logger]) -> L.Trainer:
    """``lightning.Trainer`` from the ``trainer`` section; checkpoints written atomically; the data modules shard
    their own samplers (no distributed sampler)."""
    trainer_args = dict(config["trainer"])
    if not has_val:  # no validation split (the paper's CIFAR setting): skip the loop instead of running it empty
        trainer_args["limit_val_batches"] = 0
    return L.Trainer(
        **trainer_args,
        default_root_dir=str(run_dir),
        callbacks=build_callbacks(config, run_dir, has_val),
        logger=loggers,
        plugins=[AtomicCheckpointIO()],
        use_distributed_sampler=False,
    )


def checkpoint_callback(trainer: L.Trainer) -> ModelCheckpoint:
    return next(cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint))
