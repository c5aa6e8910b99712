"""Reading checkpoints safely: ``weights_only=True``, a digest of the weights checked against the one stored when
they were saved, and errors that name the file."""

from __future__ import annotations

import hashlib
import pickle
import re
import shlex
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, brief_reason
from .checkpoint_files import NONE_INTACT, check_resume_path, checkpoint_file
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


_REFUSED_GLOBAL = re.compile(r"unsupported (?:global: )?GLOBAL ([\w.]+)", re.IGNORECASE)


def refused_global(error: BaseException) -> str | None:
    """The global (``posix.system``) a pickle asked for that ``torch.load(weights_only=True)`` refused, if named."""
    found = _REFUSED_GLOBAL.search(str(error))
    return found[1] if found else None


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a Lightning/torch checkpoint without unpickling arbitrary objects."""
    checkpoint = read_torch_file(path, "checkpoint")
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path} is not a Lightning checkpoint (no 'state_dict' entry)")
    verify_digest(checkpoint["state_dict"], checkpoint.get(DIGEST_KEY), f"checkpoint {path}")
    return checkpoint


def read_torch_file(path: str | Path, what: str) -> Any:
    """A file written by ``torch.save`` (``what``: how messages name it), read with ``weights_only=True``: a file
    that needs arbitrary objects unpickled is refused, naming the first one."""
    path = checkpoint_file(path, what)
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
    if ckpt_path:
        check_resume_path(ckpt_path)  # what the file system tells, as the run's first pass did
        try:
            read_checkpoint(ckpt_path)
        except CheckpointError as error:
            raise CheckpointError(f"{error}; {intact_beside(Path(ckpt_path))}") from None
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
        return NONE_INTACT.format(path.parent)
    names = ", ".join(p.name for p in intact)
    return f"intact beside it: {names}; {use.format(shlex.quote(str(intact[0])))}"
