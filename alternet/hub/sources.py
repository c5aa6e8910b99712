"""Where weights come from: an export directory, a Lightning checkpoint or run directory, a bare safetensors file, a W&B
artifact reference, a checkpoint of the paper's authors (``hdvw:[ARCH:]FILE``), or one of timm's: ``timm:NAME`` (its
registry's pretrained weights), ``hf-hub:REPO`` and ``local-dir:DIR`` (a folder in the format of timm's ``save_for_hf``,
which is also an export's). Everything is read without unpickling code: safetensors, or
``torch.load(weights_only=True)``; a run directory stands for the checkpoint
:func:`alternet.runs.checkpoint_files.find_checkpoint` picks, as for every other command. Hub downloads go through the
Hugging Face cache, so a model fetched once loads offline.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import constants as hub_constants
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from timm.data import resolve_data_config
from timm.models import get_pretrained_cfg, is_model
from torch import nn

from .. import __version__
from ..architectures.config import recorded_label
from ..architectures.named import spec_kwargs
from ..dataset_facts import FACTS, DataFacts
from ..errors import CheckpointError, is_integer, one_line
from ..files import read_json
from ..models import MODEL_NAMES, create_model
from ..models.external import check_name, require_pretrained, weights_location
from ..runs.checkpoint_files import find_checkpoint
from ..runs.checkpoints import DIGEST_KEY, intact_beside, read_torch_file, verify_digest, weights_digest
from ..runs.directories import RunDir
from ..runs.weights import NoEmaWeights, read_weights, saved_recipe
from ..tracking import download_artifact
from ..typed import conforms
from .hdvw import ALIASES, ARCHS, read_converted
from .references import (
    ARTIFACT_REF,
    CONFIG_FILE,
    HDVW_PREFIX,
    HF_HUB_PREFIX,
    KINDS,
    LOCAL_DIR_PREFIX,
    TIMM_PREFIX,
    TORCH_WEIGHTS_FILE,
    WEIGHTS_FILE,
    check_named,
)

EXPORT_FORMAT = 1
MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # a registered architecture (and tag), as a file may name it


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
    run: RunDir | None = None  # the run directory that holds the checkpoint
    ema: bool = False
    model: nn.Module | None = None  # already built with these weights (timm:NAME, which timm builds to load)

    def require_architecture(self) -> str:
        if not self.architecture:
            raise CheckpointError(
                f"{self.location} holds weights only; building a model needs its architecture. Use an export "
                f"directory (with {CONFIG_FILE}) or a Lightning checkpoint, or load the weights into a model you "
                "built yourself with alternet.hub.load_pretrained(model, source)"
            )
        return self.architecture

    def label(self) -> str:
        """The model as its training run recorded it (:meth:`~alternet.architectures.config.ModelConfig.label`:
        its name and the architecture keys its config changed), else the architecture's name."""
        return recorded_label(self.hyper_parameters.get("model"), self.require_architecture())


