"""The training application: one run from a composed config — data, model, trainer, fit, test, records, and
what follows training (evaluation, export, W&B artifacts)."""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import sys
import time
import traceback
import warnings
from dataclasses import replace
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback, LambdaCallback
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .. import tracking
from ..data import ImageDataModule, build_datamodule
from ..dataset_facts import DataFacts
from ..errors import AlternetError, AlternetWarning, ConfigValueError, one_line
from ..evaluation.evaluator import check_evaluation_files
from ..files import file_system_errors_said, plain
from ..hub import load_pretrained
from ..hub.references import CONFIG_FILE
from ..launch import check_nodes_launched, launched_rank
from ..models.external import load_timm_pretrained
from ..models.factory import model_args
from ..report.figures import training_curves
from ..runs.checkpoints import checkpoint_header, resume_checkpoint
from ..runs.directories import RunDir, best_epoch
from ..runs.ownership import RunDirLock, check_fresh_run_dir, discard_unused_run_dir
from ..runs.records import record_resume, write_run_records
from ..runs.results import TestImages
from ..runs.summary import OptimizedMetric, RunSummary
from ..training import (
    ClassificationModule,
    build_module,
    build_trainer,
    checkpoint_callback,
    choose_precision,
    throughput_callback,
)
from ..training.builders import checkpoint_mode
from ..training.config import TrainerConfig
from ..training.loggers import build_loggers, define_metrics
from ..training.module import steps_per_epoch
from ..training.optim import scaled_lr
from ..training.resume import (
    SamplingRecord,
    check_resume_batch,
    check_resume_monitor,
    check_resume_settings,
    check_resume_steps,
    sampling,
    warn_earlier_schedule,
)
from ..training.stopping import lightning_ctrl_c_raised
from .after_training import evaluate_after_training, export_after_training
from .checks import check_disk_space, check_extra_monitors, validate_train_config
from .config import TrainConfig, resolved
from .console import end_summary, start_banner
from .extensions import build_extra


def train(cfg: DictConfig) -> RunSummary:
    """Train, test and record one run; returns its summary, what ``metrics.json`` holds."""
    check_nodes_launched(OmegaConf.select(cfg, "trainer.num_nodes", default=1))  # before a node takes the run
    run = _run_directory(cfg)
    # first of all, the run directory's lock (held already when the pre-flight callback took it before Hydra wrote
    # its records); other ranks join rank 0's run. A refusal here touches nothing.
    lock = RunDirLock(run).acquire() if launched_rank() == 0 else None
    try:
        with file_system_errors_said():  # a path too long, a full disk ...: one line, as any refusal
            return _owned_train(resolved(cfg), run, lock)
    except AlternetError:
        discard_unused_run_dir(run)  # a run that failed before any work leaves no directory it created behind
        raise
    finally:
        if lock is not None:
            lock.release()


def _run_directory(cfg: DictConfig) -> RunDir:
    """The run's directory (``paths.output_dir``: Hydra's job directory); a config without it (a user's primary
    config not built on train.yaml) is one line."""
    with contextlib.suppress(OmegaConfBaseException, AttributeError):  # a paths section left at ??? (AttributeError)
        if directory := OmegaConf.select(cfg, "paths.output_dir"):
            return RunDir(directory)
    raise ConfigValueError(
        "paths.output_dir is not set: a primary config of your own builds on alternet's (its defaults list "
        "starts with train), whose paths group sets it"
    )


