"""The checks of a composed training config across its sections, before any work.

Each section checks its own keys as it is made (:mod:`alternet.apps.config`, one line naming the key): the fixed
sections and the ``data`` and ``model`` sections their names choose. What remains here: the ``trainer`` section
(Lightning's arguments), and the rules across sections (the monitor names a metric the recipe logs, EMA export needs
EMA weights, a hybrid's windows fit the data's image size ...).
"""

from __future__ import annotations

import inspect
import os
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping

from .. import tracking
from ..architectures.config import LayoutModel, ModelConfig, TimmModel
from ..architectures.layout import buildup_violations
from ..architectures.named import HYBRIDS, MODEL_NAMES
from ..architectures.specs import spec_with
from ..data.augment import STACKS
from ..data.config import DataConfig, FolderDataConfig
from ..data.registry import DATAMODULES
from ..errors import AlternetWarning, ConfigValueError, is_integer, one_of, require, suggest
from ..evaluation.inference import choose_device
from ..hardware import machine_memory
from ..launch import devices_per_job, visible_gpus
from ..metrics.table import SPLIT_KEYS, metric_mode
from ..models.external import check_name, require_pretrained
from ..models.factory import check_builds
from ..runs.records import import_modules
from ..training.config import TrainerConfig, check_trainer_keys, trainer_arguments
from ..training.optim import check_min_lr
from ..training.precision import PRECISIONS
from .config import TrainConfig, train_config
from .extensions import check_targets

OWN_KEYS = {  # the keys of one optimizer or schedule (key: its name), which the others leave unread
    "optimizer": {"betas": "adamw", "momentum": "sgd", "nesterov": "sgd"},
    "schedule": {"min_lr": "cosine", "milestones": "step", "gamma": "step"},
}


