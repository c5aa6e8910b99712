"""Data sets as LightningDataModules over one base (:mod:`.base`), in two families: in-memory arrays
(:mod:`.arrays`: CIFAR, digits) and image files (:mod:`.files`: image folders, ImageNet, LitData shards); the
corrupted test sets that evaluation scores (:mod:`.corrupted`: CIFAR-C, ImageNet-C) are imported only by it.
``data.name`` -> its DataModule, and the builder from a config: :mod:`.registry`. Each name below is imported on
first use (:mod:`alternet.lazy`)."""

from __future__ import annotations

from ..lazy import exports
from . import licence  # noqa: F401  (first: refuses an AGPL or untested albumentations before it is imported)

__getattr__, __dir__ = exports(
    __name__,
    {
        "DATAMODULES": "registry",
        "DataConfig": "config",
        "ArrayDataModule": "arrays",
        "ArrayDataset": "arrays",
        "CIFAR10DataModule": "arrays",
        "CIFAR100DataModule": "arrays",
        "DigitsDataModule": "arrays",
        "EpochSampler": "base",
        "ImageDataModule": "base",
        "ImageFolderDataModule": "files.folder",
        "ImageNetDataModule": "files.folder",
        "build_datamodule": "registry",
        "data_config": "config",
        "register_datamodule": "registry",
    },
)
