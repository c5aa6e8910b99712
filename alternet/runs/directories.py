"""The one home of a run directory's file names and of a sweep's jobs.

Every writer and reader of a run directory names its files through :class:`RunDir` (training, the callbacks, the
loggers, the console, the report, the hub); nowhere else spells them (``tests/runs/test_directories.py`` checks). What a
run directory holds (``hydra.run.dir`` names it)::

    .hydra/             Hydra's records: config.yaml, hydra.yaml, overrides.yaml     .lock   the run that owns it
    config.yaml         the resolved config           environment.json   git commit, versions, command
    logs/               the CSV logger: metrics.csv (per-step and per-epoch metrics), hparams.yaml
    checkpoints/        best-epochNNN.ckpt, last.ckpt (nonfinite-stepN.ckpt when the loss went non-finite)
    resumes.json        each resume: step, checkpoint, settings it changed
    curves.png          loss, NLL and accuracy per epoch, learning rate per step
    metrics.json        the run's summary (:class:`RunSummary`): the mark of a finished run
    eval/               evaluate.after_training: metrics.json (the evaluation's report), predictions.npz, tables
    export/             export.after_training: model.safetensors, config.json, README.md
    wandb-run-id  wandb-group   the W&B run and group a resume rejoins
    wandb/              W&B's local files of the run (an offline run's segments, one per start, for ``wandb sync``)

A sweep directory (``hydra.sweep.dir``, :class:`SweepDir`) holds one run directory per job (``<sweep>/<job>/``),
Hydra's ``multirun.yaml``, the multirun callback's ``summary.csv`` and ``summary.png`` and ``alternet report``'s
``report/``; :meth:`SweepDir.jobs` is the one rule for which jobs it holds.
"""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import CheckpointError, ConfigValueError
from ..files import read_yaml, stale_temporaries, write_json
from .summary import RunSummary

METRICS_FILE = "metrics.json"  # a run's summary; an evaluation directory's report has the same name
PREDICTIONS_FILE = "predictions.npz"  # an evaluation directory's test-set probabilities and labels
ANALYSIS_DIR = "analysis"  # an evaluation directory's analyses (alternet.analysis.run_analyses)
BEST_PREFIX = "best-epoch"
_BEST_EPOCH = re.compile(rf"{BEST_PREFIX}(\d+)")


def best_epoch(checkpoint: str | Path | None) -> int | None:
    """The 1-based epoch of a ``best-epochNNN.ckpt`` (the file name holds Lightning's 0-based index)."""
    match = _BEST_EPOCH.search(Path(checkpoint).name) if checkpoint else None
    return int(match.group(1)) + 1 if match else None


