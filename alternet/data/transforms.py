"""Train and eval pipelines ending in a normalised CHW tensor: albumentations on in-memory uint8 arrays (CIFAR,
digits), timm's ImageNet pipeline on decoded image files (image folders, ImageNet, shards)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import albumentations as A
import cv2
import numpy as np
from albumentations.pytorch import ToTensorV2
from timm.data import create_transform

from ..errors import ConfigValueError
from .randaugment import RandAugment

# augment keys each pipeline uses; a key of the other pipeline set to a non-default value is an error
ARRAY_ONLY = {"crop_padding": 0, "cutout": None}
FILE_ONLY = {"random_resized_crop": None, "random_erasing": 0.0}


def _fill(mean: Sequence[float]) -> tuple[int, ...]:
    return tuple(round(255 * m) for m in mean)


def augmentation_ops(augment: Mapping[str, Any], image_size: int, mean: Sequence[float]) -> list[A.BasicTransform]:
    """The random part of the train pipeline, from a recipe's ``augment`` section.

    Keys: ``crop_padding`` (zero-padded random crop), ``hflip`` (bool), ``randaugment`` (timm-style
    spec such as ``rand-m9-n2-mstd1.0``, or null), ``cutout`` (null or ``{holes, size, p}``).
    """
    _reject(augment, FILE_ONLY, "in-memory array data sets (CIFAR, digits)", "crop_padding / cutout")
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
        ops.append(RandAugment.from_config(augment["randaugment"], fill=_fill(mean)))
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
    """Augmentation (train only, when ``augment`` is given), then normalisation and a CHW float tensor."""
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


def _reject(augment: Mapping[str, Any], keys: Mapping[str, Any], data: str, instead: str) -> None:
    for key, neutral in keys.items():
        if augment.get(key, neutral) not in (neutral, None, 0):
            raise ConfigValueError(
                f"recipe.augment.{key}={augment[key]!r} does not apply to {data}, which augment with {instead}; "
                f"set recipe.augment.{key}={'null' if neutral is None else neutral} or pick a recipe for this data"
            )


def file_transform(
    mean: Sequence[float],
    std: Sequence[float],
    image_size: int,
    augment: Mapping[str, Any] | None = None,
    *,
    crop_pct: float = 0.875,
    eval_interpolation: str = "bilinear",
) -> Any:
    """timm's ImageNet pipeline on a decoded RGB PIL image (the paper's, HDVW ``configs/imagenet_vit.yaml``).

    Train (``augment`` given): RandomResizedCrop (``random_resized_crop: {scale, ratio}``, timm's defaults when
    null) at ``interpolation`` (``random`` draws bilinear or bicubic per image), horizontal flip (``hflip``),
    RandAugment (``randaugment``), no colour jitter, then RandomErasing (``random_erasing`` probability,
    per-pixel noise as timm's training script). Eval: resize to ``image_size / crop_pct``, centre crop.
    """
    if not augment:
        return create_transform(
            image_size, is_training=False, crop_pct=crop_pct, interpolation=eval_interpolation, mean=mean, std=std
        )
    _reject(augment, ARRAY_ONLY, "image files (folders, ImageNet, shards)", "random_resized_crop / random_erasing")
    crop = augment.get("random_resized_crop") or {}
    return create_transform(
        image_size,
        is_training=True,
        scale=tuple(crop["scale"]) if crop.get("scale") else None,
        ratio=tuple(crop["ratio"]) if crop.get("ratio") else None,
        hflip=0.5 if augment.get("hflip") else 0.0,
        color_jitter=None,
        auto_augment=augment.get("randaugment") or None,
        interpolation=augment.get("interpolation") or "bilinear",
        mean=tuple(mean),
        std=tuple(std),
        re_prob=float(augment.get("random_erasing") or 0.0),
        re_mode="pixel",
        re_count=1,
    )
