"""One training run from a composed config: data, model, trainer, fit, test, records."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from ..checkpoints import read_checkpoint
from ..config import validate_train_config
from ..data import build_datamodule
from ..jsonio import write_json
from .callbacks import AtomicCheckpointIO, EpochSeed
from .loggers import build_loggers, finish_wandb
from .module import ClassificationModule
from .records import metric_values, write_run_records

DATA_FACTS = ("name", "num_classes", "image_size", "mean", "std")


def build_callbacks(config: dict[str, Any], run_dir: Path, has_val: bool) -> list[Callback]:
    callbacks_cfg = config.get("callbacks") or {}
    checkpoint = dict(callbacks_cfg.get("checkpoint") or {})
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
    if callbacks_cfg.get("early_stopping") and has_val:
        callbacks.append(EarlyStopping(**callbacks_cfg["early_stopping"]))
    return callbacks


def build_module(config: dict[str, Any]) -> ClassificationModule:
    data = {key: config["data"][key] for key in DATA_FACTS}
    module = ClassificationModule(model=config["model"], recipe=config["recipe"], data=data)
    performance = config.get("performance") or {}
    if performance.get("channels_last"):
        module.use_channels_last()
    if performance.get("compile"):
        module.compile_model()
    return module


def _checkpoint_callback(trainer: L.Trainer) -> ModelCheckpoint:
    return next(cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint))


def resolve_resume(ckpt_path: str | None, run_dir: Path) -> str | None:
    """The checkpoint to resume from. ``last`` means this run directory's ``last.ckpt`` when it exists
    (a requeued SLURM job); any other path is checked now so that a bad one fails before training."""
    if ckpt_path == "last":
        last = run_dir / "checkpoints" / "last.ckpt"
        return str(last) if last.is_file() else None
    if ckpt_path:
        read_checkpoint(ckpt_path)
    return ckpt_path


def evaluate_after_training(
    module: ClassificationModule, datamodule: L.LightningDataModule, config: dict[str, Any], run_dir: Path
) -> dict[str, Any]:
    """Score the tested weights as evaluate.py would, into ``<run_dir>/eval`` and the run's own W&B run."""
    from ..evaluation.report import Evaluator
    from ..evaluation.wandb_report import log_report

    settings = config["evaluate"] | {"label": config["model"]["name"]}
    meta = {"model": config["model"]["name"], "data": config["data"]["name"]}
    report = Evaluator(module.model, datamodule, settings, run_dir / "eval").run(meta)
    import wandb

    if wandb.run is not None:
        log_report(wandb.run, report)
    return {
        "calibration": report["test"],
        "robustness": report.get("robustness"),
        "evaluation_dir": str(run_dir / "eval"),
    }


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train, test and record one run; returns the contents of ``metrics.json``."""
    config = OmegaConf.to_container(cfg, resolve=True)
    validate_train_config(config)
    run_dir = Path(config["paths"]["output_dir"])
    resume = resolve_resume(config.get("ckpt_path"), run_dir)
    precision = (config.get("performance") or {}).get("matmul_precision")
    if precision:
        torch.set_float32_matmul_precision(precision)

    L.seed_everything(int(config["seed"]), workers=True, verbose=False)
    datamodule = build_datamodule(config["data"], config["recipe"], seed=int(config["seed"]))
    module = build_module(config)
    pretrained = config["model"].get("pretrained")
    if pretrained and not resume:
        from ..hub import load_pretrained

        load_pretrained(module.model, pretrained)  # a different class count resets the head
    has_val = bool(config["data"].get("val_size"))
    trainer_args = dict(config["trainer"])
    if not has_val:  # no validation split (the paper's CIFAR setting): skip the loop instead of running it empty
        trainer_args["limit_val_batches"] = 0
    trainer = L.Trainer(
        **trainer_args,
        default_root_dir=str(run_dir),
        callbacks=build_callbacks(config, run_dir, has_val),
        logger=build_loggers(config.get("logger") or {}, run_dir, config),
        plugins=[AtomicCheckpointIO()],
        use_distributed_sampler=False,
    )
    if trainer.is_global_zero:
        write_run_records(run_dir, config)

    exit_code = 1
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
        checkpoint = _checkpoint_callback(trainer)  # read before testing: test() restores its state from `best`
        best, last = checkpoint.best_model_path or None, checkpoint.last_model_path or None
        best_score = checkpoint.best_model_score
        test_metrics = trainer.test(module, datamodule=datamodule, ckpt_path=best, verbose=False)[0]
        summary = {
            "model": config["model"]["name"],
            "data": config["data"]["name"],
            "test": metric_values(test_metrics),
            "epochs": trainer.current_epoch,
            "global_step": trainer.global_step,
            "best_val_score": best_score,
            "monitor": checkpoint.monitor,
            "tested_checkpoint": best or "final weights",
            "best_checkpoint": best,
            "last_checkpoint": last,
            "run_dir": str(run_dir),
        }
        if trainer.is_global_zero:
            if (config.get("evaluate") or {}).get("after_training"):
                summary |= evaluate_after_training(module, datamodule, config, run_dir)
            write_json(run_dir / "metrics.json", summary)
            print_summary(summary)
            from ..hub import after_training

            after_training(config, summary)  # config section `export`: export directory, W&B model artifacts
        exit_code = 0
        return summary
    finally:
        finish_wandb(exit_code)


def print_summary(summary: dict[str, Any]) -> None:
    test = summary["test"]
    line = "  ".join(
        f"{name} {test[key]:.4f}" for name, key in (("acc", "test/acc"), ("nll", "test/nll"), ("ece", "test/ece"))
    )
    print(
        f"\nTest ({summary['model']} on {summary['data']}, {summary['tested_checkpoint']}): {line}\n"
        f"Run directory:   {summary['run_dir']}\n"
        f"Last checkpoint: {summary['last_checkpoint']}\n"
        + (f"Best checkpoint: {summary['best_checkpoint']}\n" if summary["best_checkpoint"] else ""),
        file=sys.stdout,
        flush=True,
    )
