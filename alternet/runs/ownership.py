"""Owning a run directory: the lock a run holds for its life, the refusal to overwrite another run, and the removal
of a directory a refused run created and left unused."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ConfigValueError
from ..files import LockBusy, lock_file, lock_owner
from .directories import RunDir, SweepDir

_HELD: dict[Path, RunDirLock] = {}  # the run directories this process holds, by resolved path
_TO_CREATE: set[Path] = set()  # sweep job directories this process's launcher creates (noted before it does)


def note_created_by_this_process(paths: Iterable[Path]) -> None:
    """Directories that do not exist yet and that this process will create through Hydra (a sweep's job
    directories, noted before its first job): a job refused before any work may remove its own, never another's."""
    _TO_CREATE.update(path.resolve() for path in map(Path, paths) if not path.exists())


def note_search_dir(sweep_dir: Path) -> None:
    """A search's jobs are not known before it runs: its sweep directory, which holds no job yet, is noted instead,
    and the job folders in it are this process's (:func:`note_created_by_this_process`)."""
    _TO_CREATE.add(Path(sweep_dir).resolve())


class RunDirLock:
    """An exclusive lock on a run directory for the life of the run (released by the OS when the process dies, so a
    killed run never leaves a stale lock). Where ``fcntl`` is missing (Windows) there is no lock.

    Acquired before anything is written into the directory (training's pre-flight callback, before Hydra writes its
    records), it also says whether this process created the directory (:attr:`created`): only then may a run that
    failed before any work remove it (:func:`discard_unused_run_dir`). Acquiring a directory this process already
    holds returns the held lock."""

    def __init__(self, run: RunDir, what: str = "run directory", option: str = "hydra.run.dir"):
        self.run, self.what, self.option = run, what, option
        self.path = run.lock
        self.created = False
        self.parents_made: list[Path] = []  # the folders above it that acquiring it created, innermost first
        self._file: Any = None

    @classmethod
    def held(cls, run: RunDir) -> RunDirLock | None:
        """This process's lock on the run directory, if it holds one."""
        return _HELD.get(run.path.resolve())

    def acquire(self) -> RunDirLock:
        held = self.held(self.run)
        if held is not None:
            return held
        key = self.run.path.resolve()
        missing = [parent for parent in key.parents if not parent.exists()]
        try:
            self.run.path.mkdir(parents=True)
            self.created = True
            self.parents_made = missing
        except FileExistsError:
            self.created = key in _TO_CREATE or key.parent in _TO_CREATE
        try:
            self._file = lock_file(self.path)  # held open for the run's life
        except LockBusy as busy:
            raise self._busy(busy.owner) from None
        _HELD[key] = self
        return self

    def check_free(self) -> None:
        """Refuse, as :meth:`acquire` would, a directory another process holds; asking writes nothing (a refused
        command leaves the lock file of the run that owns the directory as it was)."""
        if (owner := lock_owner(self.path)) is not None and self.held(self.run) is None:
            raise self._busy(owner)

    def _busy(self, owner: str) -> ConfigValueError:
        return ConfigValueError(
            f"{self.what} {self.run.path} is in use by another run ({owner}); wait for it, or "
            f"{_own_directory(self.run, self.option)}"
        )

    def release(self) -> None:
        _HELD.pop(self.run.path.resolve(), None)
        if self._file is not None:
            self._file.close()
            self._file = None


def training_now(run: RunDir) -> str | None:
    """Who holds the run directory's lock (``pid N on HOST``: a run training there), or None."""
    return None if RunDirLock.held(run) is not None else lock_owner(run.lock)


def discard_unused_run_dir(run: RunDir) -> bool:
    """Remove the directory of a run that failed before any work, and the empty folders above it that its lock
    created, when this process holds its lock and created it (a directory another run holds, or one that was there
    before, is never touched): it holds only Hydra's records
    (``.hydra/``, ``*.log``), the run's setup records (the lock among them) and empty folders. Anything else in it (a
    checkpoint, metrics, W&B files, a file of the user's) keeps it."""
    lock = RunDirLock.held(run)
    if lock is None or not lock.created or not run.path.is_dir():
        return False
    setup = set(run.setup_records)
    if any(path.is_file() and not (run.is_hydra_record(path) or path in setup) for path in run.path.rglob("*")):
        return False
    lock.release()
    shutil.rmtree(run.path, ignore_errors=True)
    for parent in lock.parents_made:  # outputs/runs/DATE made for it, unless another run has written there since
        try:
            parent.rmdir()
        except OSError:
            break
    return True


def check_fresh_run_dir(run: RunDir, resuming: bool, reuse: bool, asked_last: bool = False) -> None:
    """A new run never silently overwrites another: a directory holding a finished run (``metrics.json``) or an
    interrupted one (checkpoints) must be resumed (``ckpt_path=last``) or explicitly reused (``reuse_run_dir``);
    ``asked_last``: ``ckpt_path=last`` was given and found no ``last.ckpt``. A file where the run keeps a folder
    (its checkpoints, its log) is refused first: the run would train and then fail to save."""
    for folder in (run.checkpoints, run.logs):
        if folder.exists() and not folder.is_dir():
            raise ConfigValueError(
                f"{folder} is a file where a run keeps its {folder.name} folder: move it away, or give this run its "
                "own directory (hydra.run.dir=...)"
            )
    if resuming or reuse:
        return
    checkpoints = run.checkpoint_files()
    if run.is_finished() or checkpoints:
        what = (
            f"a finished run ({run.metrics.name})"
            if run.is_finished()
            else f"an interrupted run ({checkpoints[-1].name})"
        )
        resume = "resume it with ckpt_path=last"
        if asked_last:  # and it has no last.ckpt: the advice must not be what was just typed
            resume = f"it has no {run.last_checkpoint.name} for ckpt_path=last"
            if checkpoints:
                names = ", ".join(c.name for c in checkpoints[:3])
                resume += f": resume from one of its checkpoints (ckpt_path=PATH: {names})"
        raise ConfigValueError(
            f"run directory {run.path} already holds {what}: {resume}, {_own_directory(run, 'hydra.run.dir')}, or "
            "overwrite it with reuse_run_dir=true"
        )


def _own_directory(run: RunDir, option: str) -> str:
    """How to give a run a directory of its own: ``option``, or for a sweep's job the sweep's directory."""
    if option == "hydra.run.dir" and SweepDir(run.path.parent).multirun_record.is_file():
        return "give the sweep its own directory (hydra.sweep.dir=...)"
    return f"give this {'run' if option == 'hydra.run.dir' else 'one'} its own directory ({option}=...)"
