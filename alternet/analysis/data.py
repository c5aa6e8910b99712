"""Fixed, seeded analysis samples: clean test images, or augmented training images with frozen augmentations."""

from __future__ import annotations

import torch

from ..data import ArrayDataset, ImageDataModule
from ..seeds import derive_seed
from .errors import AnalysisError

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


def clean_batches(
    datamodule: ImageDataModule, images: int, batch_size: int, seed: int, device: torch.device
) -> list[Batch]:
    """Clean (evaluation-transform) test images."""
    return sample_batches(split(datamodule, "test"), images, batch_size, seed, augment=False, device=device)


def augmented_batches(
    datamodule: ImageDataModule, images: int, batch_size: int, seed: int, device: torch.device
) -> list[Batch]:
    """Training images with the recipe's augmentation (crop, flip, RandAugment...; no mixup)."""
    return sample_batches(split(datamodule, "train"), images, batch_size, seed, augment=True, device=device)
