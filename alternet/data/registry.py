"""The data sets by name: ``data.name`` -> its DataModule (:data:`DATAMODULES`), and the builder that makes one
from a composed config."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ..errors import AlternetWarning, ConfigValueError
from .arrays import CIFAR10DataModule, CIFAR100DataModule, DigitsDataModule
from .augment import AugmentConfig, section
from .base import ImageDataModule
from .config import DATA_SECTIONS, DataConfig
from .files import ImageFolderDataModule, ImageNetDataModule

DATAMODULES: dict[str, type[ImageDataModule]] = {
    "digits": DigitsDataModule,
    "cifar10": CIFAR10DataModule,
    "cifar100": CIFAR100DataModule,
    "imagefolder": ImageFolderDataModule,
    "imagenet": ImageNetDataModule,
}


def register_datamodule(cls: type[ImageDataModule]) -> type[ImageDataModule]:
    """Make ``cls`` the data set that ``data.name=<cls.name>`` builds (a class decorator, for a user's module that
    ``imports=[...]`` imports before the config is checked). The data section's keys are its ``settings``
    (:mod:`alternet.data.config`): its base's, or a subclass declaring the keyword arguments it adds."""
    if not (isinstance(cls, type) and issubclass(cls, ImageDataModule)):
        raise TypeError(f"register_datamodule takes an ImageDataModule subclass, not {cls!r}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__name__} needs a class attribute name: the data.name that selects it")
    if name in DATAMODULES and DATAMODULES[name] is not cls:
        raise ValueError(f"data.name={name!r} is {DATAMODULES[name].__qualname__} already: give {cls.__name__} another")
    DATAMODULES[name] = cls
    DATA_SECTIONS[name] = cls.settings
    return cls


def build_datamodule(
    data: DataConfig,
    *,
    batch_size: int,
    seed: int,
    eval_batch_size: int | None = None,
    augment: AugmentConfig | Mapping[str, Any] | None = None,
) -> ImageDataModule:
    """The DataModule of a typed data section (:func:`alternet.data.config.data_config`), with the recipe's batch
    sizes and augmentation (of ``augment``, the section its family reads)."""
    cls = DATAMODULES[data.name]
    declared = cls.num_classes if isinstance(cls.num_classes, int) else None  # folders find theirs
    if data.num_classes is not None and declared is not None and data.num_classes != declared:
        raise ConfigValueError(f"data.num_classes={data.num_classes} but {data.name} has {declared} classes")
    if data.root is not None and not cls.reads_files:
        warnings.warn(
            f"data={data.name} reads no files of its own: data.root={data.root} is not used",
            AlternetWarning,
            stacklevel=2,
        )
    return cls(
        **data.arguments(),
        batch_size=batch_size,
        eval_batch_size=eval_batch_size,
        augment=section(augment, cls.augment_section),
        seed=seed,
    )
