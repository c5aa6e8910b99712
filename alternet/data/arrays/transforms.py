"""Train and eval pipelines of the in-memory arrays (CIFAR, digits): albumentations on uint8 HWC images, ending in a
normalised CHW tensor."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import albumentations as A
import cv2
import numpy as np
from albumentations.pytorch import ToTensorV2

from ..augment import fill_from_mean
from .randaugment import RandAugment


def augmentation_ops(augment: Mapping[str, Any], image_size: int, mean: Sequence[float]) -> list[A.BasicTransform]:
    """The random part of the train pipeline, from the ``arrays`` section of a recipe's ``augment``.

    Keys: ``crop_padding`` (zero-padded random crop), ``hflip`` (bool), ``randaugment`` (timm-style
    spec such as ``rand-m9-n2-mstd1.0``, or null), ``cutout`` (null or ``{holes, size, p}``).
    """
    ops: list[A.BasicTransform] = []
    padding = int(augment.get("crop_padding") or 0)
    if padding:
        padded = image_size + 2 * padding
        ops += [
            A.PadIfNeeded(padded, padded, border_mode=cv2.BORDER_CONSTANT, fill=0),
            A.RandomCrop(image_size, image_size),
        ]
    if augment.get("hflip"):
        ops.append(A.HorizontalFlip(p=0.5))
    if augment.get("randaugment"):
        ops.append(RandAugment.from_config(augment["randaugment"], fill=fill_from_mean(mean)))
    cutout = augment.get("cutout")
    if cutout:
        size = int(cutout.get("size", image_size // 2))
        ops.append(
            A.CoarseDropout(
                num_holes_range=(int(cutout.get("holes", 1)),) * 2,
                hole_height_range=(size, size),
                hole_width_range=(size, size),
                fill=0,
                p=float(cutout.get("p", 1.0)),
            )
        )
    return ops


def build_transform(
    mean: Sequence[float],
    std: Sequence[float],
    image_size: int,
    augment: Mapping[str, Any] | None = None,
) -> A.Compose:
    """Augmentation (train only, when ``augment``, the ``arrays`` section, is given), then normalisation and a CHW
    float tensor."""
    ops = augmentation_ops(augment, image_size, mean) if augment else []
    ops += [A.Normalize(mean=tuple(mean), std=tuple(std), max_pixel_value=255.0), ToTensorV2()]
    return A.Compose(ops)


def reseed(pipeline: A.Compose, seed: int) -> None:
    """Fix the randomness of one sample's augmentation.

    Every transform shares one generator pair seeded with ``seed``: same determinism as
    ``Compose.set_random_seed`` at a seventh of the cost (it builds a generator per transform).
    """
    generator, py_random = np.random.default_rng(seed), random.Random(seed)
    stack: list = [pipeline]
    while stack:
        transform = stack.pop()
        transform.random_generator, transform.py_random = generator, py_random
        stack.extend(getattr(transform, "transforms", ()))
