"""What a resumed run may change: its model and recipe, compared field by field with the ones its checkpoint saved.

A resumed run continues with the checkpoint's weights, optimizer and schedule, so a setting that differs from the
saved one would silently not apply: it is refused in one line before any work (:func:`check_resume_settings`), but
for :data:`APPLIED_ON_RESUME`, which the module applies to the restored state and ``resumes.json`` records.
"""

from __future__ import annotations

import ast
import math
import re
import warnings
from dataclasses import replace
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from ..architectures.config import ModelConfig, model_config
from ..data.augment import AugmentConfig
from ..data.config import DataConfig
from ..data.files.shards import SHARDS_DIGEST, shards_digest
from ..data.registry import DATAMODULES
from ..errors import AlternetWarning, CheckpointError, ConfigValueError
from ..runs.weights import saved_hyperparameters
from ..typed import Section, build
from .config import RecipeConfig

# settings a resumed run applies to the restored state (the training module rescales the restored learning rates and
# schedule by the new/saved ratio), recorded in resumes.json
APPLIED_ON_RESUME = ("recipe.optimizer.lr",)


def differences(model: ModelConfig, recipe: RecipeConfig, data: DataConfig, checkpoint: dict[str, Any]) -> dict:
    """``{key: (saved, now)}`` for each model and recipe key of this run that differs from the checkpoint's (of
    ``recipe.augment``, the section the data's family reads: the other changes nothing the run computes)."""
    hparams = saved_hyperparameters(checkpoint, "the checkpoint to resume")
    try:
        saved_model = model_config(hparams.get("model") or {})
        saved_recipe = build(RecipeConfig, hparams.get("recipe") or {}, "recipe.")
    except ConfigValueError as error:
        raise CheckpointError(
            f"the checkpoint to resume holds settings this version of alternet does not read ({error}); start a new "
            "run from its weights instead (model.pretrained=CHECKPOINT)"
        ) from None
    family = DATAMODULES[data.name].augment_section
    return _changed(saved_model, model, "model") | _changed(
        _as_read(saved_recipe, family), _as_read(recipe, family), "recipe"
    )


SAMPLING_KEY = "sampling"  # in Lightning checkpoints: the settings that choose the images a run trains on


def sampling(seed: int, data: DataConfig) -> dict[str, Any]:
    """The settings that decide which images a run trains, holds out and measures, in which order and how it
    normalises them: the run's seed, the hold-out, the subsets and the normalisation as configured."""
    keys = ("split_seed", "val_size", "subset", "subset_repeat", "train_clean_size", "mean", "std")
    return {"seed": seed} | {f"data.{key}": getattr(data, key) for key in keys}


