"""The Hydra callback after a multirun: one CSV row per job with its overrides and final metrics
(:class:`SweepSummary`). The jobs are the ones :meth:`alternet.runs.directories.SweepDir.jobs` finds, the rule
``alternet report`` reads the same directory by. The checks before a sweep's first job are
:mod:`alternet.apps.hydra.preflight`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ...files import write_csv
from ...runs.directories import RunDir, SweepDir, search_sweeper, variant_overrides


def job_row(job: RunDir) -> dict[str, Any]:
    """The overrides and final test metrics of one job directory (status ``unfinished`` without a summary)."""
    row: dict[str, Any] = {"job": job.path.name, "overrides": " ".join(variant_overrides(job.overrides()))}
    row.update({key: value.strip("'\"") for key, value in job.swept_values().items()})  # Hydra's quotes are syntax
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
    from ...report.figures import sweep_comparison  # deferred: Hydra makes this callback for every command

    rows = [job_row(job) for job in jobs]
    path = write_csv(sweep.summary_csv, rows)
    optimized = [r.get("optimized_metric") for r in rows if r.get("optimized_metric")]
    sweep_comparison(rows, optimized[0] if optimized else "test/acc", sweep.summary_png)
    return path


def is_search(config: DictConfig) -> bool:
    """Whether the multirun's sweeper chooses its jobs as it goes (:func:`search_sweeper`), not Hydra's grid's."""
    return search_sweeper(config.hydra.sweeper.get("_target_")) is not None


# the sweep this process launched, and whether it is a search (the command line's end reads it: alternet.apps.cli)
RUNNING: list[tuple[Path, bool]] = []
# the jobs of the search this process launched that did not finish: failed in a launcher's worker process (joblib),
# where the command's record of failed jobs cannot see them; its sweeper went on past them (the command's end reads it)
SEARCH_JOBS_UNFINISHED: list[str] = []


class SweepSummary(Callback):
    """Registered in ``conf/hydra/default.yaml``; runs in the launching process after all jobs."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        RUNNING[:] = [(Path(config.hydra.sweep.dir), is_search(config))]
        SEARCH_JOBS_UNFINISHED.clear()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        RUNNING.clear()  # ended: a later command in this process launched no sweep
        sweep = SweepDir(config.hydra.sweep.dir)
        if str(config.hydra.job.name) != "train":  # a sweep of evaluations: each job's folder is its summary
            print(f"Sweep of evaluations ended: each job's results are in its out_dir ({sweep.path}/NUMBER unless set)")
            return
        path = write_sweep_summary(sweep.path)
        if path is not None:
            print(f"Sweep summary: {path} (plot: {sweep.summary_png}); {sweep.jobs().describe()}", flush=True)
        if path is not None and is_search(config):  # a search's folder holds this launch's jobs only (pre-flight)
            SEARCH_JOBS_UNFINISHED[:] = [job.path.name for job in sweep.jobs().unfinished]
