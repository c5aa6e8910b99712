"""Data sets as LightningDataModules over one base (:mod:`.base`): in-memory arrays (:mod:`.arrays`), image files
(:mod:`.files`) and, imported only by evaluation, the corrupted test sets (:mod:`.corrupted`); ``data.name`` -> its
DataModule, and the builder from a config: :mod:`.registry`. What each holds: docs/architecture.md. Each name below
is imported on first use (:mod:`alternet.lazy`)."""

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