class SamplingRecord(Callback):
    """Writes :func:`sampling` into every checkpoint, for :func:`check_resume_settings` to compare."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        checkpoint[SAMPLING_KEY] = self.record


def check_resume_monitor(monitor: str | None, mode: str, checkpoint: str, header: dict[str, Any]) -> None:
    """Refuse a resume whose checkpoint monitor keeps ``monitor`` the other way than the checkpoint's record of its
    best did: Lightning keys that record by monitor and mode, so it would be dropped without a word (the best chosen
    among the resumed epochs only, the earlier best file left beside the new one); a run recorded before the mode
    followed its metric (``val/acc`` with ``mode: min``) meets this."""
    for key in header.get("callbacks") or {}:
        recorded = re.fullmatch(r"\w*Checkpoint(\{.*\})", key)
        try:
            state = ast.literal_eval(recorded.group(1)) if recorded else None
        except (ValueError, SyntaxError):
            continue
        if isinstance(state, dict) and state.get("monitor") == monitor and state.get("mode") not in (None, mode):
            raise ConfigValueError(
                f"{checkpoint} kept its best {monitor} with callbacks.checkpoint.mode={state['mode']}, and this run "
                f"would keep it with mode={mode}, dropping that record: resume with "
                f"callbacks.checkpoint.mode={state['mode']}, or start a new run"
            )


def check_resume_settings(
    model: ModelConfig,
    recipe: RecipeConfig,
    data: DataConfig,
    checkpoint: str,
    header: dict[str, Any],
    seed: int,
) -> dict[str, list[Any]]:
    """Refuse a resume from ``checkpoint`` (its ``header``) with settings the run would silently not apply, or
    that would make its record false: every model, recipe and data-set difference but :data:`APPLIED_ON_RESUME`,
    and every :func:`sampling` setting (a checkpoint from before they were saved is not checked for them). Returns
    ``{key: [saved, now]}`` for the :data:`APPLIED_ON_RESUME` settings this resume changes."""
    found = differences(model, recipe, data, header)
    conflicts = [
        f"{key}: {before!r} -> {now!r}"
        for key, (before, now) in sorted(found.items())
        if key not in APPLIED_ON_RESUME  # a learning rate: both checked > 0 as their recipes were built
    ]
    saved, now = header.get(SAMPLING_KEY) or {}, sampling(seed, data)
    conflicts += [f"{key}: {saved[key]!r} -> {now[key]!r}" for key in now if key in saved and saved[key] != now[key]]
    check_resume_loader(checkpoint, header, getattr(data, "train_shards", None))
    facts = (header.get("hyper_parameters") or {}).get("data") or {}
    for key in ("name", "image_size"):
        if key in facts and facts[key] != getattr(data, key):
            conflicts.append(f"data.{key}: {facts[key]!r} -> {getattr(data, key)!r}")
    if conflicts:
        raise ConfigValueError(
            f"resuming from {checkpoint} with settings that differ from the run that saved it "
            f"({'; '.join(conflicts)}): a resumed run continues with the checkpoint's model, optimizer, schedule "
            "and images, so they would not apply or its record would be false. Give them the saved values, or start a "
            "new run in its own hydra.run.dir (model.pretrained=CHECKPOINT starts from it)"
        )
    return {key: list(change) for key, change in found.items() if key in APPLIED_ON_RESUME}


BATCH_KEY = "global_batch"  # in Lightning checkpoints: [per-device batch, processes, accumulated batches]
CLEAN_KEY = "train_clean"  # in Lightning checkpoints: the last epoch's train_clean/* values
SCHEDULE_KEY = "schedule_epochs"  # in Lightning checkpoints: the epochs its learning-rate schedule spans
EPOCH_KEY = "epoch_so_far"  # in Lightning checkpoints: the epoch's training hits and loss until the checkpoint
STEPS_KEY = "schedule_steps_per_epoch"  # in Lightning checkpoints: the optimizer steps an epoch of its schedule counts


def warn_earlier_schedule(checkpoint: str, header: dict[str, Any], recorded: dict[str, Any] | None) -> None:
    """A checkpoint saved before the schedule spanned ``recipe.epochs`` (it spanned ``trainer.max_epochs``): where
    its run stopped early by ``trainer.max_epochs``, the resumed learning rate follows another curve; said."""
    if SCHEDULE_KEY in header or not recorded:
        return
    stopped, epochs = (recorded.get("trainer") or {}).get("max_epochs"), (recorded.get("recipe") or {}).get("epochs")
    if stopped and epochs and stopped != epochs:
        warnings.warn(
            f"{checkpoint} was saved by an earlier alternet, whose learning-rate schedule spanned trainer.max_epochs="
            f"{stopped}; it now spans recipe.epochs={epochs}, so the resumed run's learning rate follows another "
            "curve than the one it trained on",
            AlternetWarning,
            stacklevel=2,
        )


def check_resume_batch(checkpoint: str, header: dict[str, Any], batch: list[int]) -> None:
    """Refuse a resume whose images per optimizer step (``batch``: the per-device batch, the processes, the accumulated
    batches) differ from the saved run's: its learning rate was scaled for them and its schedule counts their steps,
    and a resumed run keeps both. (A checkpoint from before this was saved is not checked.)"""
    saved = header.get(BATCH_KEY)
    if saved is None or saved == batch:
        return
    if math.prod(saved) != math.prod(batch):
        raise ConfigValueError(
            f"resuming from {checkpoint} with {math.prod(batch)} images per optimizer step ({_spelled(batch)}) where "
            f"it trained with {math.prod(saved)} ({_spelled(saved)}): its learning rate was scaled for that global "
            "batch and its schedule counts those steps, and a resumed run keeps both. Resume on as many devices and "
            "nodes with the same trainer.accumulate_grad_batches, or start a new run from its weights "
            "(model.pretrained=CHECKPOINT)"
        )
    if _mid_epoch(header):
        raise ConfigValueError(
            f"resuming from {checkpoint} with {_spelled(batch)} where it was saved mid-epoch with {_spelled(saved)}: "
            "its loader position counts each process's batches, so the rest of the epoch would repeat or skip "
            "images. Resume it on as many devices and nodes with the same trainer.accumulate_grad_batches, or from "
            "a checkpoint saved at an epoch's end"
        )


def check_resume_steps(checkpoint: str, header: dict[str, Any], steps: int | None) -> None:
    """Refuse a resume whose epochs hold another number of optimizer steps (``trainer.limit_train_batches``, or data
    that changed) than the saved run's schedule counted: rebuilt over the new count, its learning rate would jump
    or sit at 0 for the rest of the run. (A checkpoint from before this was saved, or a data module that does not
    count its batches, is not checked.)"""
    saved = header.get(STEPS_KEY)
    if saved is None or steps is None or saved == steps:
        return
    raise ConfigValueError(
        f"resuming from {checkpoint} with {steps} optimizer steps per epoch where its schedule counted {saved} "
        "(trainer.limit_train_batches, or the training data, changed): the learning-rate schedule would be rebuilt "
        "over the new count. Resume with the same trainer.limit_train_batches, or start a new run from its weights "
        "(model.pretrained=CHECKPOINT)"
    )


def check_resume_loader(checkpoint: str, header: dict[str, Any], shards: str | None) -> None:
    """A resume reads its training images as the run that saved it did: from the image folders or from streamed
    shards (their loaders save positions of two kinds), and streamed, from the same shards (LitData restores a
    position in the chunks it saved; shards written again hold other chunks, even from the same folder)."""
    state = _loader_state(header)
    if not state:
        return
    streamed = "current_epoch" in state  # LitData's position; the folders' loader saves its epoch and batches
    if streamed != bool(shards):
        was = "streaming data.train_shards" if streamed else "reading the image folders (data.train_shards unset)"
        now = f"data.train_shards={shards}" if shards else "no data.train_shards"
        raise ConfigValueError(
            f"resuming from {checkpoint} with {now} where it was saved {was}: the loader restores its saved state "
            "(its epoch, and inside an epoch its position), which is of the other kind. Resume it as it trained, or "
            "read the images the other way in a new run from its weights (model.pretrained=CHECKPOINT)"
        )
    saved, now = state.get(SHARDS_DIGEST), shards_digest(shards) if shards else None
    if streamed and saved and now and saved != now:
        raise ConfigValueError(
            f"resuming from {checkpoint} with data.train_shards={shards}, which hold other shards than the run "
            "stopped in (their index.json changed: written again?): LitData restores its saved state, a position in "
            "the chunks it read (inside an epoch, images would repeat and others be skipped). Resume with the shards "
            "it trained on, or train on the new ones in a new run from its weights (model.pretrained=CHECKPOINT)"
        )


def _mid_epoch(header: dict[str, Any]) -> bool:
    """Whether a checkpoint was saved inside an epoch: its training loader's position (``data.base``) short of the
    epoch's end (a checkpoint from before the position recorded the epoch's length counts as mid-epoch)."""
    state = _loader_state(header)
    return 0 < int(state.get("batches", 0)) < int(state.get("of", 2**62))


def _loader_state(header: dict[str, Any]) -> dict[str, Any]:
    """The training loader's saved state in a checkpoint (Lightning's fit loop keeps it); empty where there is none."""
    loops = (header.get("loops") or {}).get("fit_loop", {}).get("state_dict", {})
    states = loops.get("combined_loader") or [{}]
    return states[0] if isinstance(states[0], dict) else {}


def _spelled(batch: list[int]) -> str:
    return f"batch {batch[0]} x {batch[1]} processes x {batch[2]} accumulated"


def _changed(before: Section, now: Section, prefix: str) -> dict[str, tuple[Any, Any]]:
    """Field by field, sub-sections included: each key whose values differ."""
    old, new = _flat(before.to_dict(), prefix), _flat(now.to_dict(), prefix)
    return {key: (old.get(key), new.get(key)) for key in old.keys() | new.keys() if old.get(key) != new.get(key)}


def _flat(node: Any, prefix: str) -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}.{key}").items()}
    return {prefix: node}


def _as_read(recipe: RecipeConfig, family: str) -> RecipeConfig:
    """``recipe`` as a data set of this family reads it: of ``recipe.augment``, its own section alone."""
    own = getattr(recipe.augment, family) if recipe.augment is not None else None
    return replace(recipe, augment=AugmentConfig(**{family: own}))
