"""Models built by name: ``create_model`` and ``list_models`` (the zoo's names and any timm model), and the
``create_model`` keywords of a typed model section (:func:`model_args`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import timm
import torch
from timm.models import parse_model_name
from torch import nn

from ..architectures.config import ModelConfig
from ..architectures.named import MODEL_NAMES, base_name
from ..errors import ConfigValueError
from .external import UnknownModelError, check_name, check_output_width, constructor_args
from .guards import check_build_arguments


def list_models() -> list[str]:
    """Names of the models alternet defines (each also a timm model and an ``conf/model`` option)."""
    return sorted(MODEL_NAMES)


def create_model(name: str, **kwargs: Any) -> nn.Module:
    """Build a model by name, exactly as ``timm.create_model`` would: an alternet model or any other timm model,
    with a pretrained tag (``resnet50.a1_in1k``), or a ``hf-hub:`` / ``local-dir:`` source. An unknown
    architecture fails here, listing ours and the closest names."""
    if not isinstance(name, str):
        raise UnknownModelError(
            f"a model's name is a string (alternet_r50, resnet50.a1_in1k, hf-hub:OWNER/REPO), not {name!r}"
        )
    check_build_arguments(kwargs)
    check_name(name, MODEL_NAMES)
    source, location = parse_model_name(name)
    if source == "local-dir" and not (Path(location).expanduser() / "config.json").is_file():
        raise UnknownModelError(
            f"{name}: {location} has no config.json: expected a folder as timm's save_for_hf writes"
        )
    return timm.create_model(name, **kwargs)


def model_args(model: ModelConfig, *, num_classes: int, img_size: int, drop_path_rate: float) -> dict[str, Any]:
    """Keyword arguments for ``create_model(model.name, ...)``: the config's non-null keys over the recipe's
    stochastic depth, with the data's class count and image size (which the config may not contradict); for a
    timm model, only those its constructor takes."""
    given = model.arguments()
    args = {"drop_path_rate": drop_path_rate} | given
    for key, value, source in (
        ("num_classes", num_classes, "data.num_classes"),
        ("img_size", img_size, "data.image_size"),
    ):
        if args.get(key, value) != value:
            raise ConfigValueError(f"model.{key}={args[key]} contradicts {source}={value}; set {source} instead")
        args[key] = value
    if base_name(model.name) in MODEL_NAMES:
        return args
    return constructor_args(model.name, args, given=tuple(given))


_BUILT: set[str] = set()  # the arguments our architectures were built with on the meta device, without an error


def check_builds(model: ModelConfig, *, num_classes: int, img_size: int, drop_path_rate: float) -> None:
    """Build one of alternet's architectures on the meta device (no memory, no weights: milliseconds), so every
    check its constructor makes (the layout, windows and heads at this input size) fails before any data are read
    or, in a sweep, before the first job trains. Another timm model (a user's registered one among them) is built
    there too when it can be, and its output width checked against the class count."""
    args = model_args(model, num_classes=num_classes, img_size=img_size, drop_path_rate=drop_path_rate)
    if base_name(model.name) in MODEL_NAMES:
        key = repr((model.name, sorted(args.items())))
        if key not in _BUILT:  # a sweep's jobs share their model: built once a process
            with torch.device("meta"):
                timm.create_model(model.name, **args)
            _BUILT.add(key)
        return
    if parse_model_name(model.name)[0] is not None:  # a hub or local source: timm resolves it when it builds
        return
    try:
        with torch.device("meta"):
            built = timm.create_model(model.name, **args)
    except Exception:  # an entry point that cannot build on the meta device: its own build says what is wrong
        return
    check_output_width(model.name, built, num_classes, img_size)
