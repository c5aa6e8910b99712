"""Train and eval pipelines of image files (image folders, ImageNet, shards): timm's ImageNet pipeline on a decoded
RGB PIL image, ending in a normalised CHW tensor."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from PIL import Image
from timm.data import create_transform
from timm.data.auto_augment import AugmentOp
from timm.data.transforms import RandomResizedCropAndInterpolation
from torchvision.transforms import Compose, InterpolationMode

from ..augment import FilesAugment, fill_from_mean
from .images import to_rgb

REDUCTIONS = (8, 4, 2)  # the scales libjpeg decodes at besides 1 (1/8, 1/4, 1/2), through Pillow's draft
PIL_FILTER = {
    InterpolationMode.BILINEAR: Image.Resampling.BILINEAR,
    InterpolationMode.BICUBIC: Image.Resampling.BICUBIC,
}


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
    no colour jitter, then RandomErasing (``random_erasing`` probability, one box filled with 0 after normalisation,
    the mean colour: timm's ``const`` mode, the paper's code's, HDVW ``ops/datasets.py``).
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
        re_mode="const",
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


class DraftedCrop:
    """timm's RandomResizedCrop made while decoding (``data.decode=fast``): the box is drawn from the JPEG's header
    size, with the same random draws as :class:`~timm.data.transforms.RandomResizedCropAndInterpolation` (so the
    same box for the same seed), then the file is decoded at the smallest DCT scale (1/8, 1/4, 1/2: libjpeg's, through
    Pillow's ``draft``) at which the box still holds at least the output size in pixels, and the box is cropped and
    resized from that. Most of an ImageNet photo is thrown away by its crop; decoding it at 1/2 or 1/4 costs a
    quarter or a sixteenth of the full decode. Other formats decode whole. The output differs from the exact path's
    by resampling error only: both resize the same box, this one from fewer source pixels (each already an average
    of the full-size ones, as the downscaling filter would make them)."""

    def __init__(self, crop: RandomResizedCropAndInterpolation):
        self.crop = crop

    def __call__(self, opened: Image.Image, name: Any) -> Image.Image:
        crop = self.crop
        top, left, height, width = crop.get_params(opened, crop.scale, crop.ratio)  # from the header: no decode
        mode = random.choice(crop.interpolation) if isinstance(crop.interpolation, list | tuple) else crop.interpolation
        out_h, out_w = crop.size
        full_w, full_h = opened.size
        reduce = next((r for r in REDUCTIONS if height / r >= out_h and width / r >= out_w), 1)
        scale = 1.0  # libjpeg's: Pillow decodes at min(W // w, H // h) of the size (w, h) asked, so W // r is asked
        drafted = opened.draft("RGB", (full_w // reduce, full_h // reduce)) if reduce > 1 else None
        if drafted is not None:  # a JPEG, or an MPO (a phone's JPEG with more pictures), which drafts the same
            scale = full_w / drafted[1][2]  # its box: (0, 0, W / scale, H / scale), the image ceil(W / scale) wide
        opened.load()
        image = to_rgb(opened, name)
        box = (left / scale, top / scale, (left + width) / scale, (top + height) / scale)
        return image.resize((out_w, out_h), resample=PIL_FILTER[mode], box=box)


def drafted(transform: Compose) -> tuple[DraftedCrop, Compose]:
    """A training pipeline split for ``data.decode=fast``: its first step, the random-resized crop, made while
    decoding (:class:`DraftedCrop`), and the steps after it."""
    first, *rest = transform.transforms
    if not isinstance(first, RandomResizedCropAndInterpolation):
        raise TypeError(f"a training pipeline starting with {type(first).__name__}, not timm's RandomResizedCrop")
    return DraftedCrop(first), Compose(rest)
