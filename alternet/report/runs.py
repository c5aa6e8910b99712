"""The runs of a sweep directory as rows: what each job swept, its seed, and the numbers the paper reasons with
(test error, clean training NLL, robustness)."""

from __future__ import annotations

import csv
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from ..data.corrupted.names import CORRUPTIONS
from ..errors import AlternetWarning, ConfigValueError
from ..files import is_output_of
from ..runs.directories import METRICS_FILE, RunDir, SweepDir, SweepJobs
from ..runs.summary import RunSummary
from ..typed import conforms


@dataclass(frozen=True)
class Run:
    """One finished job: its overrides (``key -> value`` as typed), seed and summary."""

    job: RunDir
    overrides: dict[str, str]
    metrics: RunSummary
    curves: dict[str, list[float]] = field(default_factory=dict)  # per-epoch train_clean/nll, val/acc...
    schedule_epochs: int | None = None  # recipe.epochs: the epochs its learning-rate schedule was built for

    @property
    def completed(self) -> bool:
        """The run trained every epoch of its schedule (not cut by ``trainer.max_epochs``/``max_steps``, early
        stopping or a stop); unknown (no recorded config) counts as not."""
        return self.schedule_epochs is not None and self.metrics.epochs >= self.schedule_epochs

    @property
    def unscored(self) -> str | None:
        """Why the run has no number to compare (its test accuracy or NLL not finite: it diverged), else None."""
        bad = [
            k for k in ("acc", "nll") if not conforms(self.metrics.test.get(k) if self.metrics.test else None, float)
        ]
        return f"test {' and '.join(bad)} not finite" if bad else None

    @property
    def seed(self) -> str:
        return self.overrides.get("seed", "0")

    @property
    def test_error(self) -> float:
        return 1.0 - float(self.metrics.test["acc"])

    @property
    def train_nll(self) -> float | None:
        """The last epoch's clean training NLL (``data.train_clean_size``), None when the run did not log it."""
        value = (self.metrics.train_clean or {}).get("nll")
        return None if value is None or not math.isfinite(value) else float(value)

    @property
    def train_nll_epoch(self) -> float | None:
        """The last epoch's HDVW training NLL (``train/nll_epoch``: the mean training loss over its augmented, mixed
        batches), None when the run did not log it."""
        return self.last("train/nll_epoch")

    def last(self, key: str) -> float | None:
        """The last epoch's value of a logged curve (``val/acc``...), None when not logged or not finite."""
        values = self.curves.get(key) or []
        return float(values[-1]) if values and math.isfinite(values[-1]) else None

    @property
    def tested_its_last_epoch(self) -> bool:
        """Whether its test error is of the weights its training NLLs are of, the last epoch's: its final weights
        tested, or the monitor's best of that epoch (a best of an earlier epoch is another model)."""
        summary = self.metrics
        if summary.best_checkpoint is None or summary.tested_checkpoint != summary.best_checkpoint:
            return True
        return summary.best_epoch is not None and summary.best_epoch >= summary.epochs

    @property
    def images_tested(self) -> int | None:
        """How many test images its test error is over (None where its summary does not say)."""
        return None if self.metrics.test_images is None else self.metrics.test_images.scored

    def test_correct(self) -> np.ndarray | None:
        """Which test images the run classified correctly (from ``eval/predictions.npz``, written by
        ``evaluate.after_training=true``), for the test set's own noise in a comparison; None without them."""
        return _correct(self.predictions) if self.predictions else None

    def robust_correct(self) -> np.ndarray | None:
        """Per test image, the share of the benchmark corruption sets the run classified it correctly in (from
        ``eval/predictions.npz``; its mean is the robustness), for the test set's own noise in a robustness
        comparison; None without them."""
        return _robust_correct(self.predictions) if self.predictions else None

    @property
    def predictions(self) -> Path | None:
        """The predictions of the run's own evaluation after training, where its summary names one (an earlier
        finish's ``eval/`` beside a summary without one is not the run's; ``alternet evaluate`` refuses to write
        into a run's ``eval/``, which it did not mark)."""
        path = self.job.predictions
        return path if self.metrics.evaluation_dir is not None and path.is_file() else None

    @property
    def aurc(self) -> float | None:
        """The area under the test risk-coverage curve, when the run was scored after training."""
        return None if self.metrics.selective is None else float(self.metrics.selective.aurc)

    @property
    def robustness(self) -> float | None:
        """Mean accuracy over the corruption sets, when the run scored them after training."""
        return None if self.metrics.robustness is None else float(self.metrics.robustness.summary.robustness)