def _owned_train(config: dict[str, Any], run: RunDir, lock: RunDirLock | None) -> RunSummary:
    typed = validate_train_config(config)
    precision = choose_precision(
        typed.trainer.precision, typed.trainer.accelerator, typed.performance.allow_emulated_precision
    )
    typed.trainer.precision = precision.precision  # what ran, in the run's config.yaml and checkpoints
    if typed.data.root is not None:  # as a path from anywhere: its evaluation runs from other folders too
        typed.data.root = os.path.abspath(os.path.expanduser(typed.data.root))
    starts_afresh = typed.reuse_run_dir or not run.checkpoint_files()  # else the run directory's check refuses it
    resume = resume_checkpoint(typed.ckpt_path, run, say=starts_afresh)
    header = checkpoint_header(resume) if resume else {}
    record = typed.to_dict()  # the resolved config as the run records it (config.yaml, W&B, the checkpoints)
    changes = check_resume_settings(typed.model, typed.recipe, typed.data, resume, header, typed.seed) if resume else {}
    if resume:
        check_resume_monitor(typed.callbacks.checkpoint.monitor, checkpoint_mode(typed.callbacks), resume, header)
        finished = run.summary() if typed.ckpt_path == "last" else None
        if finished is not None and _trained_to_the_end(finished, typed.trainer):  # a re-launched sweep, a requeue
            print(f"{run.path} holds a finished run ({run.metrics.name}): kept, nothing to train", flush=True)
            if lock is not None and typed.export.after_training and not (run.export_dir / CONFIG_FILE).is_file():
                export_after_training(typed, replace(finished, run_dir=str(run.path)))  # stopped before or in it
            return finished
    owner = RunDir.of_checkpoint(resume) if resume else None
    foreign = resume is not None and (owner is None or owner.path.resolve() != run.path.resolve())
    if foreign and (trained := _limit_reached(header, typed.trainer)):  # its own run finishes testing it instead
        raise ConfigValueError(
            f"{resume} has trained {trained}: resuming it would train nothing. Start a new run from its weights with "
            f"model.pretrained={shlex.quote(str(resume))}, or raise that limit to train it further"
        )
    for key, (before, now) in changes.items():
        rescaled = f"the restored learning rates and schedule are rescaled by {now / before:g}"
        print(f"resuming with {key} {before} -> {now}: {rescaled}", file=sys.stderr, flush=True)
    recorded = owner.recorded_config() if owner else None  # the config.yaml of the run that saved the checkpoint
    if resume:
        warn_earlier_schedule(resume, header, recorded)
    loading = _loading_changes(typed, recorded) if resume else {}  # how the images are read: recorded, not refused
    step = int(header.get("global_step", 0)) if resume else None
    if lock is not None:
        check_fresh_run_dir(run, resume is not None, typed.reuse_run_dir, asked_last=typed.ckpt_path == "last")
        run.remove_stale_temporaries()
    started = time.monotonic()
    if typed.performance.matmul_precision:
        torch.set_float32_matmul_precision(typed.performance.matmul_precision)
    L.seed_everything(typed.seed, workers=True, verbose=False)
    datamodule = _datamodule(typed)
    module = _module(typed, datamodule.facts(), pretrained=resume is None)
    if lock is not None:  # rank 0, in its run directory
        check_disk_space(run.path, module, 1 if typed.recipe.optimizer.name == "sgd" else 2)  # before any epoch
    if lock is not None and typed.reuse_run_dir and resume is None:  # afresh, once its data and weights are read:
        removed = run.clear_earlier_run()  # nothing of the earlier run reads as this one's (W&B ids before loggers)
        if removed:
            shown = ", ".join(removed[:8]) + (f" and {len(removed) - 8} more" if len(removed) > 8 else "")
            print(f"reuse_run_dir=true: removed the earlier run's {shown} from {run.path}", file=sys.stderr, flush=True)
    extra = build_extra(typed.logger.extra, "logger.extra", Logger)  # a refusal here comes before W&B starts a run
    loggers = build_loggers(typed.logger.wandb, run, record, resume_step=step) + extra
    trainer = _trainer(typed, run, datamodule, loggers)
    throughput_callback(trainer).started = started  # the run's wall time counts this command's from its start
    datamodule.trainer = trainer  # its ranks, before fit attaches it: a resume's checks count this rank's batches
    datamodule.check_world(trainer.world_size)  # the devices are known now
    if resume:
        batch = [typed.recipe.batch_size, trainer.world_size, trainer.accumulate_grad_batches]
        check_resume_batch(resume, header, batch)
        check_resume_steps(resume, header, steps_per_epoch(datamodule, trainer))
        if lock is not None:
            record_resume(run, resume, step or 0, changes | loading)
    if trainer.is_global_zero:
        write_run_records(run, record)
        define_metrics(loggers)

    def announce(trainer: L.Trainer, _: L.LightningModule) -> None:  # after setup: the splits are known, on every rank
        if trainer.is_global_zero:
            banner = start_banner(typed, run, module.model, datamodule.describe(), trainer, precision.reason)
            print(banner, flush=True)

    trainer.callbacks.append(LambdaCallback(on_train_start=announce))
    if resume and lock is not None:  # a finished run continued for more epochs or steps is a run in progress again,
        run.metrics.unlink(missing_ok=True)  # whose summary (and a report of its sweep) is written when it ends
    exit_code = 1
    try:
        with datamodule.dead_workers_named(), lightning_ctrl_c_raised(trainer):
            _fit(trainer, module, datamodule, resume, step or 0)
            earlier = throughput_callback(trainer).earlier_wall  # before testing restores the tested checkpoint's
            summary = _tested(typed, trainer, module, datamodule, run)
        if trainer.is_global_zero:
            if typed.evaluate.after_training:
                scored = evaluate_after_training(module.model, datamodule, typed, run, summary.tested_checkpoint)
                summary = replace(summary, **scored)
            curves = training_curves(run)
            wall = earlier + time.monotonic() - started  # every session's: a resumed run's too
            summary = replace(summary, curves=str(curves) if curves else None, wall_seconds=wall)
            run.write_summary(summary)
            export_after_training(typed, summary)
            print(end_summary(summary), flush=True)
        exit_code = 0
        return summary
    finally:
        tracking.finish(exit_code)


