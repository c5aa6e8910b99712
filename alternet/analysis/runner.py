"""Running the analyses: ``run_analyses`` and the checks before it (the package's doc says what it writes)."""

from __future__ import annotations

import copy
import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import ImageDataModule
from ..data.augment import section
from ..errors import AlternetWarning
from ..runs.directories import ANALYSIS_DIR
from . import attention, fourier, hessian, landscape, lesion, noise, variance
from .blocks import block_sequence
from .config import ObjectiveConfig, parse_configs
from .context import AnalysisContext, eval_mode, full_float32
from .data import batch_sizes, check_even_batches, split
from .errors import AnalysisConfigError, AnalysisError
from .objective import batch_size_of

log = logging.getLogger(__name__)

_RUNS: dict[str, Callable[[AnalysisContext, Any], dict[str, Any]]] = {
    "fourier": fourier.run,
    "variance": variance.run,
    "lesion": lesion.run,
    "attention": attention.run,
    "hessian": hessian.run,
    "landscape": landscape.run,
    "noise": noise.run,
}
LABELLED = ("lesion", "noise", "hessian", "landscape")  # those that score the outputs against the labels


def check_applicable(names: Sequence[str], model: nn.Module) -> None:
    """Refuse, before any work, an analysis the model gives nothing to measure: attention without an MSA block."""
    if "attention" not in names:
        return
    try:
        blocks = block_sequence(model).blocks
    except AnalysisError:  # a model the instruments cannot read: the analyses say so when they run
        return
    if not any(block.kind == "M" for block in blocks):
        name = (getattr(model, "pretrained_cfg", None) or {}).get("architecture") or type(model).__name__
        raise AnalysisConfigError(
            f"analysis=attention measures MSA blocks, and {name} has none: leave it out of analysis=[...]"
        )


def check_inputs(configs: Mapping[str, Any], model: nn.Module, datamodule: ImageDataModule, recipe: Any) -> None:
    """Refuse, before any work, what the analyses of ``configs`` (typed, :func:`parse_configs`) cannot measure
    on this model, data and recipe (:func:`check_applicable`, :func:`check_data` and the model's classes, the
    objective's recipe and trainable weights), in one line."""
    check_applicable(list(configs), model)
    warn_of_other_preprocessing(model, datamodule)
    classes = getattr(model, "num_classes", None)
    scoring = [name for name in configs if name in LABELLED]
    if scoring and isinstance(classes, int) and classes != datamodule.num_classes:
        raise AnalysisConfigError(
            f"analysis={scoring[0]} scores the model's {classes} outputs against the {datamodule.num_classes} "
            f"classes of {datamodule.name}: give a model with a {datamodule.num_classes}-class head"
        )
    objective = [name for name, config in configs.items() if isinstance(config, ObjectiveConfig)]
    if isinstance(recipe, Mapping):  # a checkpoint's record, as the docs' example reads it before building it
        raise AnalysisConfigError(
            "recipe is a mapping: build the recipe it records first, alternet.typed.build(RecipeConfig, recipe) "
            "(RecipeConfig from alternet.training.config)"
        )
    if objective and recipe is None:
        raise AnalysisConfigError(
            f"analysis={objective[0]} measures the training objective (loss, weight decay, batch size, "
            "augmentation): pass the recipe the model was trained with (recipe=..., a RecipeConfig)"
        )
    if objective and not any(p.requires_grad for p in model.parameters()):
        raise AnalysisConfigError(
            f"analysis={objective[0]} differentiates the loss by the trainable weights, and the model has none: "
            "call model.requires_grad_(True) on the weights to measure"
        )
    if objective and datamodule.augment != (stack := section(recipe.augment, datamodule.augment_section)):
        ours, theirs = (a.to_dict() if a is not None else {} for a in (datamodule.augment, stack))
        differ = [key for key in {**ours, **theirs} if ours.get(key) != theirs.get(key)]
        raise AnalysisConfigError(
            f"analysis={objective[0]} draws training images as the recipe augments them, and the data module's "
            f"augmentation differs from the recipe's ({', '.join(differ) or 'none and a section'}): build it with "
            "augment=recipe.augment"
        )
    check_data(configs, datamodule, recipe)


