"""``recipe.augment``: one typed section per augmentation stack, each read by its own data family only.

* ``arrays`` (:class:`ArraysAugment`): in-memory arrays (CIFAR, digits), albumentations
  (:mod:`alternet.data.arrays.transforms`);
* ``files`` (:class:`FilesAugment`): image files (folders, ImageNet, LitData shards), timm's ImageNet pipeline
  (:mod:`alternet.data.files.transforms`).

A data module reads its family's section (:attr:`~alternet.data.base.ImageDataModule.augment_section`) and nothing
else, so a recipe sets the section of the data it is for and never cancels the other's defaults. A key a section
leaves out is off (the Python API: ``CIFAR100DataModule(augment={"hflip": True})``); the recipes under
``conf/recipe`` set every one. RandAugment fills what its warps uncover with one colour in both stacks,
:func:`fill_from_mean` of the mean."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigValueError
from ..typed import Section, build, integer

KEY = "recipe.augment"
INTERPOLATIONS = ("bilinear", "bicubic", "random")  # recipe.augment.files.interpolation: the crop's resize


@dataclass(kw_only=True)
class CutoutConfig(Section):
    """``recipe.augment.arrays.cutout``: square holes filled with the data set's mean colour (0 once normalised;
    albumentations' CoarseDropout)."""

    holes: int = 1
    size: int | None = None  # null: half the image side
    p: float = 1.0

    def check(self) -> None:
        self.require("holes", integer(1), "must be an integer >= 1")
        self.require("size", integer(1), "must be an integer >= 1 (or null: half the image side)")
        self.require("p", lambda v: 0 <= v <= 1, "must be in [0, 1]")


@dataclass(kw_only=True)
class CropConfig(Section):
    """``recipe.augment.files.random_resized_crop``: the crop's area and aspect ranges (null: timm's)."""

    scale: list[float] | None = None
    ratio: list[float] | None = None

    def check(self) -> None:
        for key in ("scale", "ratio"):
            self.require(key, lambda v: len(v) == 2 and 0 < v[0] <= v[1], "must be [low, high] with 0 < low <= high")
        self.require("scale", lambda v: v[1] <= 1, "must be a share of the image's area: high <= 1")


RAND_OP_SETS = ("weights", "3a", "3aw")  # timm's named op sets (rand_augment_choices)
RAND_KEYS = {"m": int, "n": int, "p": float, "mstd": float, "mmax": int, "inc": int}  # timm's rand-... sections


def rand_sections(spec: str) -> list[tuple[str, Any]]:
    """The sections of timm's RandAugment string (``rand-m9-n2-mstd0.5``), in order, each ``(key, value)``, an op
    set as ``("t", name)``; a ``ValueError`` saying what is wrong where timm would fail, or skip a section silently."""
    head, *sections = spec.split("-")
    if head != "rand":
        raise ValueError("a RandAugment policy starts with 'rand', e.g. rand-m9-n2-mstd0.5 (timm's grammar)")
    parsed = []
    for section in sections:
        if section.startswith("t") and len(section) > 1:
            if section[1:] not in RAND_OP_SETS:  # timm trains with its default set instead
                known = ", ".join(f"t{name}" for name in RAND_OP_SETS)
                raise ValueError(f"its op set {section!r} is not one of timm's: {known}")
            parsed.append(("t", section[1:]))
            continue
        match = re.fullmatch(r"([a-z]+)(.*)", section)
        key, value = match.groups() if match else (section, "")
        if key not in RAND_KEYS:
            keys = " ".join(f"{k}<{kind.__name__}>" for k, kind in RAND_KEYS.items())
            raise ValueError(f"its section {section!r} is not one of timm's: {keys} t<op set>")
        try:
            parsed.append((key, RAND_KEYS[key](value)))
        except ValueError:
            kind = RAND_KEYS[key].__name__
            raise ValueError(f"its section {section!r} needs {key} followed by a number ({kind})") from None
    return parsed


@dataclass(kw_only=True)
class StackSection(Section):
    """A stack's section: its name and family, for the message that names a key of the other stack."""

    NAME: ClassVar[str]
    FAMILY: ClassVar[str]

    def check(self) -> None:
        policy = getattr(self, "randaugment", None)
        if policy is not None:
            try:
                rand_sections(policy)
            except ValueError as error:
                self.require("randaugment", lambda _: False, str(error))

    @classmethod
    def unknown_hint(cls, key: str, prefix: str) -> str:
        return _key_of_a_stack(key, but=cls) or super().unknown_hint(key, prefix)


