"""``recipe.augment``: one section per augmentation stack, each read by its own data family only.

* ``arrays``: in-memory arrays (CIFAR, digits), albumentations (:mod:`alternet.data.arrays.transforms`);
* ``files``: image files (folders, ImageNet, LitData shards), timm's ImageNet pipeline
  (:mod:`alternet.data.files.transforms`).

A data module reads its family's section (:attr:`~alternet.data.base.ImageDataModule.augment_section`) and nothing
else, so a recipe sets the section of the data it is for and never cancels the other's defaults. This module owns
every ``recipe.augment`` key and its one check (:func:`check_augment`, called by the config checks before any work
and by :func:`section`). RandAugment fills what its warps uncover with one colour in both stacks,
:func:`fill_from_mean` of the mean."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigValueError, one_of, suggest

KEY = "recipe.augment"
# each section's keys, in the order of alternet/conf/recipe/_base.yaml
SECTIONS: dict[str, tuple[str, ...]] = {
    "arrays": ("crop_padding", "hflip", "randaugment", "cutout"),
    "files": ("random_resized_crop", "interpolation", "hflip", "randaugment", "random_erasing"),
}
FAMILIES = {"arrays": "in-memory arrays: CIFAR, digits", "files": "image files: folders, ImageNet, shards"}
INTERPOLATIONS = ("bilinear", "bicubic", "random")  # recipe.augment.files.interpolation: the crop's resize


def check_augment(augment: Any, key: str = KEY) -> None:
    """The one check of ``recipe.augment``: null (no augmentation) or sections of :data:`SECTIONS`, each null or
    holding only its own keys."""
    if augment is None:
        return
    if not isinstance(augment, Mapping):
        raise ConfigValueError(f"{key}={augment!r} is invalid: sections {list(SECTIONS)} (or null: no augmentation)")
    for name, value in augment.items():
        if name in SECTIONS:
            check_section(value, name, key)
            continue
        raise ConfigValueError(
            f"{key}.{name} is not a section of {key}; its sections are {list(SECTIONS)}{suggest(str(name), SECTIONS)}"
        )


def check_section(section: Any, name: str, key: str = KEY) -> None:
    """``name``'s section (null: no augmentation) holds only the keys of its stack, and known values of the
    enumerated ones."""
    if section is None:
        return
    if not isinstance(section, Mapping):
        raise ConfigValueError(f"{key}.{name}={section!r} is invalid: keys {list(SECTIONS[name])} (or null)")
    for item in section:
        if item not in SECTIONS[name]:
            elsewhere = [other for other, keys in SECTIONS.items() if item in keys]
            hint = (
                f"; {item} is a key of {key}.{elsewhere[0]} ({FAMILIES[elsewhere[0]]})"
                if elsewhere
                else suggest(str(item), SECTIONS[name])
            )
            raise ConfigValueError(
                f"{key}.{name}.{item} is not a key of {key}.{name} ({FAMILIES[name]}); its keys are "
                f"{list(SECTIONS[name])}{hint}"
            )
    if name == "files" and section.get("interpolation") is not None:
        one_of(f"{key}.files.interpolation", section["interpolation"], INTERPOLATIONS)


def section(augment: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """``name``'s section of a recipe's ``augment`` (empty: no augmentation), the whole checked first."""
    check_augment(augment)
    return dict((augment or {}).get(name) or {})


def fill_from_mean(mean: Sequence[float]) -> tuple[int, ...]:
    """RandAugment's fill colour for a data set mean in [0, 1], in both stacks: timm's, ``min(255, round(255 * m))``
    per channel."""
    return tuple(min(255, round(255 * m)) for m in mean)