def _fit(
    trainer: L.Trainer, module: L.LightningModule, datamodule: ImageDataModule, resume: str | None, start: int
) -> None:
    """``trainer.fit``, a setting Lightning itself refuses as the fit starts (``+trainer.val_check_interval`` beyond
    the epoch's batches, a callback whose package is missing) said in one line, the run directory left as before (no
    step has run since ``start``)."""
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
    except (MisconfigurationException, ValueError, ImportError) as error:
        frames = traceback.extract_tb(error.__traceback__)
        raised_by_lightning = bool(frames) and f"{os.sep}lightning{os.sep}" in frames[-1].filename
        if raised_by_lightning and trainer.global_step == start:
            by_a_callback = f"{os.sep}callbacks{os.sep}" in frames[-1].filename  # DeviceStatsMonitor without psutil
            what = "callback settings (callbacks.*)" if by_a_callback else "trainer settings"
            raise ConfigValueError(f"{what} rejected by Lightning: {one_line(error)}") from None
        raise


def build_data(config: TrainConfig) -> ImageDataModule:
    """The data module of a training config: its data section with the recipe's batch sizes and augmentation."""
    recipe = config.recipe
    return build_datamodule(
        config.data,
        batch_size=recipe.batch_size,
        eval_batch_size=recipe.eval_batch_size,
        augment=recipe.augment,
        seed=config.seed,
    )


def _datamodule(config: TrainConfig) -> ImageDataModule:
    """The run's data, checked before the Trainer is built (and the after-training evaluation's files with them)."""
    datamodule = build_data(config)
    datamodule.check_before_fit()
    if config.evaluate.after_training:  # its real corruption and OOD files checked now, not after training
        check_evaluation_files(config.evaluate, datamodule, datamodule.class_names)
    return datamodule


def _module(config: TrainConfig, facts: DataFacts, pretrained: bool) -> ClassificationModule:
    """The LightningModule, starting from ``model.pretrained``'s weights on a run that does not resume."""
    model = config.model
    module = build_module(model, config.recipe, facts, config.performance, config.trainer)
    if not (pretrained and model.pretrained):
        return module
    if model.pretrained is True:  # timm's own weights for model.name
        size, rate = facts.image_size, config.recipe.drop_path_rate
        args = model_args(model, num_classes=facts.num_classes, img_size=size, drop_path_rate=rate)
        load_timm_pretrained(module.model, model.name, **args)
    else:
        report = load_pretrained(module.model, model.pretrained)  # a different class count resets the head
        _warn_other_normalisation(report.normalisation, facts, model.pretrained, settable=hasattr(config.data, "mean"))
    module.restart_ema()
    return module