def warn_of_other_preprocessing(model: nn.Module, datamodule: ImageDataModule) -> None:
    """Warn, in one line, where trained weights (their ``pretrained_cfg`` names the data set they learnt, its
    ``tag``) meet images of another size or normalisation than they were trained on: every number would be of inputs
    the model never saw (a 16 px digits model measured on the data module's default 32 px scored 46% where it has
    96%). A model built afresh records no preprocessing of its own and is measured as given."""
    pretrained = getattr(model, "pretrained_cfg", None) or {}  # timm's record of the weights, not a config
    if not pretrained.get("tag"):
        return
    differ, build = [], []
    size = tuple(pretrained.get("input_size") or ())[-2:]
    if size and size != (datamodule.image_size, datamodule.image_size):
        differ.append(f"{datamodule.image_size} px where it was trained at {'x'.join(map(str, size))}")
        build.append(f"image_size={size[-1]}")
    for key in ("mean", "std"):
        trained, given = pretrained.get(key), getattr(datamodule, key)
        if trained and (len(trained) != len(given) or any(abs(a - b) > 1e-4 for a, b in zip(trained, given))):
            differ.append(f"{key} {tuple(given)} where it was trained with {tuple(trained)}")
            build.append(f"{key}={tuple(trained)}")
    if differ:
        name = pretrained.get("architecture", type(model).__name__)
        warnings.warn(
            f"{name} (weights of {pretrained['tag']}) is measured on images of {'; '.join(differ)}: its numbers are "
            f"of inputs it never saw; build the data module with {', '.join(build)} to measure it as trained",
            AlternetWarning,
            stacklevel=4,
        )


def check_data(configs: Mapping[str, Any], datamodule: ImageDataModule, recipe: Any) -> None:
    """Refuse, once the data is known and before any scoring, what an analysis would refuse only when it runs: a
    mixed objective's odd batch, a noise band that holds no frequency of the test images."""
    train = len(split(datamodule, "train")) if "train" in datamodule.splits else 0
    for name in ("landscape", "hessian"):
        config = configs.get(name)
        if config is None or config.targets != "training" or recipe is None or not recipe.mixup.enabled:
            continue
        size = batch_size_of(config, recipe)
        sizes = batch_sizes(config.images, size, train)
        if name == "hessian" and config.minibatches:
            sizes.append(min(size, train))
        check_even_batches(sizes, name)
    if "noise" in configs:
        height, width = split(datamodule, "test")[0][0].shape[-2:]
        for band in noise.frequency_bands(configs["noise"]):
            noise.band_mask(height, width, band.low, band.high, closed=band.closed)


def run_analyses(
    names: Sequence[str],
    model: nn.Module,
    datamodule: ImageDataModule,
    recipe: Any,
    configs: Mapping[str, Mapping[str, Any]] | None,
    out_dir: Path,
) -> dict[str, dict[str, Any]]:
    """Run each named analysis with its config; return ``{name: summary}``.

    The model runs in eval mode, in full fp32 (no TF32; a model of another dtype is measured as a float32 copy),
    and is left as it was (mode, weights, lesions; the precision settings too). The objective's analyses (hessian,
    landscape) draw the data module's training images with its augmentation, which must be the recipe's
    (``augment=recipe.augment``), and mix them with the recipe's mixup. Every input is checked before any work
    (:func:`check_inputs`). Each summary holds numbers,
    ``seconds`` (wall time) and ``files`` (paths of the CSV and PNGs written under ``out_dir/analysis``).
    """
    names = [names] if isinstance(names, str) else list(names)
    parsed = parse_configs(names, {} if configs is None else configs)  # None: every analysis at its defaults
    check_inputs(parsed, model, datamodule, recipe)
    if any(t.is_floating_point() and t.dtype != torch.float32 for t in (*model.parameters(), *model.buffers())):
        model = copy.deepcopy(model).float()  # the analyses measure in fp32; the caller's model stays as it is
    context = AnalysisContext(model, datamodule, recipe, Path(out_dir) / ANALYSIS_DIR)
    results: dict[str, dict[str, Any]] = {}
    with eval_mode(model), full_float32():
        for name, config in parsed.items():
            log.info("analysis %s: %s", name, config)
            start = time.perf_counter()
            summary = _RUNS[name](context, config)
            results[name] = {**summary, "seconds": time.perf_counter() - start}
            log.info("analysis %s done in %.1f s", name, results[name]["seconds"])
    return results