def validate_train_config(cfg: Mapping[str, Any], here: bool = True) -> TrainConfig:
    """A resolved training config as objects, every static check made (the checks that need the data happen in
    the DataModule). ``here=False``: the run will run on another machine (a SLURM sweep's job, checked where it is
    submitted), so what this machine has (its GPUs, its memory) is left to the job's own checks."""
    import_modules(cfg.get("imports"))  # first: what they register is known to every check below
    config = train_config(cfg)
    check_targets(config.callbacks.extra, "callbacks.extra")
    check_targets(config.logger.extra, "logger.extra")
    check_model(config)
    warn_buildup(config.model)
    epochs, warmup = config.trainer.max_epochs, config.recipe.warmup_epochs
    if warmup and epochs and warmup > epochs:
        warnings.warn(
            f"recipe.warmup_epochs={warmup:g} exceeds trainer.max_epochs={epochs}: the learning rate never reaches "
            "its base value (fine for a smoke test, not for a real run)",
            AlternetWarning,
            stacklevel=2,
        )
    if epochs > config.recipe.epochs:
        warnings.warn(
            f"trainer.max_epochs={epochs} exceeds recipe.epochs={config.recipe.epochs}: the schedule ends at epoch "
            f"{config.recipe.epochs} and the epochs after it train at its final learning rate; set "
            f"recipe.epochs={epochs} for a schedule over all of them",
            AlternetWarning,
            stacklevel=2,
        )
    grown = sum(config.recipe.progressive_resize.epochs)
    if grown >= epochs:
        warnings.warn(
            f"recipe.progressive_resize grows over {grown} epochs and trainer.max_epochs={epochs}: the model never "
            f"trains at data.image_size={config.data.image_size}",
            AlternetWarning,
            stacklevel=2,
        )
    schedule, after_warmup = config.recipe.schedule, epochs - config.recipe.warmup_epochs
    late = [m for m in schedule.milestones or [] if m >= after_warmup] if schedule.name == "step" else []
    if late:
        warnings.warn(
            f"recipe.schedule.milestones {late} come at or after the run's last epoch ({after_warmup:g} after "
            f"warm-up, trainer.max_epochs={epochs}): the learning rate never steps there",
            AlternetWarning,
            stacklevel=2,
        )
    finetune = config.recipe.finetune
    if (finetune.freeze_backbone or finetune.backbone_lr_scale != 1) and not config.model.pretrained:
        warnings.warn(
            "recipe.finetune treats the backbone apart and model.pretrained is not set: it starts from random "
            "weights (a control; for fine-tuning set model.pretrained=SOURCE)",
            AlternetWarning,
            stacklevel=2,
        )
    for part, owners in OWN_KEYS.items():
        section = getattr(config.recipe, part)
        unread = [key for key, owner in owners.items() if getattr(section, key) is not None and section.name != owner]
        if unread:
            warnings.warn(
                f"recipe.{part}.{', '.join(unread)} {'is' if len(unread) == 1 else 'are'} not read by "
                f"recipe.{part}.name={section.name}",
                AlternetWarning,
                stacklevel=2,
            )
    warn_unread_randaugment(config)
    check_optimized_metric(config)
    check_monitor(config)
    check_trainer(config.trainer)
    check_gradient_clip(config)
    trainer = config.trainer
    gpus = visible_gpus() if here else 0
    devices = devices_per_job(trainer.devices, trainer.accelerator, gpus) or (None if gpus or not here else 1)
    if devices is not None:  # else the module checks it once its Trainer knows
        check_min_lr(
            config.recipe, config.recipe.batch_size * devices * trainer.num_nodes * trainer.accumulate_grad_batches
        )
    check_slurm_tasks(config.trainer)
    if here:
        check_accelerator(config)
        choose_device(config.evaluate.device, "evaluate.device")
    if config.export.after_training and config.export.ema and not config.recipe.ema.enabled:
        raise ConfigValueError("export.ema=true needs EMA weights: set recipe.ema.decay (e.g. recipe.ema.decay=0.9999)")
    precision = str(config.trainer.precision)
    if precision in HALF_WEIGHTS and config.recipe.ema.enabled:  # the whole module converted, the EMA with it
        raise ConfigValueError(
            f"recipe.ema.decay={config.recipe.ema.decay:g} with trainer.precision={precision}: the EMA's weights would "
            f"be {HALF_WEIGHTS[precision]}, too coarse for its per-step change ({1 - config.recipe.ema.decay:g} of "
            f"the gap to the weights: an EMA that barely moves); use trainer.precision={precision[:-5]}-mixed, or "
            "recipe.ema.decay=null"
        )
    strategy = config.trainer.extra.get("strategy", "auto")
    if config.performance.ddp_compression and strategy != "ddp":  # dropped without a word (training.builders)
        raise ConfigValueError(
            f"performance.ddp_compression={config.performance.ddp_compression} compresses trainer=ddp's gradients, "
            f"and trainer.strategy is {strategy}: add trainer=ddp"
        )
    if here:
        check_input_memory(config)
    check_model_builds(config)
    config.logger.wandb = tracking.usable(config.logger.wandb)
    return config


def warn_unread_randaugment(config: TrainConfig) -> None:
    """A recipe written for the other data family (``data=cifar100 recipe=imagenet``): its RandAugment sits on the
    stack this data set does not read, and the run trains without one."""
    datamodule = DATAMODULES.get(config.data.name)
    if datamodule is None:
        return
    family, augment = datamodule.augment_section, config.recipe.augment
    own = getattr(augment, family)
    if own is not None and own.randaugment:
        return
    for name in STACKS:
        other = getattr(augment, name)
        if name != family and other is not None and other.randaugment:
            warnings.warn(
                f"recipe.augment.{name}.randaugment={other.randaugment} is not read by data={config.data.name}, "
                f"which reads recipe.augment.{family} (randaugment null there): it trains without RandAugment; set "
                f"recipe.augment.{family}.randaugment, or choose a recipe written for its data (e.g. recipe="
                f"{'paper' if family == 'arrays' else 'imagenet'})",
                AlternetWarning,
                stacklevel=2,
            )


def check_input_memory(config: TrainConfig) -> None:
    """One training batch of input images alone (float32, before any activation) fits in a quarter of this
    machine's memory: ``data.image_size=100000`` is refused here, not by the operating system mid-epoch."""
    size, batch = config.data.image_size, config.recipe.batch_size
    needed = batch * 3 * size * size * 4
    if needed > machine_memory() / 4:
        raise ConfigValueError(
            f"data.image_size={size} with recipe.batch_size={batch} needs {needed / 2**30:,.1f} GiB for one batch of "
            f"input images alone, more than a quarter of this machine's {machine_memory() / 2**30:,.0f} GiB; choose "
            "a smaller data.image_size or recipe.batch_size"
        )