def _warn_other_normalisation(
    source: tuple[tuple[float, ...], ...] | None, facts: DataFacts, name: str, *, settable: bool
) -> None:
    """Fine-tuning normalises by the new data's statistics: said where the source's weights were trained with
    others (a frozen backbone then sees inputs of another scale)."""
    ours = (tuple(facts.mean), tuple(facts.std))
    if source is None or all(math.isclose(a, b, abs_tol=5e-4) for s, o in zip(source, ours) for a, b in zip(s, o)):
        return
    shown = ",".join(f"{v:g}" for v in source[0]), ",".join(f"{v:g}" for v in source[1])
    keep = f"set data.mean=[{shown[0]}] data.std=[{shown[1]}] to keep the source's" if settable else "as documented"
    warnings.warn(
        f"model.pretrained={name} was trained on inputs normalised by mean [{shown[0]}] and std [{shown[1]}]; this "
        f"run normalises by data={facts.name}'s (mean [{','.join(f'{v:g}' for v in ours[0])}]): {keep}",
        AlternetWarning,
        stacklevel=2,
    )


def _trainer(config: TrainConfig, run: RunDir, datamodule: ImageDataModule, loggers: list[Logger]) -> L.Trainer:
    extra = build_extra(config.callbacks.extra, "callbacks.extra", Callback)
    check_extra_monitors(extra, config)  # before the first epoch, where Lightning would find a misspelt name
    extra.append(SamplingRecord(sampling(config.seed, config.data)))
    try:
        return build_trainer(
            config.trainer,
            config.callbacks,
            config.performance,
            config.seed,
            run,
            datamodule.has_validation,
            loggers,
            datamodule.runs_validation_loop,
            extra,
        )
    except AlternetError:
        raise
    except (MisconfigurationException, TypeError, ValueError, ImportError) as error:  # Lightning's checks of
        # trainer.* values, and a plugin whose package is not installed (trainer.precision=transformer-engine)
        raise ConfigValueError(f"trainer settings rejected by Lightning: {one_line(error)}") from None


def _loading_changes(config: TrainConfig, recorded_config: dict[str, Any] | None) -> dict[str, list[Any]]:
    """``data.loader`` and ``data.decode`` changed since the run that saved the checkpoint (its config.yaml): the
    images of the rest of the run are read another way (DALI's augmentation is its own), said and recorded in
    ``resumes.json``."""
    recorded = (recorded_config or {}).get("data") or {}
    changed = {}
    for key in ("loader", "decode"):
        before, now = recorded.get(key), getattr(config.data, key, None)
        if before is not None and now is not None and before != now:
            changed[f"data.{key}"] = [before, now]
            print(
                f"resuming with data.{key} {before} -> {now}: the rest of the run reads its images so", file=sys.stderr
            )
    return changed


