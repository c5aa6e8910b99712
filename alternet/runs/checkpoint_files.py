"""Checkpoint files as the file system tells them, without torch: which checkpoint a path stands for
(:func:`find_checkpoint`, :func:`select_checkpoint`), and whether a file is one by its first bytes
(:func:`checkpoint_file`). A command's first pass (:mod:`alternet.apps.hydra.preflight`) refuses a wrong path with
them before torch is imported; :mod:`.checkpoints` reads what they find."""

from __future__ import annotations

import os
import warnings
import zipfile
from pathlib import Path

from ..errors import AlternetWarning, CheckpointError
from ..files import is_output_of
from .directories import RunDir, SweepDir

ZIP_MAGIC = b"PK\x03\x04"  # how torch.save's zip archive begins


def check_archive(path: Path, what: str, *, pickles: bool = False) -> None:
    """``path`` is torch.save's zip archive (``pickles``: or a pickle, as torch before 1.6 saved), else one line
    telling a truncated archive (its start is there, its end is not) from a file that is no checkpoint at all."""
    if zipfile.is_zipfile(path):
        return
    with open(path, "rb") as handle:
        head = handle.read(4)
    if pickles and head[:1] == b"\x80":
        return
    if head == ZIP_MAGIC:
        raise CheckpointError(
            f"{what} {path} is truncated: a torch checkpoint archive cut short ({path.stat().st_size} bytes); it may "
            "be an interrupted copy, download or save"
        )
    older = ", or a pickle as torch before 1.6 saved it" if pickles else ""
    raise CheckpointError(
        f"{what} {path} is not a torch checkpoint: it does not begin as torch.save's zip archive does{older} (a "
        "text file, or another format)"
    )


def checkpoint_file(path: str | Path, what: str) -> Path:
    """``path`` (``what``: how messages name it) as a file that begins as ``torch.save`` writes one, else one line:
    a directory (naming the checkpoints in it), a file that does not exist, a truncated archive or another format."""
    path = Path(path).expanduser()
    if path.is_dir():
        inside = sorted(RunDir(path).checkpoint_files(), key=lambda p: p.name != RunDir.LAST)  # last.ckpt first
        found = f", e.g. {inside[0]} (of {', '.join(p.name for p in inside)})" if inside else " file"
        raise CheckpointError(f"{what} {path} is a directory, not a checkpoint: pass a .ckpt{found}")
    if not path.is_file():
        raise CheckpointError(f"{what} {path} does not exist")
    check_archive(path, what)
    return path


def check_resume_path(ckpt_path: str) -> None:
    """A training run's ``ckpt_path`` (not ``last``) as far as the file system tells: a word (``best``, ``LAST``)
    that names no file, a directory, a file that does not exist, is truncated or is no checkpoint is one line.
    Where other checkpoints lie beside a bad file, :func:`.checkpoints.resume_checkpoint` refuses it, naming those
    that read whole (it reads their weights), so it is left to the run."""
    path = Path(ckpt_path).expanduser()
    if not path.exists() and os.sep not in ckpt_path and "." not in ckpt_path:
        raise CheckpointError(
            f"ckpt_path={ckpt_path} names no file: give a checkpoint's path (a run's {RunDir.CHECKPOINTS}/NAME.ckpt), "
            "or ckpt_path=last to continue the run in this run directory"
        )
    try:
        checkpoint_file(path, "checkpoint")
    except CheckpointError as error:
        if path.is_dir():
            raise
        if any(other.name != path.name for other in path.parent.glob("*.ckpt")):
            return
        raise CheckpointError(f"{error}; {NONE_INTACT.format(path.parent)}") from None


NONE_INTACT = "no other checkpoint in {} reads whole"  # what a bad checkpoint's folder holds besides it


