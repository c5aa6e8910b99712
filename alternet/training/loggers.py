"""The Lightning loggers of a training run: CSV into the run directory (a resumed run keeps its rows) and W&B
(:mod:`alternet.tracking` starts the W&B run and holds its ids and names)."""

from __future__ import annotations

import csv
from typing import Any

from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from .. import tracking
from ..files import write_csv
from ..runs.directories import RunDir


class HistoryCSVLogger(CSVLogger):
    """Lightning's CSV logger into a run directory's ``logs/``, except that a resumed run keeps the rows the
    interrupted run wrote before the checkpoint it resumes from (Lightning's writer deletes ``metrics.csv``); rows
    from that step on are dropped, because the resumed run logs them again."""

    def __init__(self, run: RunDir, resume_step: int | None = None):
        super().__init__(save_dir=str(run.path), name="", version=run.LOGS)
        self.history = run.metrics_csv
        self.resume_step = resume_step

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        if self._experiment is not None:
            return self._experiment
        path = self.history
        kept, keys = [], []
        if self.resume_step is not None and path.is_file():
            with open(path, newline="") as file:
                reader = csv.DictReader(file)
                keys = list(reader.fieldnames or [])
                kept = [row for row in reader if row.get("step") and int(float(row["step"])) < self.resume_step]
        writer = super().experiment  # Lightning's writer; it removes the old file
        if keys:
            write_csv(path, kept, sorted(keys))  # whole or not at all (a reader never sees it half written)
            writer.metrics_keys = sorted(keys)
        return writer


def build_loggers(
    settings: tracking.WandbSettings | None, run: RunDir, run_config: dict, resume_step: int | None = None
) -> list[Logger]:
    """CSV logger into the run directory's ``logs/``, plus W&B with ``settings`` (``logger.wandb``; None: W&B off). A
    resumed run (``resume_step``: the checkpoint's global step) keeps the CSV rows logged before it and its W&B run."""
    loggers: list[Logger] = [HistoryCSVLogger(run, resume_step=resume_step)]
    if settings is None:
        return loggers
    run_id = tracking.wandb_run_id(run)
    init = dict(
        group=tracking.wandb_group(run, settings.group or tracking.sweep_group() or run_id),
        name=settings.name or tracking.run_name(run_config, run),
        dir=str(run.path),
        config=run_config,
        id=run_id,
        resume="allow",
    )
    # rank zero starts the run (online, else offline: start_run); the other ranks' loggers stay silent
    experiment = tracking.start_run(settings, **init) if rank_zero_only.rank == 0 else None
    init = settings.init_args() | init
    init["save_dir"] = init.pop("dir")
    loggers.append(WandbLogger(experiment=experiment, **init))  # model artifacts: log_model_artifacts
    return loggers


# the direction of each validation metric, so the W&B runs table shows its best value (max or min) per run
BEST_OF = {"val/acc": "max", "val/top5": "max", "val/nll": "min", "val/ece": "min", "train_clean/nll": "min"}


def define_best_metrics(loggers: list[Logger]) -> None:
    """``define_metric`` for :data:`BEST_OF` on each W&B logger's run (rank zero's; other ranks have none)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            experiment = logger.experiment
            if hasattr(experiment, "define_metric"):
                for name, goal in BEST_OF.items():
                    experiment.define_metric(name, summary=goal)
