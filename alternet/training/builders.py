"""The Lightning pieces of a training run, built from its typed sections: module, callbacks, trainer."""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import Logger
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.strategies import DDPStrategy

from ..architectures.config import ModelConfig
from ..dataset_facts import DataFacts
from ..errors import ConfigValueError
from ..launch import devices_per_job
from ..metrics.table import metric_mode
from ..runs.directories import RunDir
from .callbacks import (
    AtomicCheckpointIO,
    BatchSeed,
    BestAndLastCheckpoint,
    MidEpochCheckpoint,
    OrderedAsyncCheckpointIO,
    ResumedEarlyStopping,
)
from .config import CallbacksConfig, PerformanceConfig, RecipeConfig, TrainerConfig, parse_interval
from .display import Throughput, progress_bar, quiet_lightning
from .module import ClassificationModule
from .precision import device_type
from .step import whole_step_refusal
from .stopping import PreemptionCheckpoint


def build_module(
    model: ModelConfig,
    recipe: RecipeConfig,
    data: DataFacts,
    performance: PerformanceConfig,
    trainer: TrainerConfig,
) -> ClassificationModule:
    """The LightningModule of a model and recipe for the data module whose
    :meth:`~alternet.data.ImageDataModule.facts` are ``data``, laid out and compiled as ``performance`` says for
    the ``trainer``'s device."""
    module = ClassificationModule(model=model, recipe=recipe, data=data)
    if performance.grad_checkpointing:
        enable = getattr(module.model, "set_grad_checkpointing", None)
        try:
            if enable is None:
                raise NotImplementedError
            enable(True)
        except (AssertionError, NotImplementedError) as error:  # timm refuses with `assert not enable`
            raise ConfigValueError(
                f"model {model.name!r} does not support gradient checkpointing; "
                "set performance.grad_checkpointing=false"
            ) from error
    if on_a_gpu_when_auto(performance.channels_last, trainer.accelerator):
        module.use_channels_last()
    mode = compile_mode(performance, trainer)
    if compiles_the_whole_step(performance, trainer):
        module.compile_step(mode, trainer.extra.get("gradient_clip_val"), trainer.extra.get("gradient_clip_algorithm"))
    elif mode is not None:
        module.compile_model(mode=mode)
    return module


def compiles_the_whole_step(performance: PerformanceConfig, trainer: TrainerConfig) -> bool:
    """Whether the run compiles its whole training step (the module and the Trainer are built for it alike)."""
    return compile_mode(performance, trainer) is not None and compile_refusal(performance, trainer) is None


def compile_refusal(performance: PerformanceConfig, trainer: TrainerConfig) -> str | None:
    """Why a compiled run compiles its backbone alone rather than the whole step (:mod:`alternet.training.step`),
    or None."""
    if performance.compile == "backbone":
        return "performance.compile=backbone"
    devices = devices_per_job(trainer.devices, trainer.accelerator, torch.cuda.device_count())
    devices = devices * trainer.num_nodes if devices is not None else None
    algorithm = trainer.extra.get("gradient_clip_algorithm")
    return whole_step_refusal(trainer.precision, trainer.accumulate_grad_batches, devices, algorithm)


def compile_mode(performance: PerformanceConfig, trainer: TrainerConfig) -> str | None:
    """The ``torch.compile`` mode a run trains with, or None to train eagerly. ``performance.compile: auto`` compiles
    a run on one CUDA GPU, and ``compile_mode: auto`` is CUDA graphs there (``reduce-overhead``: one launch per step
    instead of hundreds from Python; the paper's recipe with its backbone compiled at 3.0-3.3x the eager images/s on
    an H200, for about a minute of compiling: bench/RESULTS.md) and inductor's default elsewhere. A CPU run stays
    eager (0.96-1.14x on a Zen 3, for a minute of compiling), and so does a run of several processes, whose compiled
    DDP step is not yet measured. What is compiled: the whole step, unless :func:`compile_refusal` says why not."""
    on_cuda = device_type(trainer.accelerator) == "cuda"
    compile_ = performance.compile
    if compile_ == "auto":
        devices = trainer.devices
        one_device = devices in (1, "1") or (isinstance(devices, list | tuple) and len(devices) == 1)
        compile_ = on_cuda and one_device and trainer.num_nodes == 1 and inductor_compiles_for_this_gpu()
    if not compile_:
        return None
    mode = performance.compile_mode
    return ("reduce-overhead" if on_cuda else "default") if mode == "auto" else mode


def inductor_compiles_for_this_gpu() -> bool:
    """Whether torch.compile's GPU code generator runs here: Triton installed and a GPU it supports (compute
    capability 7.0 on, Volta). ``compile: auto`` trains eagerly elsewhere (a Pascal card, a build without Triton)
    rather than failing at its first step."""
    try:
        from torch.utils._triton import has_triton
    except ImportError:  # a torch without the helper: no claim that compiling works
        return False
    return has_triton()


def on_a_gpu_when_auto(setting: bool | str, accelerator: str) -> bool:
    """A ``performance`` switch of ``auto | true | false`` (``channels_last``, ``async_checkpoint``): ``auto`` is on
    where the run trains on a CUDA GPU (:func:`~alternet.training.precision.device_type`) and off on a CPU, where
    what pays depends on the CPU."""
    return device_type(accelerator) == "cuda" if setting == "auto" else bool(setting)