CHECKPOINTS_AT_ONCE = 3  # best, last and the one an atomic write is making


def check_disk_space(directory: Path, module: torch.nn.Module, optimizer_moments: int = 2) -> None:
    """The run directory's disk holds the checkpoints the run will write (the module's state, the EMA's included, and
    ``optimizer_moments`` float32 tensors per trainable parameter): a full disk was found as the first epoch ended,
    its training lost."""
    state = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    moments = optimizer_moments * 4 * sum(p.numel() for p in module.parameters() if p.requires_grad)
    needed = CHECKPOINTS_AT_ONCE * (state + moments)
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise ConfigValueError(
            f"run directory {directory} has {free / 2**20:,.0f} MiB free; a checkpoint of this model takes about "
            f"{(state + moments) / 2**20:,.0f} MiB and the run keeps up to {CHECKPOINTS_AT_ONCE} at once (best, last "
            "and the one being written): free space there, or choose another hydra.run.dir"
        )


def reported_metrics(config: TrainConfig) -> list[str]:
    """The metrics a run with this config reports at its end: every test metric (and its EMA twin with
    ``recipe.ema``) and, with a validation split, the best value of the checkpoint monitor."""
    names = split_metrics(config, "test")
    monitor = config.callbacks.checkpoint.monitor
    if monitor and validates(config.data):
        names.insert(0, monitor)
    return names


def split_metrics(config: TrainConfig, split: str) -> list[str]:
    """``split/metric`` for each metric of the table (and ``split_ema/metric`` with ``recipe.ema``)."""
    splits = [split, f"{split}_ema"] if config.recipe.ema.enabled else [split]
    return [f"{name}/{metric}" for name in splits for metric in SPLIT_KEYS]


def validates(data: DataConfig) -> bool:
    """Whether the run has a validation split, as its data module will: ``data.val_size``, or an image folder's
    ``val/``."""
    folder = isinstance(data, FolderDataConfig) and bool(data.root) and (Path(data.root).expanduser() / "val").is_dir()
    return bool(data.val_size) or folder


def check_optimized_metric(config: TrainConfig) -> None:
    """``optimized_metric`` (what ``train.py`` returns to a Hydra sweeper) must name a metric the run reports."""
    name = config.optimized_metric
    if name is None or name in reported_metrics(config):
        return
    hint = (
        " A validation metric needs a validation split (data.val_size > 0, or an image folder's val/) and must be "
        "the checkpoint monitor "
        f"(callbacks.checkpoint.monitor={name})."
        if str(name).startswith("val")
        else ""
    )
    raise ConfigValueError(
        f"optimized_metric={name} is not a metric this run reports; choose one of {reported_metrics(config)}.{hint}"
    )


def check_model(config: TrainConfig) -> None:
    """Before any work: a name timm knows (any timm model's, with the closest names) and, with
    ``model.pretrained=true``, timm's weights cached here or reachable (a family's constraints at the data's image
    size: :meth:`alternet.architectures.config.ModelConfig.check_size`, as the config is typed)."""
    model = config.model
    if isinstance(model, TimmModel):
        check_name(model.name, MODEL_NAMES)
    if model.pretrained is True:
        require_pretrained(model.name)


def check_model_builds(config: TrainConfig) -> None:
    """Last, once the keys it reads are checked: one of our architectures built as this config builds it, on the
    meta device (:func:`alternet.models.factory.check_builds`). The class count is the data's, unknown before they
    are read; it sizes only the head, so any count does here."""
    check_builds(
        config.model,
        num_classes=config.data.num_classes or 2,
        img_size=config.data.image_size,
        drop_path_rate=config.recipe.drop_path_rate,
    )


def layout_and_heads(model: ModelConfig) -> tuple[str | None, Any]:
    """The layout a model config builds and its heads per stage (the zoo's where the config leaves them null; a
    hybrid's from its family, MaxxVit's as width / dim_head); (None, None) for a model without a layout."""
    if not isinstance(model, LayoutModel):
        return None, None
    if model.name in HYBRIDS:
        spec = spec_with(HYBRIDS[model.name], model.arguments())
        return spec.layout, spec.msa_heads()
    built = model.built()
    return built.get("layout"), built.get("heads")


