"""The out-of-distribution pass (``ood.root``): images of classes the model never saw, scored against the test
split with :func:`alternet.metrics.uncertainty.ood_scores` (MSP, energy). ``ood.root`` is any folder of images
(searched recursively, in sorted order; through the test split's own pipeline for image files; for arrays the
shorter side resized to the model's input, anti-aliased, and centre-cropped) or a CIFAR-format set (the folder
holding ``cifar-10-batches-py/`` or ``cifar-100-python/``, or that folder: its test split, resized to the model's
input when it is not 32 px)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import albumentations as A
import cv2
import numpy as np
from albumentations.pytorch import ToTensorV2
from torch.utils.data import Dataset

from ..data import DATAMODULES, ArrayDataset, ImageDataModule, ImageFolderDataModule
from ..data.corrupted.imagenet_c import ImageFileDataset, crop_transform
from ..data.files.images import DecodingDataset, FileList
from ..data.files.listing import CIFAR_FOLDERS, images_under
from ..errors import DataError
from .config import OodConfig, check_ood_root


@dataclass(frozen=True)
class OodSet:
    root: Path
    layout: str  # "folder" | "cifar10" | "cifar100"
    dataset: Dataset


def open_ood_set(cfg: OodConfig, datamodule: ImageDataModule) -> OodSet:
    """The images of ``cfg.root`` as the model's input, checked before any inference."""
    root = Path(cfg.root).expanduser()
    check_ood_root(root)
    limit = cfg.max_images
    cifar = _cifar_layout(root)
    if cifar is not None:  # its data module takes the folder or the directory holding it
        arrays = DATAMODULES[cifar](root=str(root), batch_size=1)
        images, _ = arrays.load_split(train=False)
        images = images[:limit]
        return OodSet(root, cifar, ArrayDataset(images, np.zeros(len(images), np.int64), _array_transform(datamodule)))
    found = images_under(root)[:limit]
    labels = np.zeros(len(found), np.int64)
    if isinstance(datamodule, ImageFolderDataModule):  # image files: the test split's own pipeline (timm's)
        files = FileList(root.parent, np.array([os.fsencode(path) for path in found], dtype=np.bytes_), labels)
        return OodSet(root, "folder", DecodingDataset(files, datamodule.eval_transform()))
    paths = [str(root.parent / path) for path in found]
    # arrays (CIFAR, digits), evaluated at their own size: the shorter side resized to it (anti-aliased), cropped
    transform = crop_transform(datamodule.mean, datamodule.std, datamodule.image_size, "resize_center_crop", 1.0)
    return OodSet(root, "folder", ImageFileDataset(np.array(paths), labels, transform))


def _cifar_layout(root: Path) -> str | None:
    if root.name in CIFAR_FOLDERS:
        return CIFAR_FOLDERS[root.name]
    found = [name for folder, name in CIFAR_FOLDERS.items() if (root / folder).is_dir()]
    if len(found) > 1:
        raise DataError(f"ood.root={root} holds both CIFAR sets: point it at one of {sorted(CIFAR_FOLDERS)} inside")
    return found[0] if found else None


def _array_transform(datamodule: ImageDataModule) -> A.Compose:
    size = datamodule.image_size
    resize = [] if size == 32 else [A.Resize(size, size, interpolation=cv2.INTER_LINEAR)]
    return A.Compose([*resize, A.Normalize(datamodule.mean, datamodule.std, max_pixel_value=255.0), ToTensorV2()])
