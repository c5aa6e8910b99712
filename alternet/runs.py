"""Run directories: what a run records, which checkpoint stands for it, and the model inside a checkpoint.

One rule for every command (evaluate, export, resume, fine-tune): a run directory's checkpoints are always
resolved *inside that directory* — its best checkpoint (named in its ``metrics.json``, looked up by file name so a
moved or copied directory still works), else the only ``best-*.ckpt``, else ``last.ckpt``.

The layout of a run directory, and every name in it, is :class:`alternet.rundir.RunDir`'s.
"""

from __future__ import annotations

import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import yaml
from hydra.core.hydra_config import HydraConfig
from torch import nn

from .checkpoints import read_checkpoint
from .data.augment import SECTIONS
from .errors import CheckpointError, ConfigValueError
from .files import LockBusy, lock_file, read_json, write_json, write_text
from .models import create_model
from .models.config import model_config
from .models.factory import model_args
from .models.zoo import spec_kwargs
from .rundir import RunDir

PACKAGES = (
    "alternet",
    "torch",
    "torchvision",
    "lightning",
    "timm",
    "hydra-core",
    "torchmetrics",
    "albumentations",
    "numpy",
    "wandb",
    "scikit-learn",
)


# records ---------------------------------------------------------------------------------------


def git_commit(directory: Path) -> str | None:
    """The commit of the checkout holding ``directory`` (with ``-dirty`` when modified), if any."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict[str, Any]:
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "git_commit": git_commit(Path(__file__).resolve().parent),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "command": command_line(),
        "packages": versions,
    }


def write_run_records(run_dir: Path, config: dict[str, Any]) -> None:
    """``config.yaml`` (fully resolved) and ``environment.json``."""
    run = RunDir(run_dir)
    write_text(run.config, yaml.safe_dump(config, sort_keys=False))
    write_json(run.environment, environment())


def run_config(run_dir: Path | None) -> dict[str, Any] | None:
    """The resolved config a run directory recorded, if it has one (:meth:`RunDir.recorded_config`)."""
    return RunDir(run_dir).recorded_config() if run_dir is not None else None


def saved_hyperparameters(checkpoint: dict[str, Any], source: str) -> dict[str, Any]:
    """A training checkpoint's hyperparameters, as every reader of a saved recipe takes them. A recipe saved before
    ``recipe.augment`` had its sections (one flat list of both stacks' keys) is refused in one line."""
    hparams = checkpoint.get("hyper_parameters") or {}
    augment = (hparams.get("recipe") or {}).get("augment")
    if isinstance(augment, dict) and (flat := sorted(set(augment) - set(SECTIONS))):
        raise CheckpointError(
            f"{source} was saved before recipe.augment had its sections ({', '.join(SECTIONS)}): it holds "
            f"recipe.augment.{flat[0]}, which alternet no longer reads; train it again with this version"
        )
    return hparams


# which checkpoint ------------------------------------------------------------------------------


def is_run_dir(path: Path) -> bool:
    return RunDir(path).is_run_dir()


def run_dir_of(checkpoint: Path) -> Path | None:
    """The run directory a checkpoint file sits in (``<run>/checkpoints/x.ckpt``), if it is one."""
    run = RunDir.of_checkpoint(checkpoint)
    return run.path if run is not None else None


def best_checkpoint(run_dir: Path) -> Path | None:
    """The best checkpoint of a run: the one its metrics.json names (by file name, inside ``run_dir``), or the
    only ``best-*.ckpt``."""
    run = RunDir(run_dir)
    summary = run.summary()
    if summary is not None and summary.best_checkpoint:
        named = run.checkpoint_in_folder(summary.best_checkpoint)
        if named.is_file():
            return named
    candidates = run.best_checkpoints()
    if len(candidates) > 1:
        raise CheckpointError(
            f"run directory {run_dir} has {len(candidates)} best checkpoints ({', '.join(c.name for c in candidates)}) "
            "and its metrics.json does not say which is best; pass the checkpoint file itself"
        )
    return candidates[0] if candidates else None


def select_checkpoint(run_dir: Path) -> Path:
    """The checkpoint that stands for a run directory: its best, else ``last.ckpt``."""
    best = best_checkpoint(run_dir)
    if best is not None:
        return best
    run = RunDir(run_dir)
    if run.last_checkpoint.is_file():
        return run.last_checkpoint
    raise CheckpointError(
        f"run directory {run_dir} has no checkpoints in {run.checkpoints} (did training finish an epoch?)"
    )


def find_checkpoint(path: Path) -> tuple[Path, Path | None]:
    """The checkpoint a path stands for, and its run directory: a checkpoint file itself, a run directory's
    :func:`select_checkpoint`, or the single ``.ckpt`` of a folder (e.g. a downloaded checkpoint artifact)."""
    path = Path(path).expanduser()
    if path.is_file():
        return path, run_dir_of(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if is_run_dir(path):
        return select_checkpoint(path), path
    ckpts = sorted(path.glob("*.ckpt"))
    if len(ckpts) == 1:
        return ckpts[0], None
    export = (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    raise CheckpointError(
        f"{path} is an export (model.safetensors, config.json: weights without the run that trained them), not a "
        "checkpoint; give its run directory or a .ckpt file (alternet.hub.load reads the export)"
        if export
        else f"{path} is neither a run directory (no {RunDir.CHECKPOINTS}/ folder) nor a folder with one .ckpt file"
    )


def resume_checkpoint(ckpt_path: str | None, run_dir: Path, *, say: bool = True) -> str | None:
    """The checkpoint a training run resumes from. ``last`` means this run directory's ``last.ckpt`` when it
    exists (a requeued SLURM job; when it does not, training starts from scratch and, if ``say``, says so); any other
    path is checked now, so that a bad one fails before training."""
    if ckpt_path == "last":
        last = RunDir(run_dir).last_checkpoint
        if not last.is_file():
            if say:
                print(f"ckpt_path=last: no {last} yet, so training starts from scratch", file=sys.stderr, flush=True)
            return None
        read_checkpoint(last)
        return str(last)
    if ckpt_path:
        read_checkpoint(ckpt_path)
    return ckpt_path


# owning a run directory -------------------------------------------------------------------------


_HELD: dict[Path, RunDirLock] = {}  # the run directories this process holds, by resolved path
_TO_CREATE: set[Path] = set()  # sweep job directories this process's launcher creates (noted before it does)


def note_created_by_this_process(paths: Iterable[Path]) -> None:
    """Directories that do not exist yet and that this process will create through Hydra (a sweep's job
    directories, noted before its first job): a job refused before any work may remove its own, never another's."""
    _TO_CREATE.update(path.resolve() for path in map(Path, paths) if not path.exists())


class RunDirLock:
    """An exclusive lock on a run directory for the life of the run (released by the OS when the process dies, so a
    killed run never leaves a stale lock). Where ``fcntl`` is missing (Windows) there is no lock.

    Acquired before anything is written into the directory (training's pre-flight callback, before Hydra writes its
    records), it also says whether this process created the directory (:attr:`created`): only then may a run that
    failed before any work remove it (:func:`discard_unused_run_dir`). Acquiring a directory this process already
    holds returns the held lock."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = RunDir(run_dir).lock
        self.created = False
        self.parents_made: list[Path] = []  # the folders above it that acquiring it created, innermost first
        self._file: Any = None

    @classmethod
    def held(cls, run_dir: Path) -> RunDirLock | None:
        """This process's lock on ``run_dir``, if it holds one."""
        return _HELD.get(Path(run_dir).resolve())

    def acquire(self) -> RunDirLock:
        held = self.held(self.run_dir)
        if held is not None:
            return held
        key = self.run_dir.resolve()
        missing = [parent for parent in key.parents if not parent.exists()]
        try:
            self.run_dir.mkdir(parents=True)
            self.created = True
            self.parents_made = missing
        except FileExistsError:
            self.created = key in _TO_CREATE
        try:
            self._file = lock_file(self.path)  # held open for the run's life
        except LockBusy as busy:
            raise ConfigValueError(
                f"run directory {self.run_dir} is in use by another run ({busy.owner}); wait for it, or give this "
                "run its own directory (hydra.run.dir=...)"
            ) from None
        _HELD[key] = self
        return self

    def release(self) -> None:
        _HELD.pop(self.run_dir.resolve(), None)
        if self._file is not None:
            self._file.close()
            self._file = None


def discard_unused_run_dir(run_dir: Path) -> bool:
    """Remove the directory of a run that failed before any work, and the empty folders above it that its lock
    created, when this process holds its lock and created it (a directory another run holds, or one that was there
    before, is never touched): it holds only Hydra's records
    (``.hydra/``, ``*.log``), the run's setup records (the lock among them) and empty folders. Anything else in it (a
    checkpoint, metrics, W&B files, a file of the user's) keeps it."""
    lock = RunDirLock.held(run_dir)
    if lock is None or not lock.created or not run_dir.is_dir():
        return False
    run = RunDir(run_dir)
    setup = set(run.setup_records)
    for path in run_dir.rglob("*"):
        disposable = run.is_hydra_record(path) or path in setup
        if path.is_file() and not disposable:
            return False
    lock.release()
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in lock.parents_made:  # outputs/runs/DATE made for it, unless another run has written there since
        try:
            parent.rmdir()
        except OSError:
            break
    return True


def check_fresh_run_dir(run_dir: Path, resuming: bool, reuse: bool) -> None:
    """A new run never silently overwrites another: a directory holding a finished run (``metrics.json``) or an
    interrupted one (checkpoints) must be resumed (``ckpt_path=last``) or explicitly reused (``reuse_run_dir``)."""
    if resuming or reuse:
        return
    run = RunDir(run_dir)
    checkpoints = run.checkpoint_files()
    if run.is_finished() or checkpoints:
        what = (
            f"a finished run ({run.metrics.name})"
            if run.is_finished()
            else f"an interrupted run ({checkpoints[-1].name})"
        )
        raise ConfigValueError(
            f"run directory {run_dir} already holds {what}: resume it with ckpt_path=last, give this run its own "
            "directory (hydra.run.dir=...), or overwrite it with reuse_run_dir=true"
        )


# what a resume changed ----------------------------------------------------------------------------


def record_resume(run_dir: Path, checkpoint: str, step: int, changes: dict[str, list[Any]]) -> None:
    """Append this resume to ``resumes.json``: config.yaml says what the run uses from now on; this file says what
    an earlier part of it used instead."""
    path = RunDir(run_dir).resumes
    history = read_json(path, error=CheckpointError, kind=list) if path.is_file() else []
    write_json(path, [*history, {"global_step": step, "checkpoint": checkpoint, "changed": changes}])


def command_words() -> list[str]:
    """How this process was started, up to its overrides: ``python SCRIPT`` (``train.py``, the ``alternet`` console
    script) or ``python -m alternet``, then, for the ``alternet`` command, the command word: inside a Hydra job it
    is the job's config name (``train``, ``evaluate``), as the dispatcher hands Hydra the overrides alone
    (:mod:`alternet.apps.cli`)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    package = __name__.split(".")[0]
    if spec is not None and spec.name.split(".")[0] == package:
        head = ["-m", spec.name.removesuffix(".__main__")]
    else:
        head = [sys.argv[0]]
    dispatched = head[-1] == package or Path(head[-1]).stem == package
    try:
        word = [HydraConfig.get().job.config_name] if dispatched else []
    except ValueError:  # not inside a Hydra job (called from Python)
        word = []
    return [sys.executable, *head, *word]


def command_line() -> list[str]:
    """The whole command this process runs, as :func:`command_words` and the arguments after them."""
    return [*command_words(), *sys.argv[1:]]


def resume_command(run_dir: Path, checkpoint: str | Path = "last", **changes: Any) -> str:
    """The shell command that resumes this run in its own directory: the command that started it
    (:func:`command_words`), the job's own overrides (Hydra's record of them, else the command line), its run
    directory, ``ckpt_path`` and any ``changes`` (``key=value``)."""
    command = command_words()
    try:
        overrides = list(HydraConfig.get().overrides.task)
    except ValueError:  # not inside a Hydra job (called from Python)
        overrides = [a for a in sys.argv[1:] if a not in ("-m", "--multirun")]
    dropped = ("ckpt_path=", "hydra.run.dir=", *(f"{k}=" for k in changes))
    kept = [a for a in overrides if not a.lstrip("+").startswith(dropped)]
    extra = [f"hydra.run.dir={run_dir}", f"ckpt_path={checkpoint}", *(f"{k}={v}" for k, v in changes.items())]
    return shlex.join([*command, *kept, *extra])


# the model inside a checkpoint -----------------------------------------------------------------

TRAINING_ONLY_ARGS = ("num_classes", "drop_path_rate")  # set by whoever builds the model, or training-only


@dataclass
class CheckpointWeights:
    """A training checkpoint's network: weights with timm key names and how to rebuild their model."""

    path: Path
    state_dict: dict[str, torch.Tensor]
    architecture: str
    num_classes: int
    model_args: dict[str, Any]  # create_model arguments besides num_classes: the full architecture
    hyper_parameters: dict[str, Any]  # the model / recipe / data sections the run trained with
    ema: bool

    @property
    def data(self) -> dict[str, Any]:
        return self.hyper_parameters["data"]

    def build(self) -> nn.Module:
        """The model with these weights loaded (every tensor must fit), in eval mode."""
        model = create_model(self.architecture, num_classes=self.num_classes, **self.model_args)
        missing, unexpected = model.load_state_dict(self.state_dict, strict=False)
        if missing or unexpected:
            raise CheckpointError(
                f"checkpoint {self.path} does not match its model {self.architecture!r}: "
                f"missing {list(missing)[:5]}, unexpected {list(unexpected)[:5]}"
            )
        return model.eval()


def read_weights(path: str | Path, *, ema: bool = False) -> CheckpointWeights:
    """The network of a checkpoint written by alternet's training (its EMA copy with ``ema``), read safely."""
    path = Path(path)
    checkpoint = read_checkpoint(path)
    hparams = saved_hyperparameters(checkpoint, f"checkpoint {path}")
    if not all(isinstance(hparams.get(key), dict) for key in ("model", "data")):
        raise CheckpointError(
            f"checkpoint {path} lacks the model and data hyperparameters alternet's training saves; "
            "it was not written by alternet"
        )
    prefix = "ema." if ema else "model."
    state_dict = {k[len(prefix) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    if not state_dict:
        what = "EMA weights (the run had no recipe.ema)" if ema else "model weights (no 'model.' keys)"
        raise CheckpointError(f"checkpoint {path} has no {what}")
    model, data = model_config(hparams["model"]), hparams["data"]
    num_classes = int(data["num_classes"])
    # the full architecture (the zoo's spec under the run's overrides), so the record does not depend on the zoo
    args = spec_kwargs(model.name) | model_args(
        model, num_classes=num_classes, img_size=data["image_size"], drop_path_rate=0.0
    )
    return CheckpointWeights(
        path=path,
        state_dict=state_dict,
        architecture=model.name,
        num_classes=num_classes,
        model_args={k: v for k, v in args.items() if k not in TRAINING_ONLY_ARGS},
        hyper_parameters=hparams,
        ema=ema,
    )


def load_model(path: str | Path, *, ema: bool = False) -> tuple[nn.Module, CheckpointWeights]:
    """The bare model (no LightningModule) of a training checkpoint, in eval mode, and what it was read from."""
    weights = read_weights(path, ema=ema)
    return weights.build(), weights