def warn_buildup(model: ModelConfig) -> None:
    """One warning per build-up rule the layout breaks (AlterNet's and every hybrid family's), unless
    ``model.buildup_rules=off``."""
    if not isinstance(model, LayoutModel) or model.buildup_rules != "warn":
        return
    layout, heads = layout_and_heads(model)
    for violation in buildup_violations(layout, heads) if layout else []:
        warnings.warn(f"{violation} (model.buildup_rules=off for a deliberate contrast)", AlternetWarning, stacklevel=3)


def check_monitor(config: TrainConfig) -> None:
    """The checkpoint monitor and early stopping's name a validation metric the module logs at epoch end (found
    missing by Lightning only after the first epoch's validation otherwise); early stopping says its mode and
    takes only Lightning's ``EarlyStopping`` arguments."""
    logged = split_metrics(config, "val")
    stopping = config.callbacks.early_stopping
    monitors = {"callbacks.checkpoint.monitor": config.callbacks.checkpoint.monitor}
    if stopping is not None:
        known = frozenset(inspect.signature(EarlyStopping.__init__).parameters) - {"self"}
        valid = isinstance(stopping, Mapping) and {"monitor", "mode"} <= set(stopping) and not set(stopping) - known
        if not valid or stopping["mode"] not in ("min", "max") or not stopping["monitor"]:
            raise ConfigValueError(
                f"callbacks.early_stopping={stopping} is invalid: Lightning's EarlyStopping arguments with its monitor "
                f"and mode, e.g. {{monitor: val/nll, mode: min, patience: 20}} (arguments: {sorted(known)}), or null"
            )
        if not validates(config.data):
            raise ConfigValueError(
                "callbacks.early_stopping watches a validation metric and this run holds no validation split: set "
                "data.val_size > 0, or callbacks.early_stopping=null"
            )
        monitors["callbacks.early_stopping.monitor"] = stopping["monitor"]
        for key, ok, expectation in (
            ("patience", lambda v: is_integer(v, 0), "an integer >= 0 (validation checks without improvement)"),
            ("min_delta", lambda v: v >= 0, "a number >= 0"),
        ):
            if key in stopping:
                require(f"callbacks.early_stopping.{key}", stopping[key], ok, f"must be {expectation}")
    no_validation = config.trainer.extra.get("limit_val_batches") == 0
    if no_validation and validates(config.data) and any(monitors.values()):
        key = next(key for key, monitor in monitors.items() if monitor)
        raise ConfigValueError(
            f"{key}={monitors[key]} watches validation, and trainer.limit_val_batches=0 runs none: set "
            f"{key}=null or trainer.limit_val_batches > 0"
        )
    for key, monitor in monitors.items():
        if monitor is not None and monitor not in logged:
            raise ConfigValueError(
                f"{key}={monitor} is not a metric the run logs at epoch end; choose one of "
                f"{logged}{suggest(monitor, logged)}"
            )
    modes = {"callbacks.checkpoint": config.callbacks.checkpoint.mode}
    if stopping is not None:
        modes["callbacks.early_stopping"] = stopping["mode"]
    for section, mode in modes.items():  # an explicit mode is obeyed, and said when it seeks the metric's worst
        monitor = monitors[f"{section}.monitor"]
        if monitor is not None and mode is not None and metric_mode(monitor) not in (None, mode):
            worst = "lowest" if mode == "min" else "highest"
            warnings.warn(
                f"{section}.monitor={monitor} with {section}.mode={mode} keeps the epoch of the {worst} {monitor}, "
                f"its worst (null, the default, takes the metric's own: {metric_mode(monitor)})",
                AlternetWarning,
                stacklevel=2,
            )


def check_extra_monitors(callbacks: list[Any], config: TrainConfig) -> None:
    """A callback of ``callbacks.extra`` watching a validation or clean-training metric (Lightning's
    ``EarlyStopping``, ``ModelCheckpoint``...) names one the run logs: a misspelt name was found by Lightning only
    after the first epoch, in a traceback."""
    logged = split_metrics(config, "val") + [f"train_clean/{metric}" for metric in SPLIT_KEYS]
    for index, callback in enumerate(callbacks):
        monitor = getattr(callback, "monitor", None)
        if isinstance(monitor, str) and monitor.startswith(("val", "train_clean")) and monitor not in logged:
            raise ConfigValueError(
                f"callbacks.extra[{index}] ({type(callback).__name__}) monitors {monitor}, which the run does not log; "
                f"choose one of {logged}{suggest(monitor, logged)}"
            )


