"""Reading checkpoints safely: ``weights_only=True`` and errors that name the file."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a Lightning/torch checkpoint without unpickling arbitrary objects."""
    path = Path(path).expanduser()
    if not path.is_file():
        hint = f" (a directory; pass a .ckpt inside it, e.g. {path}/checkpoints/last.ckpt)" if path.is_dir() else ""
        raise CheckpointError(f"checkpoint {path} does not exist{hint}")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"checkpoint {path} is unreadable or truncated: not a torch checkpoint archive "
            f"({path.stat().st_size} bytes); it may be an interrupted copy or download"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"checkpoint {path} holds objects that are not plain data and was refused by torch.load(weights_only=True) "
            f"({str(error).splitlines()[0]}). Only load checkpoints from sources you trust."
        ) from error
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(f"checkpoint {path} is unreadable or truncated: {error}") from error
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(f"checkpoint {path} is not a Lightning checkpoint (no 'state_dict' entry)")
    return checkpoint