@cache
def _correct(path: Path) -> np.ndarray | None:
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as arrays:
        if "probs" not in arrays or "labels" not in arrays:
            return None
        return np.argmax(arrays["probs"], axis=1) == arrays["labels"]


@cache
def _robust_correct(path: Path) -> np.ndarray | None:
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as arrays:
        sets = sorted(
            key.removesuffix("/pred")
            for key in arrays.files
            if key.startswith("corrupted/") and key.endswith("/pred") and key.split("/")[1] in CORRUPTIONS
        )
        if not sets:
            return None
        return np.mean([arrays[f"{key}/pred"] == arrays[f"{key}/labels"] for key in sets], axis=0)


def read_history(csv_path: Path) -> dict[str, dict[int, float]]:
    """Per-epoch values of each logged metric: a per-step one (logged in the rows that hold ``train/lr``) averaged
    over the epoch, any other the epoch's last row (a run stopped inside an epoch by ``trainer.max_steps`` logs that
    epoch's partial row, and its resume the whole epoch's after it); the learning rates per step under
    ``<name>@step`` (``train/lr`` and LearningRateMonitor's epoch-less ``lr-<optimizer>/pg<N>`` rows)."""
    values: dict[str, dict[int, list[float]]] = {}
    per_step_keys: set[str] = set()
    with open(csv_path, newline="") as file:
        for line, row in enumerate(csv.DictReader(file), start=2):
            if row.get("train/lr"):
                per_step_keys.update(key for key, value in row.items() if value)
            for key, value in row.items():
                if key in ("epoch", "step") or not value:
                    continue
                try:
                    per_step = key == "train/lr" or not row["epoch"]
                    index = int(row["step"]) if per_step else int(row["epoch"])
                    number = float(value)
                except (TypeError, ValueError, KeyError):
                    raise ConfigValueError(
                        f"{csv_path} line {line} is malformed ({key}={value!r}, epoch={row.get('epoch')!r}, "
                        f"step={row.get('step')!r}): not Lightning's CSV of numbers; restore it from the run, or "
                        "move the job out of the sweep"
                    ) from None
                name = f"{key}@step" if per_step else key
                values.setdefault(name, {}).setdefault(index, []).append(number)
    return {
        key: {i: sum(v) / len(v) if key in per_step_keys else v[-1] for i, v in sorted(rows.items())}
        for key, rows in values.items()
    }


def _curves(job: RunDir) -> dict[str, list[float]]:
    path = job.metrics_csv
    history = read_history(path) if path.is_file() else {}
    keys = ("train_clean/nll", "train_clean/acc", "val/acc", "val/nll", "train/nll_epoch")
    return {key: list(history[key].values()) for key in keys if history.get(key)}


