"""Where weights come from: an export directory, a Lightning checkpoint or run directory, a bare safetensors
file, or a W&B artifact reference. Everything is read without unpickling code: safetensors, or
``torch.load(weights_only=True)`` through :func:`alternet.checkpoints.read_checkpoint`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from timm.models import get_pretrained_cfg

from ..checkpoints import read_checkpoint
from ..errors import CheckpointError
from ..training.module import model_kwargs

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
EXPORT_FORMAT = 1
# entity/project/name:version (or project/name:version with the default entity)
ARTIFACT_REF = re.compile(r"^(?:[\w.-]+/){1,2}[\w.-]+:[\w.-]+$")
TRAINING_ONLY_ARGS = ("num_classes", "drop_path_rate")  # set by the caller, or meaningless after training


@dataclass
class Source:
    """Weights with timm key names and, when the source records them, what they are."""

    location: str
    state_dict: dict[str, torch.Tensor]
    architecture: str | None = None
    num_classes: int | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    pretrained_cfg: dict[str, Any] = field(default_factory=dict)
    hyper_parameters: dict[str, Any] = field(default_factory=dict)  # model/recipe/data of a Lightning checkpoint
    checkpoint: Path | None = None
    run_dir: Path | None = None
    ema: bool = False

    def require_architecture(self) -> str:
        if not self.architecture:
            raise CheckpointError(
                f"{self.location} holds weights only; building a model needs its architecture. Use an export "
                f"directory (with {CONFIG_FILE}) or a Lightning checkpoint, or load the weights into a model you "
                "built yourself with alternet.hub.load_pretrained(model, source)"
            )
        return self.architecture


def open_source(source: str | Path, *, ema: bool = False) -> Source:
    """Read ``source``: an export directory, run directory, checkpoint, safetensors file or W&B artifact ref."""
    path = Path(source).expanduser()
    if not path.exists() and isinstance(source, str) and ARTIFACT_REF.match(source):
        from .artifacts import download_artifact

        return _with_location(open_source(download_artifact(source), ema=ema), f"W&B artifact {source}")
    if path.is_dir() and (path / CONFIG_FILE).is_file():
        return _refuse_ema(read_export(path), ema)
    if path.suffix == ".safetensors":
        return _refuse_ema(read_safetensors_source(path), ema)
    if path.is_dir() or path.is_file():
        checkpoint, run_dir = find_checkpoint(path)
        return read_lightning(checkpoint, ema=ema, run_dir=run_dir)
    raise CheckpointError(
        f"{source} does not exist: expected an export directory, a run directory, a checkpoint (.ckpt), "
        "a .safetensors file or a W&B artifact reference entity/project/name:version"
    )


def _with_location(source: Source, location: str) -> Source:
    source.location = f"{location} ({source.location})"
    return source


def _refuse_ema(source: Source, ema: bool) -> Source:
    if ema and not source.ema:
        raise CheckpointError(
            f"{source.location} holds no EMA weights; ema=True applies to Lightning checkpoints of runs with "
            "recipe.ema (or export them with `python -m alternet.hub export RUN --ema`)"
        )
    return source


# Lightning checkpoints and run directories --------------------------------------------------------


def find_checkpoint(path: Path) -> tuple[Path, Path | None]:
    """The checkpoint to read and its run directory: a run directory gives its best checkpoint, else ``last``."""
    if path.is_file():
        run_dir = path.parent.parent
        return path, run_dir if (run_dir / "config.yaml").is_file() else None
    folder = path / "checkpoints"
    if not folder.is_dir():
        ckpts = sorted(path.glob("*.ckpt"))
        if len(ckpts) == 1:  # e.g. a downloaded checkpoint artifact
            return ckpts[0], None
        raise CheckpointError(
            f"{path} is neither a run directory (no checkpoints/ folder), an export directory (no {CONFIG_FILE}) "
            "nor a folder with a single .ckpt file"
        )
    best = _best_checkpoint(path, folder)
    if best is not None:
        return best, path
    if (folder / "last.ckpt").is_file():
        return folder / "last.ckpt", path
    raise CheckpointError(f"run directory {path} has no checkpoints in {folder} (did training finish an epoch?)")


def _best_checkpoint(run_dir: Path, folder: Path) -> Path | None:
    """The best checkpoint named in metrics.json (looked up by name, so moved run directories work), or the
    only ``best-*.ckpt``."""
    metrics = read_json(run_dir / "metrics.json") if (run_dir / "metrics.json").is_file() else {}
    named = metrics.get("best_checkpoint")
    if named and (folder / Path(named).name).is_file():
        return folder / Path(named).name
    candidates = sorted(folder.glob("best-*.ckpt"))
    if len(candidates) > 1:
        raise CheckpointError(
            f"run directory {run_dir} has {len(candidates)} best checkpoints ({', '.join(c.name for c in candidates)}) "
            "and its metrics.json does not say which is best; pass the checkpoint file itself"
        )
    return candidates[0] if candidates else None


def read_lightning(path: Path, *, ema: bool = False, run_dir: Path | None = None) -> Source:
    """A checkpoint written by :class:`alternet.training.module.ClassificationModule`."""
    checkpoint = read_checkpoint(path)
    hparams = checkpoint.get("hyper_parameters") or {}
    if not isinstance(hparams.get("model"), dict) or not isinstance(hparams.get("data"), dict):
        raise CheckpointError(
            f"checkpoint {path} lacks the model and data hyperparameters alternet's ClassificationModule saves; "
            "it was not written by alternet's training"
        )
    prefix = "ema." if ema else "model."
    state_dict = {k[len(prefix) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    if not state_dict:
        what = "EMA weights (the run had no recipe.ema)" if ema else "model weights (no 'model.' keys)"
        raise CheckpointError(f"checkpoint {path} has no {what}")
    model, data = hparams["model"], hparams["data"]
    num_classes = int(data["num_classes"])
    args = model_kwargs(model, num_classes=num_classes, img_size=data["image_size"], drop_path_rate=0.0)
    args = {k: v for k, v in args.items() if k not in TRAINING_ONLY_ARGS and v is not None}
    return Source(
        location=str(path),
        state_dict=state_dict,
        architecture=model["name"],
        num_classes=num_classes,
        model_args=args,
        pretrained_cfg=data_pretrained_cfg(model["name"], data, in_chans=int(args.get("in_chans", 3))),
        hyper_parameters=dict(hparams),
        checkpoint=path,
        run_dir=run_dir,
        ema=ema,
    )


def data_pretrained_cfg(architecture: str, data: dict[str, Any], *, in_chans: int = 3) -> dict[str, Any]:
    """The timm ``pretrained_cfg`` of weights trained on ``data``: the architecture's registry entry (without
    any weight location) with the input size, normalisation and class count of that data."""
    registered = get_pretrained_cfg(architecture)
    cfg = registered.to_dict(remove_source=True) if registered is not None else {}
    size = int(data["image_size"])
    cfg.update(
        input_size=[in_chans, size, size],
        mean=[float(v) for v in data["mean"]],
        std=[float(v) for v in data["std"]],
        num_classes=int(data["num_classes"]),
        tag=data.get("name"),
    )
    cfg.pop("architecture", None)  # config.json names it at the top level, as timm does
    return {k: v for k, v in cfg.items() if v is not None}


# exports and safetensors -------------------------------------------------------------------------


def read_json(path: Path) -> dict[str, Any]:
    try:
        payload = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path} is unreadable or not valid JSON: {error}") from error
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path} should hold a JSON object, found {type(payload).__name__}")
    return payload


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file; a truncated or tampered file is refused with its name."""
    if not path.is_file():
        raise CheckpointError(f"weights file {path} does not exist")
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError) as error:
        raise CheckpointError(
            f"weights file {path} is unreadable, truncated or not a safetensors file ({error}); "
            "it may be an interrupted copy or download"
        ) from error