def checkpoint_mode(callbacks: CallbacksConfig) -> str:
    """The checkpoint monitor's mode: as set, else its metric's own direction (``val/acc``: max)."""
    checkpoint = callbacks.checkpoint
    return checkpoint.mode or metric_mode(checkpoint.monitor or "") or "min"


def build_callbacks(
    callbacks_cfg: CallbacksConfig, seed: int, run: RunDir, has_val: bool, progress_bar_on: bool
) -> list[Callback]:
    """Checkpointing (best by the monitored validation metric when there is a validation split, and last at each
    epoch end; mid-epoch ``last.ckpt`` every ``every_n_train_steps`` / ``train_time_interval`` and on pre-emption),
    per-batch reseeding, optional early stopping."""
    checkpoint = callbacks_cfg.checkpoint.to_dict()
    checkpoint["mode"] = checkpoint_mode(callbacks_cfg)
    steps, interval = checkpoint.pop("every_n_train_steps"), checkpoint.pop("train_time_interval")  # mid-epoch
    if not has_val:  # without a validation split only the last checkpoint is kept
        checkpoint.update(monitor=None, save_top_k=0)
    directory = run.checkpoints
    callbacks: list[Callback] = [
        BestAndLastCheckpoint(
            dirpath=str(directory),
            filename=RunDir.BEST_FILENAME,
            auto_insert_metric_name=False,
            enable_version_counter=False,  # last.ckpt is shared with the mid-epoch and pre-emption checkpoints
            **checkpoint,
        ),
        BatchSeed(seed),
    ]
    if steps or interval:
        callbacks.append(MidEpochCheckpoint(directory, steps, parse_interval(interval)))
    preemption = callbacks_cfg.preemption  # every default here is the YAML's (conf/callbacks/default.yaml)
    if preemption and preemption.signals:
        callbacks.append(
            PreemptionCheckpoint(run, preemption.signals, preemption.requeue, preemption.sync_every_n_steps)
        )
    if callbacks_cfg.early_stopping and has_val:
        callbacks.append(ResumedEarlyStopping(**callbacks_cfg.early_stopping))
    callbacks.append(Throughput())
    if progress_bar_on:
        callbacks.append(progress_bar(callbacks_cfg.progress.interval))
    return callbacks


def build_trainer(
    trainer: TrainerConfig,
    callbacks_cfg: CallbacksConfig,
    performance: PerformanceConfig,
    seed: int,
    run: RunDir,
    has_val: bool,
    loggers: list[Logger],
    validation_loop: bool | None = None,
    extra_callbacks: Sequence[Callback] = (),
) -> L.Trainer:
    """``lightning.Trainer`` from the ``trainer`` section; checkpoints written atomically; the data modules shard
    their own samplers (no distributed sampler). The validation loop runs when there is a validation split or
    ``validation_loop`` says so (the clean training subset); the best checkpoint needs a validation split.
    ``extra_callbacks`` (the user's, ``callbacks.extra``) run beside alternet's, ordered by Lightning as any."""
    trainer_args = trainer.to_dict()  # Lightning's Trainer arguments, its other ones (extra) beside alternet's
    if compiles_the_whole_step(performance, trainer):
        trainer_args["gradient_clip_val"] = None  # the compiled whole step clips, inside its update
        trainer_args.setdefault("inference_mode", False)  # testing under no_grad as validation is: the same graph
    if not (has_val if validation_loop is None else validation_loop):  # skip the loop instead of running it empty
        trainer_args["limit_val_batches"] = 0
    if trainer_args.get("strategy") == "ddp":
        trainer_args["strategy"] = ddp_strategy(performance.ddp_compression)
    writes_later = on_a_gpu_when_auto(performance.async_checkpoint, trainer.accelerator)
    plugins: list = [OrderedAsyncCheckpointIO(AtomicCheckpointIO()) if writes_later else AtomicCheckpointIO()]
    if SLURMEnvironment.detect():  # pre-emption is ours (PreemptionCheckpoint): exact, mid-epoch, after the step
        plugins.append(SLURMEnvironment(auto_requeue=False))
    quiet_lightning()
    own = build_callbacks(callbacks_cfg, seed, run, has_val, trainer.enable_progress_bar)
    callbacks = [*own, *extra_callbacks]
    if loggers:  # every parameter group's learning rate, per step (layer decay and fine-tuning give several)
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    return L.Trainer(
        **trainer_args,
        default_root_dir=str(run.path),
        callbacks=callbacks,
        logger=loggers,
        plugins=plugins,
        use_distributed_sampler=False,
    )


def ddp_strategy(compression: str | None) -> DDPStrategy:
    """``trainer.strategy=ddp`` with the gradients' buckets as the gradients themselves (``gradient_as_bucket_view``:
    no copy into and out of the all-reduce buffers, less memory) and, with ``performance.ddp_compression=bf16``, the
    gradients all-reduced in bf16 (half the traffic between nodes; the update is computed from them in fp32)."""
    hook = None
    if compression == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook as hook
    return DDPStrategy(gradient_as_bucket_view=True, ddp_comm_hook=hook)


def checkpoint_callback(trainer: L.Trainer) -> ModelCheckpoint:
    return next(cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint))


def throughput_callback(trainer: L.Trainer) -> Throughput:
    return next(cb for cb in trainer.callbacks if isinstance(cb, Throughput))