@dataclass(kw_only=True)
class ArraysAugment(StackSection):
    """``recipe.augment.arrays``: in-memory arrays, albumentations (:func:`~.arrays.transforms.augmentation_ops`)."""

    NAME: ClassVar[str] = "arrays"
    FAMILY: ClassVar[str] = "in-memory arrays: CIFAR, digits"

    crop_padding: int = 0  # random crop after zero padding (0: none)
    hflip: bool = False
    randaugment: str | None = None  # timm's policy string, ported (alternet/data/arrays/randaugment.py)
    cutout: CutoutConfig | None = None

    def check(self) -> None:
        super().check()
        self.require("crop_padding", integer(0), "must be an integer >= 0")


@dataclass(kw_only=True)
class FilesAugment(StackSection):
    """``recipe.augment.files``: image files, timm's ImageNet pipeline (:func:`~.files.transforms.file_transform`)."""

    NAME: ClassVar[str] = "files"
    FAMILY: ClassVar[str] = "image files: folders, ImageNet, shards"

    random_resized_crop: CropConfig | None = None
    interpolation: str = "bilinear"  # the crop's resize
    hflip: bool = False
    randaugment: str | None = None  # timm's own
    random_erasing: float = 0.0  # probability of timm's RandomErasing (a box of the mean colour, as HDVW's)

    def check(self) -> None:
        super().check()
        self.one_of("interpolation", INTERPOLATIONS)
        self.require("random_erasing", lambda v: 0 <= v <= 1, "must be in [0, 1]")


STACKS: dict[str, type[StackSection]] = {"arrays": ArraysAugment, "files": FilesAugment}
SECTIONS = {name: tuple(stack.keys()) for name, stack in STACKS.items()}  # each section's keys, in YAML order


@dataclass(kw_only=True)
class AugmentConfig(Section):
    """``recipe.augment``: a section per stack (null: that family trains without augmentation)."""

    arrays: ArraysAugment | None = None
    files: FilesAugment | None = None

    @classmethod
    def unknown_hint(cls, key: str, prefix: str) -> str:
        return f": its sections are {list(STACKS)}{_key_of_a_stack(key) or super().unknown_hint(key, prefix)}"


def _key_of_a_stack(key: str, but: type[StackSection] | None = None) -> str:
    """``; KEY is a key of recipe.augment.NAME (FAMILY)`` when a stack (other than ``but``) has the key, else ''."""
    stack = next((s for name, s in STACKS.items() if s is not but and key in SECTIONS[name]), None)
    return f"; {key} is a key of {KEY}.{stack.NAME} ({stack.FAMILY})" if stack else ""


def section(augment: AugmentConfig | Mapping[str, Any] | None, name: str) -> StackSection | None:
    """``name``'s section of a recipe's ``augment`` (None: no augmentation), typed; a mapping is checked whole."""
    if isinstance(augment, Mapping):
        augment = build(AugmentConfig, augment, f"{KEY}.")
    return getattr(augment, name) if augment is not None else None


def stack_section(augment: Any, name: str) -> StackSection | None:
    """One stack's section as a data module takes it: typed, its keys as a mapping (the Python API), or a recipe's
    whole ``augment`` (:class:`AugmentConfig`), of which it takes ``name``'s section."""
    if isinstance(augment, AugmentConfig):
        return getattr(augment, name)
    if isinstance(augment, Mapping):
        return build(STACKS[name], augment, f"{KEY}.{name}.")
    if augment is not None and not isinstance(augment, STACKS[name]):
        raise ConfigValueError(
            f"augment takes {KEY}.{name} ({STACKS[name].__name__}, its keys as a mapping, or the recipe's whole "
            f"augment section), got a {type(augment).__name__}"
        )
    return augment


def fill_from_mean(mean: Sequence[float]) -> tuple[int, ...]:
    """RandAugment's fill colour for a data set mean in [0, 1], in both stacks: timm's, ``min(255, round(255 * m))``
    per channel."""
    return tuple(min(255, round(255 * m)) for m in mean)
