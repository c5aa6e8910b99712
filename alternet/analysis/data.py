"""Fixed, seeded analysis samples: clean test images, or augmented training images with frozen augmentations
(optionally mixed by the recipe's mixup/cutmix, as training mixes its batches)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from timm.data import Mixup

from ..data import ArrayDataset, ImageDataModule
from ..data.mixing import recipe_mixup
from ..seeds import derive_seed
from .config import ObjectiveConfig, SampleConfig
from .context import AnalysisContext
from .errors import AnalysisConfigError, AnalysisError

Batch = tuple[torch.Tensor, torch.Tensor]


def split(datamodule: ImageDataModule, name: str) -> ArrayDataset:
    """A split of the data module (``setup()`` is called when needed)."""
    datamodule.setup()
    if name not in datamodule.splits:
        raise AnalysisError(f"the data module has no {name!r} split (it has {sorted(datamodule.splits)})")
    return datamodule.splits[name]


def sample_batches(
    dataset: ArrayDataset, images: int, batch_size: int, seed: int, *, augment: bool, device: torch.device
) -> list[Batch]:
    """``images`` samples (all, if the split is smaller) of a seeded permutation, in batches.

    With ``augment``, each sample's random augmentation is fixed by (``seed``, index), so the same call
    always returns the same tensors; without it, the dataset's transform must be deterministic.
    """
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(dataset), generator=generator)[:images].tolist()
    batches = []
    for start in range(0, len(order), batch_size):
        keys = order[start : start + batch_size]
        items = [dataset[(i, derive_seed(seed, "analysis-sample", i))] if augment else dataset[i] for i in keys]
        x = torch.stack([item[0] for item in items]).to(device)
        y = torch.tensor([item[1] for item in items], device=device)
        batches.append((x, y))
    return batches


def clean_batches(context: AnalysisContext, config: SampleConfig) -> list[Batch]:
    """The config's sample of clean (evaluation-transform) test images, on the context's device."""
    test = split(context.datamodule, "test")
    return sample_batches(test, config.images, config.batch_size, config.seed, augment=False, device=context.device)


def check_even_batches(sizes: Sequence[int], analysis: str) -> None:
    """Mixup pairs the images of a batch: every batch of a mixed objective needs an even size."""
    odd = [size for size in sizes if size % 2]
    if odd:
        raise AnalysisConfigError(
            f"analysis {analysis!r}: the recipe's mixup pairs images within a batch, so every batch needs an even "
            f"size (got {odd[0]}); choose images and batch_size so that each batch is even"
        )


def batch_sizes(images: int, batch_size: int, available: int) -> list[int]:
    """The batches :func:`sample_batches` draws: ``images`` of the ``available`` ones, ``batch_size`` at a time."""
    drawn = min(images, available)
    return [min(batch_size, drawn - start) for start in range(0, drawn, batch_size)]


def mixed_batches(batches: Sequence[Batch], mixer: Mixup, seed: int, analysis: str) -> list[Batch]:
    """Each batch mixed once (a seeded draw per batch): (mixed images, (B, classes) soft targets)."""
    check_even_batches([len(y) for _, y in batches], analysis)
    state = np.random.get_state()  # timm's Mixup draws from NumPy's global generator: seeded here, then restored
    try:
        mixed = []
        for index, (images, labels) in enumerate(batches):
            np.random.seed(derive_seed(seed, "analysis-mixup", index))
            mixed.append(mixer(images.clone(), labels))
    finally:
        np.random.set_state(state)
    return mixed


def training_batches(
    datamodule: ImageDataModule,
    recipe: Any,  # the training recipe (a RecipeConfig)
    targets: str,
    images: int,
    batch_size: int,
    seed: int,
    device: torch.device,
    analysis: str,
) -> list[Batch]:
    """Training images with the recipe's augmentation (crop, flip, RandAugment...); with ``targets="training"``
    also mixed as training mixes them (soft targets) when the recipe uses mixup/cutmix. ``targets="labels"`` keeps
    each image's own label."""
    batches = sample_batches(split(datamodule, "train"), images, batch_size, seed, augment=True, device=device)
    mixer = recipe_mixup(recipe, datamodule.num_classes) if targets == "training" else None
    return batches if mixer is None else mixed_batches(batches, mixer, seed, analysis)


def labels_of(targets: torch.Tensor) -> torch.Tensor:
    """Class labels of hard (B,) or soft (B, classes) targets (a soft target's largest class, as HDVW scores
    accuracy on mixed batches)."""
    return targets.argmax(dim=-1) if targets.ndim == 2 else targets


def objective_batches(
    context: AnalysisContext, config: ObjectiveConfig, images: int, batch_size: int, seed: int
) -> list[Batch]:
    """Training batches for an analysis of the training objective (landscape, Hessian): the config's targets,
    drawn from the context's data with its recipe, on its device."""
    return training_batches(
        context.datamodule, context.recipe, config.targets, images, batch_size, seed, context.device, config.analysis
    )
