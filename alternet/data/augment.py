"""The one ``recipe.augment`` vocabulary, and which of its keys each augmentation stack honours: in-memory arrays
(albumentations, :mod:`alternet.data.arrays.transforms`) and image files (timm, :mod:`alternet.data.files.transforms`)
share ``hflip`` and ``randaugment``; the keys below belong to one stack, and set to a non-default value on the other
they are an error, before any work starts. RandAugment fills what its warps uncover with one colour in both stacks,
:func:`fill_from_mean` of the data set's mean."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigValueError

# augment keys each pipeline uses; a key of the other pipeline set to a non-default value is an error
ARRAY_ONLY = {"crop_padding": 0, "cutout": None}
FILE_ONLY = {"random_resized_crop": None, "random_erasing": 0.0}


def reject(augment: Mapping[str, Any], keys: Mapping[str, Any], data: str, instead: str) -> None:
    """Raise a :class:`ConfigValueError` for the first of ``keys`` that ``augment`` sets to a non-neutral value:
    ``data`` (the data sets being augmented) augment with ``instead``."""
    for key, neutral in keys.items():
        if augment.get(key, neutral) not in (neutral, None, 0):
            raise ConfigValueError(
                f"recipe.augment.{key}={augment[key]!r} does not apply to {data}, which augment with {instead}; "
                f"set recipe.augment.{key}={'null' if neutral is None else neutral} or pick a recipe for this data"
            )


def fill_from_mean(mean: Sequence[float]) -> tuple[int, ...]:
    """RandAugment's fill colour for a data set mean in [0, 1], in both stacks: timm's, ``min(255, round(255 * m))``
    per channel."""
    return tuple(min(255, round(255 * m)) for m in mean)