def check_slurm_tasks(trainer: TrainerConfig) -> None:
    """A multi-task ``srun`` step names its run directory after the step (``runs/slurm-JOB.STEP``, the same on every
    rank: :func:`alternet.launch.run_stamp`); one process per run (``trainer.devices=1``, one node) then has every task
    train its own run into that one directory, the other tasks past its lock, which only rank 0 takes."""
    tasks = int(os.environ.get("SLURM_NTASKS", "1") or 1)
    if tasks <= 1:
        return
    from ..launch import devices_per_job, visible_gpus  # deferred: the launcher's tables

    processes = devices_per_job(trainer.devices, str(trainer.accelerator), visible_gpus())
    single = processes in (1, None) and trainer.num_nodes == 1  # None: auto on a CPU, one process
    if single and os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_STEP_ID"):
        raise ConfigValueError(
            f"SLURM runs this command as {tasks} tasks (srun -n {tasks}, or --ntasks-per-node), but "
            f"trainer.devices={trainer.devices} trains in one process: every task would train its own run into the "
            f"one run directory of the step. Run it as one task (srun -n 1), or as one run over {tasks} processes "
            f"(trainer=ddp trainer.devices={tasks})"
        )


def check_trainer(trainer: TrainerConfig) -> None:
    """``trainer`` against Lightning's own tables: any other argument (``+trainer.KEY=VALUE``) is one of its
    ``Trainer``'s, ``precision`` one it accepts (or ``auto``)."""
    if trainer_arguments() is None:  # else checked as the config was typed, against the same names
        check_trainer_keys(trainer.extra, frozenset(inspect.signature(L.Trainer.__init__).parameters) - {"self"})
    one_of("trainer.precision", trainer.precision, PRECISIONS)
    require(
        "trainer.limit_train_batches",
        trainer.extra.get("limit_train_batches"),
        lambda v: v is None or (not isinstance(v, bool) and v > 0),
        "must be a count >= 1 or a fraction in (0, 1] of the batches (or null: all); 0 trains nothing",
    )
    for key in ("deterministic", "benchmark"):  # Lightning takes any truthy value, and half applies it
        if key in trainer.extra:
            choices = (True, False, None, "warn") if key == "deterministic" else (True, False, None)
            one_of(f"trainer.{key}", trainer.extra[key], choices)


HALF_WEIGHTS = {"bf16-true": "bf16 (8 significant bits)", "16-true": "fp16 (11 significant bits)"}


def check_gradient_clip(config: TrainConfig) -> None:
    """``trainer.gradient_clip_val`` follows ``recipe.grad_clip`` (conf/trainer/default.yaml): set apart, the run
    would clip at one value and record, resume and report the other."""
    clip, recipe = config.trainer.extra.get("gradient_clip_val"), config.recipe.grad_clip
    if isinstance(clip, str) and clip.startswith("${"):  # an interpolation not resolved yet (a sweep's job)
        return
    if (clip or None) != recipe:  # Lightning's 0 is no clipping, the recipe's null
        shown = "null" if clip is None else format(clip, "g") if isinstance(clip, float) else str(clip)
        raise ConfigValueError(
            f"trainer.gradient_clip_val={shown} is not recipe.grad_clip="
            f"{'null' if recipe is None else format(recipe, 'g')}: the run records, resumes and reports the "
            f"recipe's clip; set recipe.grad_clip={shown if clip else 'null'} instead (trainer.gradient_clip_val "
            "follows it)"
        )


def check_accelerator(config: TrainConfig) -> None:
    """An accelerator this machine has."""
    accelerator = str(config.trainer.accelerator)
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigValueError(
            f"trainer.accelerator={accelerator} but this machine has no usable CUDA GPU (torch.cuda.is_available() "
            "is False); use trainer.accelerator=cpu or auto"
        )
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise ConfigValueError("trainer.accelerator=mps but MPS is not available here; use trainer.accelerator=cpu")