def _tested(
    config: TrainConfig, trainer: L.Trainer, module: ClassificationModule, datamodule: ImageDataModule, run: RunDir
) -> RunSummary:
    """Test the best checkpoint (else the final weights, by the last checkpoint where it holds them) and sum the run
    up. Where the test split is the validation split (ImageNet's val/, an image folder without test/), the best by
    the monitor was chosen on the test images: the last checkpoint (the final weights) is tested instead."""
    checkpoint = checkpoint_callback(trainer)  # read before testing: test() restores its state from `best`
    best, last = checkpoint.best_model_path or None, checkpoint.last_model_path or None
    final = last if getattr(checkpoint, "_last_global_step_saved", None) == trainer.global_step else None
    tested_path = last if datamodule.test_is_validation else best or final  # no monitor: last.ckpt, when it is final
    clean = by_split(module.train_clean)  # read before testing, whose metrics replace the callback metrics
    images_per_sec = throughput_callback(trainer).images_per_sec  # before testing: it restores the best's count
    tested = by_split(trainer.test(module, datamodule=datamodule, ckpt_path=tested_path, verbose=False)[0])
    summary = RunSummary(
        model=config.model.label(),
        data=config.data.name,
        test=tested.pop("test", {}),
        test_ema=tested.pop("test_ema", None),
        test_images=TestImages(module.images_tested, len(datamodule.splits["test"])),
        test_split="validation" if datamodule.test_is_validation else "test",
        precision=str(trainer.precision),
        test_flip=config.recipe.test_flip,
        train_clean=clean.get("train_clean"),  # the last epoch's (data.train_clean_size)
        train_images=datamodule.train_images() or len(datamodule.splits["train"]),  # shards: their index's count
        data_subset=config.data.subset,
        epochs=trainer.current_epoch - getattr(checkpoint, "stopped_inside_epoch", False),  # whole epochs trained
        global_step=trainer.global_step,
        best_val_score=plain(checkpoint.best_model_score),
        best_epoch=best_epoch(best),
        monitor=checkpoint.monitor,
        tested_checkpoint=tested_path or "final weights",
        best_checkpoint=best,
        last_checkpoint=last,
        run_dir=str(run.path),
        train_images_per_sec=images_per_sec,
        global_batch=module.global_batch,
        lr=scaled_lr(config.recipe, module.global_batch),
        skipped_images=datamodule.skipped_images,
        extra=tested,  # any other split the test loop logged
    )
    return replace(summary, optimized_metric=optimized_metric(config.optimized_metric, summary))


def _limit_reached(header: dict[str, Any], trainer: TrainerConfig) -> str | None:
    """What a checkpoint (its ``header``) has trained when that already reaches one of this run's limits, where
    Lightning would stop at once; None when there is more to train."""
    loop = header.get("loops", {}).get("fit_loop", {})
    progress = loop.get("epoch_progress", {}).get("total", {})
    epochs, steps = int(progress.get("processed", 0)), int(header.get("global_step", 0))
    if int(progress.get("started", 0)) > epochs and loop.get("epoch_loop.batch_progress", {}).get("is_last_batch"):
        epochs += 1  # saved after the epoch's last batch, before its end was counted (at validation's end)
    if epochs >= trainer.max_epochs:
        return f"{epochs} epoch{'s' * (epochs != 1)} (trainer.max_epochs={trainer.max_epochs})"
    return f"{steps} steps (trainer.max_steps={trainer.max_steps})" if 0 < trainer.max_steps <= steps else None


def _trained_to_the_end(finished: RunSummary, trainer: TrainerConfig) -> bool:
    """A finished run already reached one of this config's limits, where Lightning stops (so continuing it would
    train nothing); a run asked for more epochs and steps than it did continues from its last.ckpt instead."""
    steps_done = 0 < trainer.max_steps <= int(finished.global_step or 0)  # -1: no step limit
    return int(finished.epochs or 0) >= trainer.max_epochs or steps_done


def by_split(logged: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """``{"test/acc": ..., "test_ema/acc": ...}`` as ``{"test": {"acc": ...}, "test_ema": {"acc": ...}}`` —
    the names evaluate.py's metrics.json uses for the same numbers."""
    sections: dict[str, dict[str, float | None]] = {}
    for key, value in plain(dict(logged)).items():
        split, _, name = key.partition("/")
        sections.setdefault(split, {})[name] = value
    return sections


def optimized_metric(name: str | None, summary: RunSummary) -> OptimizedMetric | None:
    """The metric a sweep optimises (``optimized_metric``) and its value: the best value of the checkpoint monitor,
    or a test metric. :func:`~alternet.apps.checks.validate_train_config` has checked the name before training, so
    a value missing now was not finite (a diverged run: ``metrics.json`` writes it as null): said, and a sweeper
    gets NaN (Optuna fails that trial), never a substitute."""
    if name is None:
        return None
    value = summary.metric(name)
    if value is None:
        warnings.warn(
            f"optimized_metric={name} has no finite value in this run (NaN or inf: it diverged, or no epoch was "
            "validated); a sweeper gets NaN",
            AlternetWarning,
            stacklevel=2,
        )
    return OptimizedMetric(name, value)
