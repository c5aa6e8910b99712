"""What the corrupted test sets are called, torch-free: the 15 benchmark corruptions in their families, the extra
ones real CIFAR-C archives ship, the severities and ImageNet-C's preprocessing choices. The evaluation settings'
schema checks ``robustness.*`` against these tables before any work; the generators and readers use the same ones."""

from __future__ import annotations

from typing import Any

from ...errors import one_of

SEVERITIES = (1, 2, 3, 4, 5)
FAMILIES = {
    "noise": ("gaussian_noise", "shot_noise", "impulse_noise"),
    "blur": ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur"),
    "weather": ("snow", "frost", "fog", "brightness"),
    "digital": ("contrast", "elastic_transform", "pixelate", "jpeg_compression"),
}
CORRUPTIONS = tuple(name for family in FAMILIES.values() for name in family)  # the 15, in the reference's order
# Shipped in the real CIFAR-C archives besides the 15 (not generated here).
EXTRA_CORRUPTIONS = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
PREPROCESS = ("center_crop", "resize_center_crop")  # ImageNet-C's (data.corrupted.imagenet_c)


def is_benchmark(corruption: str) -> bool:
    """One of the 15 corruptions of the benchmark (mean accuracy, mCE); the others are scored beside them."""
    return corruption in CORRUPTIONS


def check_preprocess(preprocess: Any, key: str = "robustness.preprocess") -> None:
    """The one check of ``robustness.preprocess``: the evaluation settings' check calls it before any work,
    :func:`~alternet.data.corrupted.imagenet_c.crop_transform` too."""
    one_of(key, preprocess, PREPROCESS)
