"""Where weights come from: an export directory, a Lightning checkpoint or run directory, a bare safetensors
file, a W&B artifact reference, or a checkpoint of the paper's authors (``hdvw:[ARCH:]FILE``). Everything is read
without unpickling code: safetensors, or ``torch.load(weights_only=True)`` through :func:`alternet.runs.read_weights`
and :func:`alternet.hub.hdvw.read_hdvw`; a run directory stands for the checkpoint
:func:`alternet.runs.find_checkpoint` picks, as for every other command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from timm.models import get_pretrained_cfg

from ..checkpoints import DIGEST_KEY, verify_digest
from ..dataset_facts import FACTS
from ..errors import CheckpointError
from ..files import read_json
from ..models.zoo import spec_kwargs
from ..runs import find_checkpoint, read_weights
from ..tracking import download_artifact
from .hdvw import ALIASES, ARCHS, read_converted

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
EXPORT_FORMAT = 1
# entity/project/name:version (or project/name:version with the default entity)
ARTIFACT_REF = re.compile(r"^(?:[\w.-]+/){1,2}[\w.-]+:[\w.-]+$")
HDVW_PREFIX = "hdvw:"  # hdvw:FILE or hdvw:ARCH:FILE, a checkpoint saved by the paper's code (alternet.hub.hdvw)


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
    if isinstance(source, str) and source.startswith(HDVW_PREFIX):
        return _refuse_ema(read_hdvw_source(*split_hdvw_reference(source)), ema)
    path = Path(source).expanduser()
    if not path.exists() and isinstance(source, str) and ARTIFACT_REF.match(source):
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
        "a .safetensors file, a W&B artifact reference entity/project/name:version or hdvw:[ARCH:]FILE"
    )


def _with_location(source: Source, location: str) -> Source:
    source.location = f"{location} ({source.location})"
    return source


def _refuse_ema(source: Source, ema: bool) -> Source:
    if ema and not source.ema:
        raise CheckpointError(
            f"{source.location} holds no EMA weights; ema=True applies to Lightning checkpoints of runs with "
            "recipe.ema (or export them with `alternet export RUN --ema`)"
        )
    return source


# Lightning checkpoints and run directories --------------------------------------------------------


def read_lightning(path: Path, *, ema: bool = False, run_dir: Path | None = None) -> Source:
    """A checkpoint written by alternet's training."""
    weights = read_weights(path, ema=ema)
    args = {k: v for k, v in weights.model_args.items() if v is not None}
    return Source(
        location=str(path),
        state_dict=weights.state_dict,
        architecture=weights.architecture,
        num_classes=weights.num_classes,
        model_args=args,
        pretrained_cfg=data_pretrained_cfg(weights.architecture, weights.data, in_chans=int(args.get("in_chans", 3))),
        hyper_parameters=weights.hyper_parameters,
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


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file; a truncated or tampered file is refused with its name."""
    if not path.is_file():
        raise CheckpointError(f"weights file {path} does not exist")
    try:
        tensors = load_file(str(path), device="cpu")
        with safe_open(str(path), framework="pt") as opened:
            metadata = opened.metadata() or {}
    except (SafetensorError, OSError) as error:
        raise CheckpointError(
            f"weights file {path} is unreadable, truncated or not a safetensors file ({error}); "
            "it may be an interrupted copy or download"
        ) from error
    verify_digest(tensors, metadata.get(DIGEST_KEY), f"weights file {path}")
    return tensors


def read_safetensors_source(path: Path) -> Source:
    """A ``.safetensors`` file: inside an export directory it is that export, otherwise bare weights."""
    if path.name == WEIGHTS_FILE and (path.parent / CONFIG_FILE).is_file():
        return read_export(path.parent)
    return Source(location=str(path), state_dict=read_safetensors(path))


def read_export(directory: Path) -> Source:
    """A directory written by :func:`alternet.hub.export`: ``config.json`` and ``model.safetensors``."""
    config = read_json(directory / CONFIG_FILE, error=CheckpointError)
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


# checkpoints of the paper's authors -----------------------------------------------------------------


def split_hdvw_reference(reference: str) -> tuple[str, str | None]:
    """``hdvw:ARCH:FILE`` -> (FILE, ARCH); ``hdvw:FILE`` -> (FILE, None): the file's own model name decides."""
    rest = reference.removeprefix(HDVW_PREFIX)
    arch, separator, path = rest.partition(":")
    return (path, arch) if separator and (arch in ARCHS or arch in ALIASES) else (rest, None)


def read_hdvw_source(path: str | Path, arch: str | None = None, data: str | None = None) -> Source:
    """A checkpoint saved by HDVW (the paper's code) as our weights, with the model and data they belong to."""
    converted = read_converted(path, arch, data)
    facts = FACTS[converted.data]
    data_facts = {
        "name": converted.data,
        "num_classes": converted.num_classes,
        "image_size": facts.image_size,
        "mean": list(facts.mean),
        "std": list(facts.std),
    }
    architecture = converted.arch.architecture
    args = spec_kwargs(architecture) | converted.model_args  # the full architecture, as a Lightning checkpoint's
    return Source(
        location=str(Path(path).expanduser()),
        state_dict=converted.state_dict,
        architecture=architecture,
        num_classes=converted.num_classes,
        model_args=args,
        pretrained_cfg=data_pretrained_cfg(architecture, data_facts),
        hyper_parameters={
            "model": {"name": architecture, **args},
            "data": data_facts,
            "recipe": {},
            "hdvw": {"arch": converted.arch.hdvw, "name": converted.hdvw_name, "origin": converted.arch.origin},
        },
        checkpoint=Path(path).expanduser(),
    )