def read_safetensors_source(path: Path) -> Source:
    """A ``.safetensors`` file: inside an export directory it is that export, otherwise bare weights."""
    if path.name == WEIGHTS_FILE and (path.parent / CONFIG_FILE).is_file():
        return read_export(path.parent)
    return Source(location=str(path), state_dict=read_safetensors(path))


def read_export(directory: Path) -> Source:
    """A directory written by :func:`alternet.hub.export`: ``config.json`` and ``model.safetensors``."""
    config = read_json(directory / CONFIG_FILE)
    missing = [key for key in ("architecture", "num_classes", "pretrained_cfg") if key not in config]
    if missing:
        raise CheckpointError(f"{directory / CONFIG_FILE} lacks {missing}; it is not a timm/alternet model config")
    alternet = config.get("alternet") or {}
    pretrained_cfg = dict(config["pretrained_cfg"])
    if config.get("label_names"):
        pretrained_cfg["label_names"] = list(config["label_names"])
    return Source(
        location=str(directory),
        state_dict=read_safetensors(directory / WEIGHTS_FILE),
        architecture=str(config["architecture"]),
        num_classes=int(config["num_classes"]),
        model_args=dict(config.get("model_args") or {}),
        pretrained_cfg=pretrained_cfg,
        ema=bool(alternet.get("ema", False)),
    )