def select_checkpoint(run: RunDir) -> Path:
    """The checkpoint that stands for a run directory: the one its test numbers are for (its metrics.json's
    ``tested_checkpoint``: the best by the monitor, or ``last.ckpt`` where the test split is the validation split), by
    file name inside the run's own folder; else its best (the only ``best-*.ckpt``), else ``last.ckpt``."""
    summary = run.summary()
    if summary is not None and (tested := run.checkpoint_in_folder(summary.tested_checkpoint)).is_file():
        return tested
    if summary is not None and summary.best_checkpoint:
        named = run.checkpoint_in_folder(summary.best_checkpoint)
        if named.is_file():
            return named
    candidates = run.best_checkpoints()
    if len(candidates) > 1:
        raise CheckpointError(
            f"run directory {run.path} has {len(candidates)} best checkpoints "
            f"({', '.join(c.name for c in candidates)}) and its metrics.json does not say which is best; pass the "
            "checkpoint file itself"
        )
    if candidates:
        return candidates[0]
    if run.last_checkpoint.is_file():
        if summary is not None and summary.best_checkpoint:  # tested on a best checkpoint that is gone
            warnings.warn(
                f"{run.path}'s best checkpoint {Path(summary.best_checkpoint).name} is missing: its last.ckpt (the "
                "final weights, not the ones its test numbers are for) is used instead",
                AlternetWarning,
                stacklevel=2,
            )
        return run.last_checkpoint
    raise CheckpointError(
        f"run directory {run.path} has no checkpoints in {run.checkpoints} (did training finish an epoch?)"
    )


def find_checkpoint(path: str | Path) -> tuple[Path, RunDir | None]:
    """The checkpoint a path stands for, and its run directory: a checkpoint file itself, a run directory's
    :func:`select_checkpoint`, or the single ``.ckpt`` of a folder (e.g. a downloaded checkpoint artifact)."""
    path = Path(path).expanduser()
    if path.is_file():
        return path, RunDir.of_checkpoint(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if (run := RunDir(path)).is_run_dir():
        return select_checkpoint(run), run
    ckpts = sorted(path.glob("*.ckpt"))
    if len(ckpts) == 1:
        return ckpts[0], None
    if is_output_of(path, "evaluate") or run.holds_job("evaluate"):
        raise CheckpointError(
            f"{path} is an evaluation's folder (alternet evaluate's), not a model: give the run or checkpoint it scored"
        )
    if (jobs := [job.path.name for job in SweepDir(path).jobs().jobs]) and not run.config.is_file():
        named = f"jobs {', '.join(jobs)}" if len(jobs) <= 8 else f"{len(jobs)} jobs"
        several = ",".join(str(path / job) for job in jobs[:2])
        raise CheckpointError(
            f"{path} is a sweep's folder ({named}), not a run: give one job, e.g. {path / jobs[0]} (alternet evaluate "
            f"takes several: ckpt=[{several}])"
        )
    if run.config.is_file() or run.is_finished():  # a run's records, its checkpoints gone or never written
        exported = (run.export_dir / "config.json").is_file()
        instead = f"its export {run.export_dir} holds its weights" if exported else "it holds no weights to read"
        raise CheckpointError(
            f"run directory {path} has no {RunDir.CHECKPOINTS}/ folder (removed, or the run stopped before its first "
            f"checkpoint): {instead}"
        )
    if ckpts:  # several: which one is the user's to say
        raise CheckpointError(f"{path} holds {len(ckpts)} checkpoints ({', '.join(c.name for c in ckpts)}): pass one")
    export = (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    if (path / "model.safetensors").is_file() and not export:
        raise CheckpointError(
            f"{path} holds model.safetensors but no config.json: an export missing its config (it says the "
            "architecture and classes); export the run again, or give its run directory or a .ckpt file"
        )
    raise CheckpointError(
        f"{path} is an export (model.safetensors, config.json: weights without the run that trained them), not a "
        "checkpoint; give its run directory or a .ckpt file (alternet.hub.load reads the export)"
        if export
        else f"{path} is neither a run directory (no {RunDir.CHECKPOINTS}/ folder) nor a folder with one .ckpt file"
    )
