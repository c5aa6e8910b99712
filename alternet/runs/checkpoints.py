"""Reading checkpoints safely: ``weights_only=True``, a digest of the weights checked against the one stored when
they were saved, and errors that name the file."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import shlex
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from ..errors import AlternetWarning, CheckpointError
from .directories import RunDir

DIGEST_KEY = "weights_digest"  # in Lightning checkpoints; also in the metadata of exported safetensors


def to_host(tree: Any) -> Any:
    """``tree`` (a checkpoint's nested dicts, lists and tuples) with every tensor on a GPU copied to host memory in
    one pass: each copy is queued without waiting (into pinned memory, which torch allocates for a non-blocking copy
    to the CPU and caches for the next checkpoint) and the host waits once, at the end. ``torch.save`` and the digest
    would otherwise copy each of a model's and its optimizer's ~300 tensors with a sync of its own."""
    queued = False

    def visit(node: Any) -> Any:  # a container is rebuilt only when a tensor in it moved
        nonlocal queued
        if isinstance(node, torch.Tensor) and node.device.type != "cpu":
            queued = True
            return node.detach().to("cpu", non_blocking=True)
        if isinstance(node, dict):
            items = {key: visit(value) for key, value in node.items()}
            return type(node)(items) if any(items[k] is not node[k] for k in node) else node
        if isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
            values = [visit(value) for value in node]
            return type(node)(values) if any(a is not b for a, b in zip(values, node, strict=True)) else node
        return node

    moved = visit(tree)
    if queued and torch.cuda.is_available():
        torch.cuda.synchronize()
    return moved


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """BLAKE2b of every tensor's name, dtype, shape and bytes, in name order: any flipped or zeroed byte changes it."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(state_dict):
        tensor = state_dict[name]
        if not isinstance(tensor, torch.Tensor):
            continue
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def verify_digest(state_dict: dict[str, torch.Tensor], expected: str | None, path: str | Path) -> None:
    """Raise a CheckpointError naming ``path`` when the weights are not the ones that were saved."""
    if expected and weights_digest(state_dict) != expected:
        raise CheckpointError(
            f"{path} is corrupt: its weights differ from the digest stored when it was saved (bit rot, a damaged "
            "copy or a partial overwrite); use another copy or checkpoint (e.g. best-*.ckpt or an export)"
        )


ZIP_MAGIC = b"PK\x03\x04"  # how torch.save's zip archive begins
_REFUSED_GLOBAL = re.compile(r"unsupported (?:global: )?GLOBAL ([\w.]+)", re.IGNORECASE)
_ENFORCE = re.compile(r"^\[enforce fail at [^\]]*\][\s.]*")


def refused_global(error: BaseException) -> str | None:
    """The global (``posix.system``) a pickle asked for that ``torch.load(weights_only=True)`` refused, if named."""
    found = _REFUSED_GLOBAL.search(str(error))
    return found[1] if found else None


def brief_reason(error: BaseException) -> str:
    """The first line of a library's reason (torch's, for a file it cannot read: without its C++ source location),
    short enough for a one-line error."""
    text = str(error).strip()
    return _ENFORCE.sub("", text.splitlines()[0])[:200] if text else type(error).__name__


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a Lightning/torch checkpoint without unpickling arbitrary objects."""
    checkpoint = read_torch_file(path, "checkpoint")
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path} is not a Lightning checkpoint (no 'state_dict' entry)")
    verify_digest(checkpoint["state_dict"], checkpoint.get(DIGEST_KEY), f"checkpoint {path}")
    return checkpoint


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


def read_torch_file(path: str | Path, what: str) -> Any:
    """A file written by ``torch.save`` (``what``: how messages name it), read with ``weights_only=True``: a file
    that needs arbitrary objects unpickled is refused, naming the first one."""
    path = Path(path).expanduser()
    if path.is_dir():
        inside = sorted(RunDir(path).checkpoint_files(), key=lambda p: p.name != RunDir.LAST)  # last.ckpt first
        found = f", e.g. {inside[0]} (of {', '.join(p.name for p in inside)})" if inside else " file"
        raise CheckpointError(f"{what} {path} is a directory, not a checkpoint: pass a .ckpt{found}")
    if not path.is_file():
        raise CheckpointError(f"{what} {path} does not exist")
    check_archive(path, what)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = refused_global(error)
        objects = f"an object of {found}, which" if found else "objects that"
        raise CheckpointError(
            f"{what} {path} holds {objects} torch.load(weights_only=True) refuses to unpickle: it is not a plain "
            "checkpoint of tensors and settings. Only load checkpoints from sources you trust"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(f"{what} {path} is unreadable or truncated: {brief_reason(error)}") from None


def checkpoint_header(path: str | Path) -> dict[str, Any]:
    """A (safe, already checked) Lightning checkpoint memory-mapped: its hyperparameters and counters without reading
    the weights."""
    return torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)


# which checkpoint stands for a run ---------------------------------------------------------------------------


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


def resume_checkpoint(ckpt_path: str | None, run: RunDir, *, say: bool = True) -> str | None:
    """The checkpoint a training run resumes from. ``last`` means the run directory's ``last.ckpt`` when it exists
    (a requeued SLURM job; when it does not, training starts afresh, from ``model.pretrained`` where set, and, if
    ``say``, says so); any other path is checked now, so that a bad one fails before training."""
    if ckpt_path == "last":
        if not run.last_checkpoint.is_file():
            if say:
                print(f"ckpt_path=last: no {run.last_checkpoint} yet, so training starts afresh", file=sys.stderr)
            return None
        ckpt_path = str(run.last_checkpoint)
    if ckpt_path and not Path(ckpt_path).expanduser().exists() and os.sep not in ckpt_path and "." not in ckpt_path:
        raise CheckpointError(  # ckpt_path=best, LAST: a word, not a file
            f"ckpt_path={ckpt_path} names no file: give a checkpoint's path (a run's {RunDir.CHECKPOINTS}/NAME.ckpt), "
            "or ckpt_path=last to continue the run in this run directory"
        )
    if ckpt_path:
        try:
            read_checkpoint(ckpt_path)
        except CheckpointError as error:
            beside = "" if Path(ckpt_path).is_dir() else f"; {intact_beside(Path(ckpt_path))}"
            raise CheckpointError(f"{error}{beside}") from None
    return ckpt_path


def intact_beside(path: Path, use: str = "resume from the newest with ckpt_path={}") -> str:
    """Which other checkpoints in ``path``'s folder read whole (the digest checked), as advice to ``use`` one (the
    newest's path in place of ``{}``)."""
    intact = []
    for other in sorted(path.parent.glob("*.ckpt"), key=lambda p: p.stat().st_mtime, reverse=True):
        if other.name != path.name and other.is_file():
            try:
                read_checkpoint(other)
            except CheckpointError:
                continue
            intact.append(other)
    if not intact:
        return f"no other checkpoint in {path.parent} reads whole"
    names = ", ".join(p.name for p in intact)
    return f"intact beside it: {names}; {use.format(shlex.quote(str(intact[0])))}"
