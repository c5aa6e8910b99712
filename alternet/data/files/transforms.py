"""Train and eval pipelines of image files (image folders, ImageNet, shards): timm's ImageNet pipeline on a decoded
RGB PIL image, ending in a normalised CHW tensor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from timm.data import create_transform
from timm.data.auto_augment import AugmentOp

from ..augment import FilesAugment, fill_from_mean


def file_transform(
    mean: Sequence[float],
    std: Sequence[float],
    image_size: int,
    augment: FilesAugment | None = None,
    *,
    crop_pct: float = 0.875,
    crop_mode: str = "center",
    eval_interpolation: str = "bilinear",
) -> Any:
    """timm's ImageNet pipeline on a decoded RGB PIL image (the paper's, HDVW ``configs/imagenet_vit.yaml``).

    Train (``augment``, a recipe's ``augment.files``, given): RandomResizedCrop (``random_resized_crop: {scale,
    ratio}``, timm's defaults when null) at ``interpolation`` (``random`` draws bilinear or bicubic per image),
    horizontal flip (``hflip``),
    RandAugment (``randaugment``, filling with :func:`~alternet.data.augment.fill_from_mean`, as the arrays' does),
    no colour jitter, then RandomErasing (``random_erasing`` probability, per-pixel noise as timm's training script).
    Eval: resize to ``image_size / crop_pct`` (the shorter side for ``crop_mode=center``, both for ``squash``, the
    longer for ``border``, which pads), centre crop: timm's ``validate.py``.
    """
    if augment is None:
        return create_transform(
            image_size,
            is_training=False,
            crop_pct=crop_pct,
            crop_mode=crop_mode,
            interpolation=eval_interpolation,
            mean=mean,
            std=std,
        )
    crop = augment.random_resized_crop
    transform = create_transform(
        image_size,
        is_training=True,
        scale=tuple(crop.scale) if crop and crop.scale else None,
        ratio=tuple(crop.ratio) if crop and crop.ratio else None,
        hflip=0.5 if augment.hflip else 0.0,
        color_jitter=None,
        auto_augment=augment.randaugment or None,
        interpolation=augment.interpolation,
        mean=tuple(mean),
        std=tuple(std),
        re_prob=augment.random_erasing,
        re_mode="pixel",
        re_count=1,
    )
    return fill_randaugment(transform, fill_from_mean(mean))


def fill_randaugment(transform: Any, fill: tuple[int, ...]) -> Any:
    """``transform`` with its timm RandAugment (or AugMix) ops filling with ``fill``: timm derives its own colour from
    the mean (the same formula today); this makes :func:`~alternet.data.augment.fill_from_mean` the one rule."""
    for step in getattr(transform, "transforms", ()):
        for op in getattr(step, "ops", ()):
            if isinstance(op, AugmentOp):
                op.kwargs["fillcolor"] = op.hparams["img_mean"] = fill
    return transform
