"""The Lightning loggers of a training run: CSV into the run directory (a resumed run keeps its rows) and W&B
(:mod:`alternet.tracking` starts the W&B run and holds its ids and names)."""

from __future__ import annotations

import csv
import logging
from typing import Any

from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from .. import tracking
from ..files import write_csv
from ..runs.directories import RunDir

log = logging.getLogger(__name__)


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
    # rank zero starts the run (online, else offline: start_run) and keeps its id and group in the run directory; the
    # other ranks' loggers stay silent and write nothing (under torchrun or srun two ranks wrote ids of their own)
    zero = rank_zero_only.rank == 0
    run_id = tracking.wandb_run_id(run) if zero else None
    earlier = tracking.unsynced_segments(run, run_id) if zero and resume_step is not None else []
    if earlier:
        log.warning(
            f"W&B: {len(earlier)} earlier offline segment(s) of this run are not uploaded ({earlier[-1]} ...); their "
            "model artifacts name checkpoints this resume may replace: `wandb sync` them first to keep those"
        )
    init = dict(
        group=tracking.wandb_group(run, settings.group or tracking.sweep_group() or run_id) if zero else None,
        name=settings.name or tracking.run_name(run_config, run),
        dir=str(run.path),
        config=run_config,
        id=run_id,
        resume="allow",
    )
    experiment = tracking.start_run(settings, **init) if zero else None
    init = settings.init_args() | init
    init["save_dir"] = init.pop("dir")
    loggers.append(RunWandbLogger(experiment=experiment, **init))  # model artifacts: log_model_artifacts
    return loggers


class RunWandbLogger(WandbLogger):
    """Lightning's W&B logger on the run alternet started, whose config is the run's resolved one (``wandb.init``'s
    ``config``, as ``config.yaml``): the module's and data module's hyperparameters are not written over it (W&B
    replaced its ``data`` section by the module's, losing the split and subset keys)."""

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


STEP = "trainer/global_step"  # what Lightning's W&B logger adds to each row: the axis of every chart, as in the CSV
BEST_OF = {"val/acc": "max", "val/nll": "min"}  # the runs table's best value of these; every other key its last


def define_metrics(loggers: list[Logger]) -> None:
    """On each W&B logger's run (rank zero's; other ranks have none): every metric charted against the optimizer
    step (W&B's own ``_step`` counts log calls and starts again on a resume), and :data:`BEST_OF` summarised."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            experiment = logger.experiment
            if hasattr(experiment, "define_metric"):
                experiment.define_metric(STEP)
                experiment.define_metric("*", step_metric=STEP, step_sync=True)
                for name, goal in BEST_OF.items():
                    experiment.define_metric(name, summary=goal)