class _At:
    """A file or folder at a fixed place in a run or sweep directory: ``run.config`` is ``run.path / "config.yaml"``."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, directory: Any, owner: type | None = None) -> Path:
        return self if directory is None else directory.path.joinpath(*self.parts)  # type: ignore[return-value]


@dataclass(frozen=True)
class RunDir:
    """A run directory: an attribute for every file and folder a run writes or reads (the names on disk are fixed:
    older runs are read by the same names)."""

    path: Path

    CHECKPOINTS = "checkpoints"
    LOGS = "logs"  # the CSV logger's version folder
    LAST = "last.ckpt"
    BEST_FILENAME = f"{BEST_PREFIX}{{epoch:03d}}"  # Lightning's ModelCheckpoint filename template
    HYDRA = ".hydra"
    EVAL = "eval"  # what evaluate.after_training writes

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    checkpoints = _At(CHECKPOINTS)
    last_checkpoint = _At(CHECKPOINTS, LAST)  # every epoch, mid-epoch on request, on pre-emption
    config = _At("config.yaml")  # the resolved config
    environment = _At("environment.json")  # git commit, versions, command
    metrics = _At(METRICS_FILE)  # the run's RunSummary, the mark of a finished run
    resumes = _At("resumes.json")  # each resume's step, checkpoint and the settings it changed
    lock = _At(".lock")  # the pid and host of the run that owns the directory
    logs = _At(LOGS)
    metrics_csv = _At(LOGS, "metrics.csv")  # the CSV logger's per-step and per-epoch rows (Lightning names it)
    hparams = _At(LOGS, "hparams.yaml")  # the CSV logger's hyperparameters (Lightning names it)
    curves = _At("curves.png")  # loss, NLL and accuracy per epoch, learning rate per step
    eval_dir = _At(EVAL)
    predictions = _At(EVAL, PREDICTIONS_FILE)  # the tested weights' test-set probabilities and labels
    export_dir = _At("export")  # what export.after_training writes
    wandb_run_id = _At("wandb-run-id")  # the W&B run a resumed run continues
    wandb_group = _At("wandb-group")  # the W&B group fixed at the run's first start
    wandb_dir = _At("wandb")  # W&B's own files of the run (wandb.init's dir is the run directory)
    hydra = _At(HYDRA)  # Hydra's records of the job
    overrides_file = _At(HYDRA, "overrides.yaml")  # the job's overrides as typed

    def remove_stale_temporaries(self) -> None:
        """Delete what a write killed mid-way left in the run directory, its checkpoints (a checkpoint written in
        the background when the process was killed) and its CSV log: called by the run that holds the directory's
        lock."""
        for folder in (self.path, self.checkpoints, self.logs):
            for path in stale_temporaries(folder):
                path.unlink(missing_ok=True)

    def best_checkpoints(self) -> list[Path]:
        """Every ``checkpoints/best-*.ckpt`` (whatever its epoch), sorted."""
        return sorted(self.checkpoints.glob("best-*.ckpt"))

    def checkpoint_files(self) -> list[Path]:
        """Every ``checkpoints/*.ckpt``, sorted (none when there is no checkpoint folder)."""
        return sorted(self.checkpoints.glob("*.ckpt")) if self.checkpoints.is_dir() else []

    def diverged(self) -> bool:
        """Stopped by a non-finite loss and not resumed past it: a ``nonfinite-stepN.ckpt`` no older than
        ``last.ckpt``."""
        stopped = [path.stat().st_mtime for path in self.checkpoints.glob("nonfinite-step*.ckpt")]
        last = self.last_checkpoint.stat().st_mtime if self.last_checkpoint.is_file() else None
        return bool(stopped) and (last is None or max(stopped) >= last)

    def nonfinite_checkpoint(self, step: int) -> Path:
        """``checkpoints/nonfinite-stepN.ckpt``: the state before a step whose loss or gradients went non-finite."""
        return self.checkpoints / f"nonfinite-step{step}.ckpt"

    def checkpoint_in_folder(self, checkpoint: str | Path) -> Path:
        """The file of this name inside this run's checkpoint folder (a moved or copied run names its own)."""
        return self.checkpoints / Path(checkpoint).name

    @classmethod
    def of_checkpoint(cls, checkpoint: str | Path) -> RunDir | None:
        """The run directory a checkpoint file sits in (``<run>/checkpoints/x.ckpt`` beside its ``config.yaml``)."""
        checkpoint = Path(checkpoint)
        run = cls(checkpoint.parent.parent)
        return run if checkpoint.parent.name == cls.CHECKPOINTS and run.config.is_file() else None

    @property
    def setup_records(self) -> tuple[Path, ...]:
        """What a run writes before its first step: the records of a run that did nothing, disposable when it
        fails (besides Hydra's ``.hydra/`` and its ``*.log``)."""
        return (self.config, self.environment, self.lock, self.hparams)

    def is_hydra_record(self, path: Path) -> bool:
        """A file Hydra writes for every job: under ``.hydra/``, or its log at the top (``train.log``)."""
        inside = path.relative_to(self.path).parts
        return inside[0] == self.HYDRA or (len(inside) == 1 and path.suffix == ".log")

    # what a run holds --------------------------------------------------------------------------------------------

    def is_run_dir(self) -> bool:
        """A directory with a checkpoint folder (what a command given a directory takes for a run)."""
        return self.path.is_dir() and self.checkpoints.is_dir()

    def is_finished(self) -> bool:
        return self.metrics.is_file()

    def is_job(self) -> bool:
        """A job of a sweep: Hydra recorded its overrides, or it holds a run's checkpoints or summary."""
        return self.overrides_file.is_file() or self.is_finished() or self.checkpoints.is_dir()

    def products(self) -> list[Path]:
        """The run's products: checkpoints, summary, curves, CSV log, evaluation and export (files only; a file of
        the user's beside them is not one)."""
        groups = (
            self.checkpoint_files(),
            [self.metrics, self.curves, self.metrics_csv],
            sorted(self.eval_dir.glob("*")),
            sorted(self.export_dir.glob("*")),
        )
        return [path for group in groups for path in group if path.is_file()]

    def clear_earlier_run(self) -> list[str]:
        """Before a run starts afresh in this directory (``reuse_run_dir=true``): the earlier run's products, its
        resumes, its W&B ids and W&B's local files (an offline run's artifacts name checkpoints the new run
        replaces), its summary first (until the rest is gone the directory reads as an interrupted run). Returns
        what it removed, relative to the directory (a folder as ``eval/``)."""
        files = [*self.products(), self.resumes, self.wandb_run_id, self.wandb_group]
        folders = [folder for folder in (self.eval_dir, self.export_dir, self.wandb_dir) if folder.is_dir()]
        removed = [
            *(str(path.relative_to(self.path)) for path in files if path.parent not in folders and path.is_file()),
            *(f"{folder.name}/" for folder in folders),
        ]
        self.metrics.unlink(missing_ok=True)
        for path in files:
            path.unlink(missing_ok=True)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        return removed

    def summary(self) -> RunSummary | None:
        """The run's summary, None before the run finished."""
        return RunSummary.from_json(self.metrics) if self.is_finished() else None

    def write_summary(self, summary: RunSummary) -> Path:
        """Write ``metrics.json``, once, atomically (strict JSON)."""
        return write_json(self.metrics, summary.to_json())

    def recorded_config(self) -> dict[str, Any] | None:
        """The resolved config the run recorded (``config.yaml``), if it has one."""
        return read_yaml(self.config, error=CheckpointError) if self.config.is_file() else None

    def overrides(self) -> list[str]:
        """The job's overrides as typed (Hydra's ``.hydra/overrides.yaml``; none when Hydra did not record them)."""
        if not self.overrides_file.is_file():
            return []
        entries = yaml.safe_load(self.overrides_file.read_text()) or []
        return [str(entry) for entry in entries]

    def holds_job(self, job: str) -> bool:
        """Whether the directory is ``job``'s own (``train``, ``evaluate``): Hydra's records name that job
        (``.hydra/hydra.yaml``), it holds only the lock of a start that stopped before Hydra wrote them, or, for
        ``train``, a run's own records (``environment.json``, written by every run, from Python too)."""
        if [path.name for path in self.path.iterdir()] == [self.lock.name]:
            return True
        if job == "train" and self.environment.is_file():
            return True
        try:
            records = yaml.safe_load((self.hydra / "hydra.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            return False
        return isinstance(records, dict) and str(((records.get("hydra") or {}).get("job") or {}).get("name")) == job

    def searched_by(self) -> str | None:
        """The search sweeper that launched this job (:func:`search_sweeper`), from ``.hydra/hydra.yaml``; None for
        a grid sweep's job, a single run, or without that record."""
        try:
            hydra = (yaml.safe_load((self.hydra / "hydra.yaml").read_text()) or {}).get("hydra") or {}
        except (OSError, yaml.YAMLError, AttributeError):
            return None
        return search_sweeper((hydra.get("sweeper") or {}).get("_target_")) if hydra.get("mode") == "MULTIRUN" else None

    def swept_values(self) -> dict[str, str]:
        """The job's overrides that choose what it trains as ``key -> value`` (``+key`` / ``~key`` as ``key``; a
        deletion without a value left out; :func:`variant_overrides`)."""
        return dict(entry.lstrip("+~").split("=", 1) for entry in variant_overrides(self.overrides()) if "=" in entry)


GRID_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # its name in a config, not an import


def search_sweeper(target: Any) -> str | None:
    """The class name of a Hydra sweeper (its ``_target_``) that chooses its jobs as it goes, from the values the
    earlier ones returned (``OptunaSweeper``, Ax, Nevergrad); None for Hydra's grid sweeper (or none)."""
    return str(target).rsplit(".", 1)[-1] if target and target != GRID_SWEEPER else None


CONTINUATION_KEYS = ("ckpt_path", "reuse_run_dir")  # how a job was launched again, not what it trains


def variant_overrides(overrides: list[str]) -> list[str]:
    """A job's overrides but :data:`CONTINUATION_KEYS` (``ckpt_path=last`` continues a sweep's jobs as they were)."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in CONTINUATION_KEYS]


# a sweep directory -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepJobs:
    """The jobs of a sweep directory: those that finished (``metrics.json``), those that started and did not, and
    how many the sweep launches (``expected``, from Hydra's ``multirun.yaml``; None when unknown)."""

    jobs: tuple[RunDir, ...]
    expected: int | None = None

    @property
    def finished(self) -> tuple[RunDir, ...]:
        return tuple(job for job in self.jobs if job.is_finished())

    @property
    def unfinished(self) -> tuple[RunDir, ...]:
        """Started, not finished: a run killed or failed after its first step (a ``last.ckpt``, no summary)."""
        return tuple(job for job in self.jobs if not job.is_finished())

    @property
    def diverged(self) -> tuple[RunDir, ...]:
        """Started, not finished, stopped by a non-finite loss (a ``nonfinite-stepN.ckpt`` no older than its
        ``last.ckpt``): ``ckpt_path=last`` would repeat the divergence, or start afresh where there is no last."""
        return tuple(job for job in self.unfinished if job.diverged())

    @property
    def not_started(self) -> int | None:
        """How many of the launched jobs left no directory (never started, or failed before any work)."""
        return None if self.expected is None else max(self.expected - len(self.jobs), 0)

    @property
    def complete(self) -> bool:
        return not self.unfinished and not self.not_started

    def describe(self) -> str:
        """``N of M jobs finished. Started, not finished: 2 (jobs a, b). Not started: K.``"""
        of = f" of {self.expected}" if self.expected else ""
        line = f"{len(self.finished)}{of} job{'s' * ((self.expected or len(self.finished)) != 1)} finished."
        if self.unfinished:
            numbers = ", ".join(job.path.name for job in self.unfinished)
            line += f" Started, not finished: {len(self.unfinished)} (job{'s' * (len(self.unfinished) > 1)} {numbers})."
        if diverged := self.diverged:
            numbers = ", ".join(job.path.name for job in diverged)
            line += (
                f" Stopped at a non-finite loss: job{'s' * (len(diverged) > 1)} {numbers} (its train.log ends on the "
                "command that resumes it with a lower learning rate; the sweep's command would diverge again)."
            )
        if self.not_started:
            line += f" Not started: {self.not_started}."
        if self.expected and len(self.jobs) > self.expected:  # an earlier, larger sweep's folders beside these
            line += (
                f" The folder holds {len(self.jobs)} job folders for the sweep's {self.expected} jobs: the others are "
                "an earlier sweep's, counted here."
            )
        return line


@dataclass(frozen=True)
class SweepDir:
    """A sweep directory (``hydra.sweep.dir``): its jobs' run directories and what is written beside them."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    multirun_record = _At("multirun.yaml")  # Hydra's: the sweeper's params and the command line's sweeps
    summary_csv = _At("summary.csv")  # one row per job (the multirun callback, alternet.apps.hydra.sweep)
    summary_png = _At("summary.png")
    report_dir = _At("report")  # what alternet report writes by default

    def jobs(self) -> SweepJobs:
        """Every job directory under the sweep (``<sweep>/<job>/`` holding Hydra's record of its overrides, a
        checkpoint folder or a summary), in Hydra's numbering order, and how many the sweep launches. The one rule
        both the multirun callback and the report read a sweep by."""
        if not self.path.is_dir():
            if self.path.is_symlink():  # to a folder gone, or a loop of links
                raise ConfigValueError(
                    f"sweep directory {self.path} is a link to {self.path.readlink()}, which reaches no folder"
                )
            raise ConfigValueError(f"sweep directory {self.path} does not exist")
        jobs = [RunDir(p) for p in self.path.iterdir() if p.is_dir() and RunDir(p).is_job()]
        jobs.sort(key=lambda job: (len(job.path.name), job.path.name))
        return SweepJobs(tuple(jobs), self.expected_jobs())

    def expected_jobs(self) -> int | None:
        """How many jobs the sweep launches, from Hydra's record of it (``multirun.yaml``: the sweeper's params and
        the command line's sweeps); None when unknown."""
        if not self.multirun_record.is_file():
            return None
        from hydra.core.override_parser.overrides_parser import OverridesParser  # Hydra's own sweep grammar

        hydra = read_yaml(self.multirun_record, error=ConfigValueError).get("hydra") or {}
        params = {str(k): str(v) for k, v in ((hydra.get("sweeper") or {}).get("params") or {}).items()}
        for override in (hydra.get("overrides") or {}).get("task") or []:
            key, _, value = str(override).partition("=")
            params[key.lstrip("+~")] = value
        try:
            parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
            sizes = [len(list(o.sweep_string_iterator())) for o in parsed if o.is_sweep_override()]
        except Exception:  # a sweep this parser cannot count (a plugin's syntax): say nothing rather than guess
            return None
        return math.prod(sizes)
