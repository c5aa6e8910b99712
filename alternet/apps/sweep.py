"""Hydra callbacks of a multirun: before it, every job of a grid sweep checked (:class:`SweepPreflight`); after it,
one CSV row per job with its overrides and final metrics (:class:`SweepSummary`). The jobs are the ones
:meth:`alternet.rundir.SweepDir.jobs` finds, the rule ``alternet report`` reads the same directory by."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from ..errors import AlternetError, exit_with_error
from ..files import write_csv
from ..report.figures import sweep_comparison
from ..rundir import RunDir, SweepDir
from .checks import validate_train_config

GRID_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def job_row(job: RunDir) -> dict[str, Any]:
    """The overrides and final test metrics of one job directory (status ``unfinished`` without a summary)."""
    row: dict[str, Any] = {"job": job.path.name, "overrides": " ".join(job.overrides())}
    row.update(job.swept_values())
    summary = job.summary()
    if summary is None:
        return row | {"status": "unfinished"}
    row.update(status="ok", epochs=summary.epochs, best_val_score=summary.best_val_score)
    if summary.optimized_metric:
        row[summary.optimized_metric.name] = summary.optimized_metric.value
        row["optimized_metric"] = summary.optimized_metric.name
    row.update({f"test/{name}": value for name, value in summary.test.items()})
    return row


def write_sweep_summary(sweep_dir: Path) -> Path | None:
    """Collect every job under ``sweep_dir`` into its ``summary.csv``, and draw ``summary.png`` beside it: one bar
    per job for the optimised metric (``test/acc`` when the sweep names none)."""
    sweep = SweepDir(sweep_dir)
    jobs = sweep.jobs().jobs if sweep.path.is_dir() else ()
    if not jobs:
        return None
    rows = [job_row(job) for job in jobs]
    path = write_csv(sweep.summary_csv, rows)
    optimized = [r.get("optimized_metric") for r in rows if r.get("optimized_metric")]
    sweep_comparison(rows, optimized[0] if optimized else "test/acc", sweep.summary_png)
    return path


class SweepSummary(Callback):
    """Registered in ``alternet/conf/hydra/default.yaml``; runs in the launching process after all jobs."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = SweepDir(config.hydra.sweep.dir)
        path = write_sweep_summary(sweep.path)
        if path is not None:
            print(f"Sweep summary: {path} (plot: {sweep.summary_png}); {sweep.jobs().describe()}", flush=True)


def grid_jobs(config: DictConfig) -> list[list[str]] | None:
    """The overrides of every job of a multirun, as Hydra's grid sweeper expands them (its ``params`` and the
    command line's sweeps, the cartesian product in launch order); ``None`` for a sweeper that chooses its jobs as
    it goes (Optuna, Ax ...)."""
    if config.hydra.sweeper.get("_target_") != GRID_SWEEPER:
        return None
    raw = OmegaConf.to_container(config.hydra, resolve=False)  # an override's ${...} stays text, as Hydra reads it
    params = [f"{key}={value}" for key, value in (raw["sweeper"].get("params") or {}).items()]
    overrides = OverridesParser.create().parse_overrides([*params, *raw["overrides"]["task"]])
    return [list(job) for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


class SweepPreflight(Callback):
    """Registered for training (``alternet/conf/train.yaml``): before a grid sweep's first job, every job's config
    composed and given the checks a single run gets before any work (:func:`validate_train_config`), so a value
    that cannot train stops the sweep in one line now, not after the jobs before it have trained for hours. A job
    holding a value that only resolves once it runs (``${hydra:runtime.output_dir}`` in a key of its own) is left
    to check itself, as it does."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _refuse_a_run_directory(config)
        loader = GlobalHydra.instance().config_loader()
        jobs = grid_jobs(config) or ()
        _refuse_another_sweeps_directories(SweepDir(config.hydra.sweep.dir), jobs)
        try:
            for index, overrides in enumerate(jobs):
                job = loader.load_sweep_config(config, overrides)
                with open_dict(job):
                    job.hydra.job.num = index
                HydraConfig.instance().set_config(job)  # what ${hydra:...} reads, as the launcher sets it per job
                plain = _resolved_before_it_runs(job)
                if plain is None:
                    continue
                try:
                    with warnings.catch_warnings():  # each job prints its own warnings when it runs
                        warnings.simplefilter("ignore")
                        validate_train_config(plain)
                except AlternetError as error:
                    exit_with_error(f"sweep job {index} ({' '.join(overrides)}), before any job ran: {error}")
        finally:
            HydraConfig.instance().cfg = None  # unset, as the launcher expects to find it


def _refuse_a_run_directory(config: DictConfig) -> None:
    """``hydra.run.dir`` names one run's directory; a multirun (``-m``, or a sweep preset that sets
    ``hydra.mode=MULTIRUN``) ignores it and numbers its jobs under ``hydra.sweep.dir`` from 0."""
    given = [o for o in config.hydra.overrides.hydra if str(o).split("=", 1)[0].lstrip("+~") == "hydra.run.dir"]
    if given:
        exit_with_error(
            f"{given[0]}: this is a sweep (-m, or a preset that sweeps), whose jobs go to "
            f"hydra.sweep.dir/<job number> ({config.hydra.sweep.dir}/0, /1, ...), not to hydra.run.dir. Pass "
            "hydra.mode=RUN to train one job in hydra.run.dir, or hydra.sweep.dir=DIR to place the sweep"
        )


def _refuse_another_sweeps_directories(sweep: SweepDir, jobs: Sequence[list[str]]) -> None:
    """A job directory that already holds a job of other overrides (another sweep launched into the same
    directory): Hydra would overwrite its records (``.hydra/``) before the job could refuse to resume it."""
    for index, overrides in enumerate(jobs):
        job = RunDir(sweep.path / str(index))
        recorded = job.overrides()  # none when the directory or Hydra's record of it does not exist
        if recorded and sorted(recorded) != sorted(overrides):
            exit_with_error(
                f"sweep job {index} ({' '.join(overrides)}) would run in {job.path}, which holds a job of other "
                f"overrides ({' '.join(recorded)}): Hydra would overwrite its records. Launch this sweep with "
                "hydra.sweep.dir=NEW_DIR, or with the overrides it was started with to continue it"
            )


def _resolved_before_it_runs(job: DictConfig) -> dict[str, Any] | None:
    """The job's config without Hydra's section, resolved; ``None`` when a value resolves only once it runs."""
    with open_dict(job):
        del job["hydra"]
        job.paths.output_dir = "set when the job runs"  # ${hydra:runtime.output_dir}, set by the launcher
    try:
        return OmegaConf.to_container(job, resolve=True)
    except OmegaConfBaseException:
        return None