def open_source(source: str | Path, *, ema: bool = False) -> Source:
    """Read ``source``: any of :data:`KINDS`."""
    if not isinstance(source, str | os.PathLike):  # None or a number: os.fspath's bare TypeError, naming no argument
        raise TypeError(f"a model source is a path or a reference string ({KINDS}), not {type(source).__name__}")
    if not str(source).strip():  # "" is the current directory to Path
        raise CheckpointError(f"an empty source names no model: expected {KINDS}")
    if isinstance(source, str) and source.startswith((HDVW_PREFIX, TIMM_PREFIX, HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        if source.startswith(HDVW_PREFIX):
            return _refuse_ema(read_hdvw_source(*split_hdvw_reference(source)), ema)
        if source.startswith(TIMM_PREFIX):
            return _refuse_ema(read_timm(source.removeprefix(TIMM_PREFIX)), ema)
        if source.startswith(HF_HUB_PREFIX):
            return _refuse_ema(read_hf_hub(source.removeprefix(HF_HUB_PREFIX)), ema)
        return _refuse_ema(read_local_dir(Path(source.removeprefix(LOCAL_DIR_PREFIX)).expanduser()), ema)
    path = Path(source).expanduser()
    if not path.exists() and isinstance(source, str) and ARTIFACT_REF.match(source):
        opened = open_source(download_artifact(source), ema=ema)
        opened.location = f"W&B artifact {source} ({opened.location})"
        return opened
    if path.is_dir() and (path / CONFIG_FILE).is_file():
        return _refuse_ema(read_export(path), ema)
    if path.suffix == ".safetensors":
        return _refuse_ema(read_safetensors_source(path), ema)
    if path.is_dir() or path.is_file():
        checkpoint, run = find_checkpoint(path)
        try:
            return read_lightning(checkpoint, ema=ema, run=run)
        except CheckpointError as error:
            if run is None or not path.is_dir():  # a file named by the user: theirs to choose another
                raise
            if isinstance(error, NoEmaWeights):  # true of every checkpoint of the run: none to advise
                raise
            beside = intact_beside(checkpoint, "pass one of them by its path instead (the newest: {})")
            raise CheckpointError(f"{error}; {beside}") from None
    raise CheckpointError(f"{source} does not exist: expected {KINDS}")


def check_reference(source: str | Path) -> None:
    """Refuse ``source`` when it can be told without reading or downloading weights that it names nothing (so
    a list of models fails before the first is scored): what :func:`~.references.check_named` tells, a run
    directory without checkpoints or a file that is no checkpoint, an unknown timm model or tag, a missing HDVW
    file."""
    check_named(source)
    text = str(source)
    if text.startswith(TIMM_PREFIX):
        check_name(text.removeprefix(TIMM_PREFIX), MODEL_NAMES)
        weights_location(text.removeprefix(TIMM_PREFIX), text, TIMM_ADVICE)
    elif text.startswith(HDVW_PREFIX) and not (path := Path(split_hdvw_reference(text)[0])).expanduser().exists():
        raise CheckpointError(f"{text}: {path} does not exist")


def _refuse_ema(source: Source, ema: bool) -> Source:
    if ema and not source.ema:
        raise CheckpointError(
            f"{source.location} holds no EMA weights; their choice (alternet evaluate use_ema=true, ema=True in "
            "Python) applies to Lightning checkpoints of runs with recipe.ema (or export them with `alternet export "
            "RUN --ema`)"
        )
    return source


# Lightning checkpoints and run directories --------------------------------------------------------


def read_lightning(path: Path, *, ema: bool = False, run: RunDir | None = None) -> Source:
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
        run=run,
        ema=ema,
    )


# as the data sections name them
PREPROCESSING_KEYS = ("image_size", "mean", "std", "crop_pct", "crop_mode", "interpolation")


def preprocessing(source: Source) -> dict[str, Any]:
    """The input the model expects at test time, in the data section's keys: its training data's (a model alternet
    trained records them), else what timm's ``validate.py`` resolves from its ``pretrained_cfg``: the *test* input
    size and crop where the weights have them (``test_input_size``, ``test_crop_pct``: ``resnet50.a1_in1k`` trains
    at 224 px and is scored at 288 px, crop 1.0), the crop mode and interpolation. A non-square size is left
    out."""
    data = source.hyper_parameters.get("data") or {}
    if data.get("image_size") is not None:
        return {key: data[key] for key in PREPROCESSING_KEYS if data.get(key) is not None}
    resolved = resolve_data_config(pretrained_cfg=source.pretrained_cfg, use_test_size=True)
    height, width = resolved["input_size"][1:]
    return {
        **({"image_size": int(height)} if height == width else {}),
        "mean": [float(v) for v in resolved["mean"]],
        "std": [float(v) for v in resolved["std"]],
        "crop_pct": float(resolved["crop_pct"]),
        "crop_mode": str(resolved["crop_mode"]),
        "interpolation": str(resolved["interpolation"]),
    }


OTHER_WEIGHTS_KEYS = ("test_input_size", "test_crop_pct", "pool_size", "test_pool_size", "origin_url", "license")


def data_pretrained_cfg(architecture: str, data: DataFacts, *, in_chans: int = 3) -> dict[str, Any]:
    """The timm ``pretrained_cfg`` of weights trained on ``data``: the architecture's registry entry (without
    any weight location, nor what describes the registry's own weights: their test size and crop, licence) with
    the input size, normalisation, class count and evaluation resize of that data (arrays: the whole image)."""
    registered = get_pretrained_cfg(architecture)
    cfg = registered.to_dict(remove_source=True) if registered is not None else {}
    for key in OTHER_WEIGHTS_KEYS:  # resnet50's: scored at 288 px, crop 1.0, which a 32-px CIFAR model is not
        cfg.pop(key, None)
    size = int(data.image_size)
    cfg.update(
        input_size=[in_chans, size, size],
        mean=[float(v) for v in data.mean],
        std=[float(v) for v in data.std],
        num_classes=int(data.num_classes),
        tag=data.name,
        crop_pct=1.0 if data.crop_pct is None else float(data.crop_pct),
        crop_mode=data.crop_mode or "center",
        interpolation=data.interpolation or "bilinear",
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


def read_export(directory: Path, location: str | None = None) -> Source:
    """A directory in the format of timm's ``save_for_hf``: ``config.json`` and ``model.safetensors`` (or
    ``pytorch_model.bin``). Written by :func:`alternet.hub.export`, its ``alternet`` section also says what the
    model was trained on and how."""
    config = read_json(directory / CONFIG_FILE, error=CheckpointError)
    missing = [key for key in ("architecture", "num_classes", "pretrained_cfg") if key not in config]
    if missing:
        raise CheckpointError(f"{directory / CONFIG_FILE} lacks {missing}; it is not a timm/alternet model config")
    if not is_integer(config["num_classes"], 0):  # a hand-edited "ten" was int()'s traceback
        raise CheckpointError(
            f"{directory / CONFIG_FILE} says num_classes={config['num_classes']!r}, not a class count (an integer "
            ">= 0): it is not a timm/alternet model config, or it was edited; export the model again"
        )
    architecture = config["architecture"]
    if not isinstance(architecture, str) or not MODEL_NAME.fullmatch(architecture):  # never a source to fetch
        raise CheckpointError(
            f"{directory / CONFIG_FILE} names the architecture {architecture!r}, which is not a model name (letters, "
            "digits, '_', '.' and '-'; no hub or folder source): it is not a timm/alternet model config"
        )
    alternet = config.get("alternet") or {}
    written = alternet.get("format", EXPORT_FORMAT)
    if not is_integer(written, 1) or written > EXPORT_FORMAT:
        raise CheckpointError(
            f"{directory / CONFIG_FILE} is in export format {written!r}, which this alternet ({__version__}, format "
            f"{EXPORT_FORMAT}) does not read: it was written by a newer alternet; upgrade alternet to load it"
        )
    if (imports := alternet.get("imports")) and not is_model(architecture):  # the user's model, not imported here
        modules = ",".join(map(str, imports))
        raise CheckpointError(
            f"{directory} holds a {architecture}, a model its run registered with imports=[{modules}]: import them "
            f"first (on alternet's command line: imports=[{modules}]; in Python: import {modules})"
        )
    pretrained_cfg = _checked_pretrained_cfg(directory / CONFIG_FILE, config)
    state_dict = read_export_weights(directory)
    _check_one_export(directory, alternet.get(DIGEST_KEY), state_dict)
    return Source(
        location=location or str(directory),
        state_dict=state_dict,
        architecture=str(config["architecture"]),
        num_classes=int(config["num_classes"]),
        model_args={k: v for k, v in (config.get("model_args") or {}).items() if k != "num_classes"},  # top level
        pretrained_cfg=pretrained_cfg,
        hyper_parameters={key: alternet[key] for key in ("model", "data") if alternet.get(key)}
        | ({"recipe": saved_recipe(alternet["recipe"])} if alternet.get("recipe") else {}),
        ema=bool(alternet.get("ema", False)),
    )


def _checked_pretrained_cfg(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The export's ``pretrained_cfg`` with its ``label_names``, refused where a reader of it would go wrong: a
    name list of another length than the head's classes (a prediction with no name), or a normalisation that is
    not one number per channel, finite, with every std above 0 (torchvision's "std evaluated to zero" later; none
    at all leaves timm's defaults)."""
    cfg = config["pretrained_cfg"]
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{path} holds a pretrained_cfg that is not a mapping: export the model again")
    mean, std = cfg.get("mean"), cfg.get("std")
    finite = [bool(v) and conforms(v, list[float]) for v in (mean, std)]  # numbers, none of them inf or nan
    if (mean, std) != (None, None) and (not all(finite) or len(mean) != len(std) or min(std) <= 0):
        raise CheckpointError(
            f"{path} says mean={mean!r}, std={std!r}: a model's normalisation is one finite number per "
            "channel for each, every std above 0; it was edited: export the model again"
        )
    cfg = labelled(cfg, config.get("label_names"))
    names, classes = cfg.get("label_names"), int(config["num_classes"])
    if names and classes and len(names) != classes:
        raise CheckpointError(
            f"{path} names {len(names)} classes in label_names for a head of {classes}: they cannot be its classes' "
            "names; it was edited: export the model again"
        )
    return cfg


def _check_one_export(directory: Path, recorded: str | None, state_dict: dict[str, torch.Tensor]) -> None:
    """The config and the weights are of one export: the weights' digest that ``config.json`` records (exports
    since it does) is the one ``model.safetensors`` carries (already checked against its tensors), or, where the
    weights carry none (``pytorch_model.bin``, metadata stripped), the one of the tensors read."""
    if not recorded:
        return
    held = None
    if (directory / WEIGHTS_FILE).is_file():
        with safe_open(str(directory / WEIGHTS_FILE), framework="pt") as opened:
            held = (opened.metadata() or {}).get(DIGEST_KEY)
    if held is None:
        held = weights_digest(state_dict)
    if held != recorded:
        weights = WEIGHTS_FILE if (directory / WEIGHTS_FILE).is_file() else TORCH_WEIGHTS_FILE
        raise CheckpointError(
            f"{directory} mixes the files of two exports: its {CONFIG_FILE} describes other weights than its "
            f"{weights} holds (a copy over an older export, or one written before exports were made whole); "
            "export the model again into it"
        )


def read_export_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / WEIGHTS_FILE).is_file() or not (directory / TORCH_WEIGHTS_FILE).is_file():
        return read_safetensors(directory / WEIGHTS_FILE)
    tensors = read_torch_file(directory / TORCH_WEIGHTS_FILE, "weights file")
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        raise CheckpointError(f"{directory / TORCH_WEIGHTS_FILE} is not a state dict (names to tensors)")
    return tensors


def labelled(cfg: dict[str, Any], names: Any) -> dict[str, Any]:
    """``cfg`` with timm's ``label_names`` ``names`` as a list of strings: they are a list, or a dict from class index
    to name (left out when its indices have gaps: no name for every class)."""
    if isinstance(names, dict):
        keys = [str(k) for k in names]
        indices = sorted(int(k) for k in keys) if all(k.isdecimal() for k in keys) else None
        names = [names.get(i, names.get(str(i))) for i in indices] if indices == list(range(len(names))) else None
    return {**cfg, "label_names": [str(name) for name in names]} if names else dict(cfg)


# timm's sources: the registry, the Hugging Face hub, a local folder ---------------------------------


def read_local_dir(directory: Path) -> Source:
    if not (directory / CONFIG_FILE).is_file():
        raise CheckpointError(
            f"{LOCAL_DIR_PREFIX}{directory} has no {CONFIG_FILE}: expected a folder as timm's save_for_hf or "
            f"alternet export writes it ({CONFIG_FILE} and {WEIGHTS_FILE} or {TORCH_WEIGHTS_FILE})"
        )
    return read_export(directory, f"{LOCAL_DIR_PREFIX}{directory}")


def _hub_reason(reference: str, error: BaseException) -> CheckpointError:
    reason = one_line(error) or type(error).__name__
    return CheckpointError(
        f"{reference} could not be read: {reason[:300]}. Offline, it must be in the Hugging Face cache "
        f"({hub_constants.HF_HUB_CACHE}, HF_HOME moves it): load it once with network access"
    )


def read_hf_hub(repo: str) -> Source:
    """``hf-hub:OWNER/REPO[@REVISION]``: its ``config.json`` and weights, through the Hugging Face cache."""
    repo_id, _, revision = repo.partition("@")
    reference = f"{HF_HUB_PREFIX}{repo}"
    try:
        config = Path(hf_hub_download(repo_id, CONFIG_FILE, revision=revision or None))
        try:
            hf_hub_download(repo_id, WEIGHTS_FILE, revision=revision or None)
        except EntryNotFoundError:  # an older repository: pytorch_model.bin only
            hf_hub_download(repo_id, TORCH_WEIGHTS_FILE, revision=revision or None)
    except (OSError, ValueError) as error:
        raise _hub_reason(reference, error) from None
    return read_export(config.parent, reference)


TIMM_ADVICE = "timm.list_pretrained() lists the weights timm has"


def read_timm(name: str) -> Source:
    """``timm:NAME``: timm builds the model and loads its registry's pretrained weights (from the Hugging Face
    cache or the torch hub cache when offline)."""
    check_name(name, MODEL_NAMES)
    require_pretrained(name, f"{TIMM_PREFIX}{name}", TIMM_ADVICE, or_else=None)  # cached or reachable, or one line
    try:
        model = create_model(name, pretrained=True)
    except (OSError, RuntimeError, ValueError) as error:
        raise _hub_reason(f"{TIMM_PREFIX}{name}", error) from None
    cfg = labelled(model.pretrained_cfg, model.pretrained_cfg.get("label_names"))
    return Source(
        location=f"{TIMM_PREFIX}{name}",
        state_dict=model.state_dict(),
        architecture=str(cfg.get("architecture") or name.partition(".")[0]),
        num_classes=int(model.num_classes),
        pretrained_cfg=cfg,
        model=model.eval(),
    )


# checkpoints of the paper's authors -----------------------------------------------------------------


def split_hdvw_reference(reference: str) -> tuple[str, str | None]:
    """``hdvw:ARCH:FILE`` -> (FILE, ARCH); ``hdvw:FILE`` -> (FILE, None): the file's own model name decides. An ARCH
    HDVW has not (``hdvw:resnet50:FILE``, FILE there) is refused in one line, not taken for part of a missing file."""
    rest = reference.removeprefix(HDVW_PREFIX)
    arch, separator, path = rest.partition(":")
    if separator and (arch in ARCHS or arch in ALIASES):
        return path, arch
    if separator and not Path(rest).expanduser().exists() and Path(path).expanduser().exists():
        raise CheckpointError(f"{reference}: {arch!r} is not an architecture of HDVW's; one of {', '.join(ARCHS)}")
    return rest, None


def read_hdvw_source(path: str | Path, arch: str | None = None, data: str | None = None) -> Source:
    """A checkpoint saved by HDVW (the paper's code) as our weights, with the model and data they belong to."""
    converted = read_converted(path, arch, data)
    facts = replace(FACTS[converted.data], num_classes=converted.num_classes)
    architecture = converted.arch.architecture
    args = spec_kwargs(architecture) | converted.model_args  # the full architecture, as a Lightning checkpoint's,
    args = {k: v for k, v in args.items() if v is not None}  # its automatic settings left automatic
    return Source(
        location=str(Path(path).expanduser()),
        state_dict=converted.state_dict,
        architecture=architecture,
        num_classes=converted.num_classes,
        model_args=args,
        pretrained_cfg=data_pretrained_cfg(architecture, facts),
        hyper_parameters={
            "model": {"name": architecture, **args},
            "data": facts.to_dict(),
            "recipe": {},
            "hdvw": {"arch": converted.arch.hdvw, "name": converted.hdvw_name, "origin": converted.arch.origin},
        },
        checkpoint=Path(path).expanduser(),
    )
