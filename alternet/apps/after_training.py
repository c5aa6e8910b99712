"""What a finished training run does next: score its tested weights as evaluate.py would (``evaluate`` section),
export them into the run's ``export/`` and log model artifacts to W&B (``export`` section)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from .. import tracking
from ..data import ImageDataModule
from ..evaluation import Evaluator
from ..files import whole_products, write_json
from ..hub import export
from ..models.flip import FlipAveraged
from ..runs.checkpoint_files import select_checkpoint
from ..runs.directories import METRICS_FILE, RunDir
from ..runs.summary import RunSummary
from .config import TrainConfig


def evaluate_after_training(
    model: nn.Module, datamodule: ImageDataModule, config: TrainConfig, run: RunDir, tested: str
) -> dict[str, Any]:
    """Score ``model`` (the weights of ``tested``, the summary's ``tested_checkpoint``) with the run's ``evaluate``
    settings into the run's ``eval/`` and its own W&B run; returns the summary's fields it fills
    (:class:`~alternet.runs.summary.RunSummary`: ``calibration``, ``selective``, ``ood``, ``robustness``,
    ``evaluation_dir``)."""
    label = config.model.label()
    meta = {"model": label, "data": config.data.name, "checkpoint": tested, "ema": False}  # the tested raw weights
    if config.recipe.test_flip:  # predict as the run's own test did, and as alternet evaluate does
        model, meta["test_flip"] = FlipAveraged(model), True
    eval_dir = run.eval_dir
    with whole_products(eval_dir, lambda path: True, says_stop=False) as staged:  # eval/ holds the evaluation alone
        evaluator = Evaluator(model, datamodule, config.evaluate, staged, label, class_names=datamodule.class_names)
        report = evaluator.run(meta).moved(staged, eval_dir)
        write_json(staged / METRICS_FILE, report.to_json())
    if config.logger.wandb and (tracked := tracking.active_run()) is not None:
        tracking.log_report(tracked, report)
    return {
        "calibration": report.test,
        "selective": report.selective,
        "ood": report.ood,
        "robustness": report.robustness,
        "evaluation_dir": str(eval_dir),
    }


def export_after_training(config: TrainConfig, summary: RunSummary) -> Path | None:
    """Export (``export.after_training``) and log W&B model artifacts (``export.wandb_artifacts``) as configured;
    returns the export directory, if any."""
    options = config.export
    run_dir = RunDir(summary.run_dir or ".")
    export_dir = None
    if options.after_training:
        export_dir = export(run_dir.path, run_dir.export_dir, ema=options.ema)
        print(f"Export:          {export_dir}", flush=True)
    run = tracking.active_run() if config.logger.wandb else None
    if run is not None and options.wandb_artifacts:
        checkpoint = select_checkpoint(run_dir)  # the one its test numbers are for
        metadata = {"model": summary.model, "data": summary.data, "test": summary.test, "epochs": summary.epochs}
        exported = metadata | ({"test": summary.test_ema, "ema": True} if options.ema else {})  # its weights' test
        best = summary.best_checkpoint is not None and checkpoint.name == Path(summary.best_checkpoint).name
        logged = tracking.log_model_artifacts(run, checkpoint, export_dir, metadata, best, exported)
        print(tracking.artifact_notice(run, logged), flush=True)
    return export_dir