def read_sweep(sweep_dir: Path) -> tuple[list[Run], SweepJobs]:
    """The finished jobs of ``sweep_dir`` as runs, and all its jobs (finished, started and not finished, not
    started) by :meth:`SweepDir.jobs`, the rule the multirun callback's ``summary.csv`` reads it by too."""
    if rounds := sorted(path.name for path in Path(sweep_dir).glob("round_[0-9]*") if path.is_dir()):
        raise ConfigValueError(
            f"{sweep_dir} is a build-up search's folder ({', '.join(rounds)}): its summary.md compares its layouts; "
            f"report a round's runs with alternet report {Path(sweep_dir) / rounds[-1]}"
        )
    folder = Path(sweep_dir)
    if folder.is_dir() and (is_output_of(folder, "evaluate") or RunDir(folder).holds_job("evaluate")):
        raise ConfigValueError(
            f"{sweep_dir} is an evaluation's folder (alternet evaluate's), not a sweep's: alternet report compares "
            "the runs of a -m sweep (its hydra.sweep.dir, e.g. multirun/DATE/TIME); an evaluation of several models "
            "compares them in its comparison.csv"
        )
    if RunDir(sweep_dir).is_finished() or RunDir(sweep_dir).environment.is_file():
        raise ConfigValueError(
            f"{sweep_dir} is one run's directory, not a sweep's: alternet report compares the runs of a -m sweep "
            "(its hydra.sweep.dir, e.g. multirun/DATE/TIME); alternet evaluate ckpt=RUN scores one run"
        )
    sweep = SweepDir(sweep_dir)
    jobs = sweep.jobs()
    searched = any(job.searched_by() for job in jobs.jobs[:1])  # a search writes none
    if not sweep.multirun_record.is_file() and not searched:
        warnings.warn(
            f"{sweep_dir} holds no multirun.yaml: it is no -m sweep's directory, and its runs are compared as if "
            "one sweep had run them",
            AlternetWarning,
            stacklevel=2,
        )
    if not jobs.finished:
        raise ConfigValueError(
            f"{sweep_dir} is a sweep none of whose jobs finished ({jobs.describe()}): each job's train.log says why"
            + (
                "; a new search goes to a new hydra.sweep.dir"
                if searched
                else "; its command again with ckpt_path=last completes it"
                if jobs.not_started or len(jobs.diverged) < len(jobs.jobs)
                else ""
            )
            if jobs.jobs
            else f"{sweep_dir} holds no finished runs (no <job>/{METRICS_FILE}); point at a multirun's sweep "
            "directory, e.g. multirun/DATE/TIME"
        )
    unrecorded = [job for job in jobs.finished if not job.overrides_file.is_file()]
    if unrecorded and len(unrecorded) < len(jobs.finished):  # its settings unknown: no variant to put it in
        warnings.warn(
            f"{sweep_dir}: job {', '.join(job.path.name for job in unrecorded)} has no Hydra record of its overrides "
            f"(.hydra/overrides.yaml), so its variant cannot be told: left out of the comparison",
            AlternetWarning,
            stacklevel=2,
        )
    recorded = [job for job in jobs.finished if job not in unrecorded] or unrecorded
    runs = [Run(job, job.swept_values(), job.summary(), _curves(job), _schedule(job)) for job in recorded]
    _check_no_twins(runs, sweep_dir)
    return runs, jobs


def _check_no_twins(runs: list[Run], sweep_dir: Path) -> None:
    """Refuse two jobs of the same overrides and seed: a copy of one (or one job twice) would count its seed
    twice. (Runs of different data sets are warned about where the variants are built.)"""
    seen: dict[tuple, Run] = {}
    for run in (run for run in runs if run.job.overrides_file.is_file()):  # without one, no settings to compare
        twin = seen.setdefault(tuple(sorted(run.overrides.items())), run)
        if twin is not run:
            raise ConfigValueError(
                f"{sweep_dir}: jobs {twin.job.path.name} and {run.job.path.name} ran the same overrides and seed (a "
                "copy of one, or one job twice): the comparison would count that seed twice; move one of them out of "
                "the sweep directory"
            )


def _schedule(job: RunDir) -> int | None:
    epochs = ((job.recorded_config() or {}).get("recipe") or {}).get("epochs")
    return int(epochs) if isinstance(epochs, int | float) else None


def swept_keys(jobs: Sequence[Mapping[str, str]]) -> list[str]:
    """Override keys whose values differ between ``jobs`` (each one's overrides, ``key -> value``), seed excluded,
    in the order they were first typed. A report passes every job that started (:func:`launched`): a value none of
    whose jobs finished was swept too, and the runs that did are labelled by the value they hold."""
    keys: list[str] = []
    for overrides in jobs:
        keys += [k for k in overrides if k not in keys]
    return [k for k in keys if k != "seed" and len({overrides.get(k) for overrides in jobs}) > 1]


def launched(jobs: SweepJobs) -> list[dict[str, str]]:
    """The overrides of each job of a sweep that started and recorded them."""
    return [job.swept_values() for job in jobs.jobs if job.overrides_file.is_file()]


def variant_of(run: Run, keys: list[str]) -> str:
    """A run's swept values as ``key=value`` pairs (its variant; seeds of one variant share it)."""
    return " ".join(f"{k}={run.overrides.get(k, '-')}" for k in keys) or "all runs"
