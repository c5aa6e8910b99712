"""Train and eval pipelines of the in-memory arrays (CIFAR, digits): albumentations on uint8 HWC images, ending in a
normalised CHW tensor; and :class:`BatchPipeline`, the same crop, flip and normalisation done for a whole batch at
once where a recipe asks for nothing more (on a 2-core Zen 3, ~43 µs an image against ~225 through albumentations
image by image; bench/RESULTS.md, cpu-avx2-amd-f25-m1)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import albumentations as A
import cv2
import numpy as np
import torch
from albumentations.pytorch import ToTensorV2

from ...errors import ConfigValueError
from ..augment import ArraysAugment, fill_from_mean
from .randaugment import RandAugment


def augmentation_ops(augment: ArraysAugment, image_size: int, mean: Sequence[float]) -> list[A.BasicTransform]:
    """The random part of the train pipeline, from the ``arrays`` section of a recipe's ``augment``: zero-padded
    random crop, horizontal flip, RandAugment (timm's policy string, ported), cutout."""
    ops: list[A.BasicTransform] = []
    if padding := augment.crop_padding:
        if padding >= image_size:  # most crops would be blank padding (some wholly)
            raise ConfigValueError(
                f"recipe.augment.arrays.crop_padding={padding} is not smaller than the {image_size}-px images "
                "(data.image_size): a crop could hold no image at all; CIFAR's is 4 on 32 px"
            )
        padded = image_size + 2 * padding
        ops += [
            A.PadIfNeeded(padded, padded, border_mode=cv2.BORDER_CONSTANT, fill=0),
            A.RandomCrop(image_size, image_size),
        ]
    if augment.hflip:
        ops.append(A.HorizontalFlip(p=0.5))
    if augment.randaugment:
        ops.append(RandAugment.from_config(augment.randaugment, fill=fill_from_mean(mean)))
    if cutout := augment.cutout:
        size = cutout.size or image_size // 2
        if size > image_size:  # albumentations fails on the first batch (numpy's "low >= high")
            raise ConfigValueError(
                f"recipe.augment.arrays.cutout.size={size} is larger than the {image_size}-px images "
                f"(data.image_size): at most {image_size}"
            )
        ops.append(
            A.CoarseDropout(
                num_holes_range=(cutout.holes, cutout.holes),
                hole_height_range=(size, size),
                hole_width_range=(size, size),
                fill=fill_from_mean(mean),  # the mean colour, 0 once normalised: DeVries & Taylor mask after it
                p=cutout.p,
            )
        )
    return ops


def build_transform(
    mean: Sequence[float],
    std: Sequence[float],
    image_size: int,
    augment: ArraysAugment | None = None,
    stored_size: int | None = None,
) -> A.Compose:
    """A resize to ``image_size`` (bilinear) where the images are stored at another size (``stored_size``: CIFAR's
    32 px at ``data.image_size=64``), augmentation (train only, when ``augment``, the ``arrays`` section, is given),
    then normalisation and a CHW float tensor."""
    resize = stored_size is not None and stored_size != image_size
    ops = [A.Resize(image_size, image_size, interpolation=cv2.INTER_LINEAR)] if resize else []
    ops += augmentation_ops(augment, image_size, mean) if augment else []
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


class BatchPipeline:
    """Zero-padded random crop, horizontal flip and normalisation of a batch of uint8 HWC images in a few array
    operations: the ``arrays`` augmentation when it is crop and flip alone (:meth:`serves`; RandAugment and
    cutout keep the per-image pipeline), and the evaluation pipeline (``augment`` None).

    The same distributions as :func:`augmentation_ops`' crop and flip (offsets uniform in ``[0, 2 * padding]``,
    a flip with probability 1/2), drawn from each sample's seed (the sampler's, so a batch is a pure function of
    its keys, as a resumed run needs); the normalisation is albumentations' own, read off it once as a lookup
    table, so values equal the per-image pipeline's exactly.
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        image_size: int,
        augment: ArraysAugment | None = None,
    ):
        self.padding = augment.crop_padding if augment else 0
        self.hflip = bool(augment and augment.hflip)
        # (256, C): what albumentations' Normalize makes of each uint8 value in each channel
        ramp = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], len(mean), axis=2)
        self.lut = build_transform(mean, std, image_size)(image=ramp)["image"][:, 0, :].T.numpy()

    DOES = ("crop_padding", "hflip")

    @classmethod
    def serves(cls, augment: ArraysAugment | None) -> bool:
        """Whether an ``arrays`` augmentation section is one this pipeline does: crop and flip, every other key
        unset (so an augmentation added to :func:`augmentation_ops` later keeps the per-image pipeline)."""
        return augment is None or not any(v for k, v in augment.to_dict().items() if k not in cls.DOES)

    def offsets(self, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dy, dx, flip) per sample from its seed: SplitMix64 of the seed, its bit ranges read apart."""
        z = seeds.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
        span = np.uint64(2 * self.padding + 1)
        dy = ((z & np.uint64(0xFFFF)) % span).astype(np.intp)
        dx = (((z >> np.uint64(16)) & np.uint64(0xFFFF)) % span).astype(np.intp)
        flip = ((z >> np.uint64(32)) & np.uint64(1)).astype(bool) & self.hflip
        return dy, dx, flip

    def __call__(self, images: np.ndarray, seeds: np.ndarray | None = None) -> torch.Tensor:
        """``images`` (B, H, W, C) uint8 -> (B, C, H, W) float; ``seeds`` (B,) draw the crops and flips (None:
        evaluation, no augmentation)."""
        if seeds is not None and (self.padding or self.hflip):
            size, (h, w) = len(images), images.shape[1:3]
            p = self.padding
            padded = np.zeros((size, h + 2 * p, w + 2 * p, images.shape[3]), np.uint8)
            padded[:, p : p + h, p : p + w] = images
            dy, dx, flip = self.offsets(seeds)
            rows = dy[:, None] + np.arange(h)
            cols = dx[:, None] + np.arange(w)
            cols = np.where(flip[:, None], cols[:, ::-1], cols)
            images = padded[np.arange(size)[:, None, None], rows[:, :, None], cols[:, None, :]]
        values = self.lut[images, np.arange(images.shape[3])]  # (B, H, W, C) in the normalised values
        return torch.from_numpy(values).permute(0, 3, 1, 2)
