"""ImageNet-C on disk (Hendrycks & Dietterich, 2019): find a corruption tree's conditions, check its classes against
the model's, and read its images.

The layout of the released tarballs, and of mirrors that add a family level::

    <root>/<corruption>/<severity>/<wnid>/*.JPEG             e.g. gaussian_noise/3/n01440764/x.JPEG
    <root>/<family>/<corruption>/<severity>/<wnid>/*.JPEG    e.g. noise/gaussian_noise/3/n01440764/x.JPEG

Labels are the indices of the sorted class folders (what torchvision's ImageFolder does), so the folders must be
the model's classes in the model's order; :func:`check_class_names` says what differs when they are not.

The released images are already 224x224 (resized to 256 and centre-cropped before corruption), so the reference
evaluation (``ImageNet-C/test.py``) only centre-crops to the input size: ``preprocess="center_crop"``. HDVW resizes
the shorter side to 256 and centre-crops 224 again (a 1.14x zoom): ``preprocess="resize_center_crop"`` (shorter side
to ``image_size / 0.875``, then the crop), for numbers comparable with HDVW's.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import albumentations as A
import cv2
import numpy as np
import torch
from albumentations.pytorch import ToTensorV2
from PIL import Image
from torch.utils.data import Dataset

from ...errors import DataError
from ..files.images import decode_rgb
from ..workers import WorkerLedger
from .names import CORRUPTIONS, EXTRA_CORRUPTIONS, SEVERITIES, check_preprocess

IMAGE_SUFFIXES = frozenset({".jpeg", ".jpg", ".png"})
CROP_PCT = 0.875  # resize_center_crop: 224 / 256, as HDVW's Resize(256) + CenterCrop(224)
LAYOUT = "<corruption>/<severity>/<wnid>/*.JPEG (optionally under a family folder)"


@dataclass(frozen=True)
class ImageNetC:
    """A checked ImageNet-C tree: every requested (corruption, severity) folder holds the same class folders."""

    root: Path
    corruptions: tuple[str, ...]  # the requested ones, then any extra ones found
    severities: tuple[int, ...]
    class_names: tuple[str, ...]
    folders: Mapping[str, Path] = field(repr=False)  # corruption -> its folder (with or without a family level)

    def sets(self) -> Iterator[tuple[str, int]]:
        """Every (corruption, severity) pair held, corruption-major."""
        return itertools.product(self.corruptions, self.severities)

    def files(self, corruption: str, severity: int) -> tuple[np.ndarray, np.ndarray]:
        """(image paths, labels) of one condition, by class then file name."""
        base = self.folders[corruption] / str(severity)
        paths: list[str] = []
        labels: list[int] = []
        for label, name in enumerate(self.class_names):
            found = sorted(
                entry.path
                for entry in os.scandir(base / name)
                if entry.is_file() and os.path.splitext(entry.name)[1].lower() in IMAGE_SUFFIXES
            )
            paths += found
            labels += [label] * len(found)
        if not paths:
            raise DataError(f"{base} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in its class folders")
        return np.array(paths), np.array(labels, dtype=np.int64)


def is_image_tree(root: str | os.PathLike[str]) -> bool:
    """Whether ``root`` holds corruption folders (the ImageNet-C layout) rather than CIFAR-C .npy files."""
    root = Path(root).expanduser()
    return root.is_dir() and not any(root.glob("*.npy")) and bool(corruption_folders(root))


def corruption_folders(root: Path) -> dict[str, Path]:
    """Every known corruption folder directly under ``root`` or under one family folder below it."""
    known = set(CORRUPTIONS + EXTRA_CORRUPTIONS)
    found: dict[str, Path] = {}
    for child in sorted(path for path in root.iterdir() if path.is_dir()):
        members = [child] if child.name in known else [p for p in sorted(child.iterdir()) if p.name in known]
        for path in (p for p in members if p.is_dir()):
            if path.name in found:
                raise DataError(f"corruption {path.name} appears twice under {root}: {found[path.name]} and {path}")
            found[path.name] = path
    return found


def load_imagenet_c(
    root: str | os.PathLike[str],
    corruptions: Sequence[str] = CORRUPTIONS,
    severities: Sequence[int] = SEVERITIES,
    *,
    class_names: Sequence[str] | None = None,
    num_classes: int | None = None,
) -> ImageNetC:
    """Open and check an ImageNet-C tree: the requested corruptions at the requested severities, plus any extra
    corruptions found; every condition must hold the same class folders, equal to ``class_names`` when given (else
    ``num_classes`` of them). Raises one :class:`DataError` naming what is missing or differs."""
    root = Path(root).expanduser()
    if not root.is_dir():
        kind = "is not a directory" if root.exists() else "does not exist"
        raise DataError(f"ImageNet-C directory {root} {kind} (expected {LAYOUT})")
    folders = corruption_folders(root)
    wanted = list(dict.fromkeys(corruptions))
    missing = [name for name in wanted if name not in folders]
    if missing:
        raise DataError(
            f"ImageNet-C corruptions missing under {root}: {', '.join(missing)} (found: "
            f"{', '.join(folders) or 'none'}; expected {LAYOUT}); choose others with robustness.corruptions"
        )
    names = (*wanted, *(name for name in EXTRA_CORRUPTIONS if name in folders and name not in wanted))
    levels = tuple(sorted(set(severities)))
    absent = [f"{name}/{s}" for name in names for s in levels if not (folders[name] / str(s)).is_dir()]
    if absent:
        raise DataError(f"ImageNet-C severity folders missing under {root}: {', '.join(absent)}")
    classes = _same_classes({(name, s): folders[name] / str(s) for name in names for s in levels})
    check_class_names(classes, class_names, num_classes, root)
    return ImageNetC(root, names, levels, tuple(classes), {name: folders[name] for name in names})


def _same_classes(conditions: Mapping[tuple[str, int], Path]) -> list[str]:
    """The sorted class folders, which every condition must share."""
    listed = {key: sorted(p.name for p in path.iterdir() if p.is_dir()) for key, path in conditions.items()}
    (first_key, first), *_ = listed.items()
    if not first:
        raise DataError(f"{conditions[first_key]} has no class folders (expected {LAYOUT})")
    for key, classes in listed.items():
        if classes != first:
            differ = sorted(set(classes) ^ set(first))[:3]
            raise DataError(
                f"{conditions[key]} has {len(classes)} class folders, {conditions[first_key]} has {len(first)}; "
                f"every condition needs the same classes (differing: {', '.join(differ)})"
            )
    return first


def _few(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def check_class_names(
    found: Sequence[str], expected: Sequence[str] | None, num_classes: int | None, where: Path
) -> None:
    """Raise a one-line DataError unless the sorted class folders ``found`` are the model's classes in its order
    (``expected``, e.g. a checkpoint's ``data.class_names``); without names, only their count is checked."""
    found = list(found)
    if expected is None:
        if num_classes is not None and len(found) != num_classes:
            raise DataError(
                f"{where} has {len(found)} class folders but the model has {num_classes} classes; "
                "evaluate it on corruptions of the data set it was trained on"
            )
        return
    expected = [str(name) for name in expected]
    if found == expected:
        return
    missing = [name for name in expected if name not in set(found)]
    unexpected = [name for name in found if name not in set(expected)]
    if missing or unexpected:
        raise DataError(
            f"class folders of {where} differ from the model's {len(expected)} classes: "
            f"missing {_few(missing) or 'none'}; not the model's {_few(unexpected) or 'none'}"
        )
    index = next(i for i, (a, b) in enumerate(zip(found, expected)) if a != b)
    raise DataError(
        f"class folders of {where} are the model's classes in another order: sorted folder {index} is "
        f"{found[index]!r} but the model's class {index} is {expected[index]!r} (labels follow the sorted folders)"
    )


def crop_transform(
    mean: Sequence[float],
    std: Sequence[float],
    image_size: int,
    preprocess: str = "center_crop",
    crop_pct: float = CROP_PCT,
) -> A.Compose:
    """The reference preprocessing of ImageNet-C images (see the module docstring), then normalisation;
    ``resize_center_crop`` resizes the shorter side to ``image_size / crop_pct`` first, anti-aliased where it shrinks
    (cv2's bilinear alone samples a large image's fine detail into moiré: OOD photos for a CIFAR model)."""
    check_preprocess(preprocess)
    ops: list[A.BasicTransform] = []
    if preprocess == "resize_center_crop":
        size = round(image_size / crop_pct)  # bilinear, with an area average where it shrinks (PIL's resize
        ops.append(A.SmallestMaxSize(max_size=size, interpolation=cv2.INTER_LINEAR, area_for_downscale="image"))
    ops += [
        A.CenterCrop(image_size, image_size),
        A.Normalize(mean=tuple(mean), std=tuple(std), max_pixel_value=255.0),
        ToTensorV2(),
    ]
    return A.Compose(ops)


def check_image_size(path: str | os.PathLike[str], image_size: int, preprocess: str) -> None:
    """A centre crop neither enlarges nor keeps the scale of a larger image: raise a DataError when ``path`` is not
    the crop's size. (ImageNet-C's images are 224 px, made as the clean test images are for a 224-px model: a
    smaller input cropped from them sees its objects larger than in its clean test images, 1.75x at 128 px.)"""
    with Image.open(path) as image:
        width, height = image.size
    if preprocess == "center_crop" and min(width, height) != image_size:
        smaller = min(width, height) < image_size
        would = "have to enlarge it" if smaller else "magnify its objects against the clean test images"
        raise DataError(
            f"{path} is {width}x{height}, {'smaller' if smaller else 'larger'} than the model's {image_size}px input: "
            f"a centre crop alone would {would}; set robustness.preprocess=resize_center_crop to resize first"
        )


class ImageFileDataset(Dataset):
    """Image files and integer labels, decoded to RGB uint8 and transformed on access."""

    def __init__(self, paths: np.ndarray, labels: np.ndarray, transform: A.Compose, ledger: WorkerLedger | None = None):
        if len(paths) != len(labels):
            raise DataError(f"{len(paths)} image files but {len(labels)} labels")
        self.paths = np.asarray(paths)  # one array, not a list of str: workers do not copy it page by page
        self.labels = np.asarray(labels, dtype=np.int64)
        self.transform, self.ledger = transform, ledger

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path = Path(str(self.paths[index]))
        if self.ledger is not None:
            self.ledger.reading(path)  # a worker that dies now is reported by this file
        array = np.asarray(decode_rgb(path))
        if self.ledger is not None:
            self.ledger.done()
        return self.transform(image=array)["image"], int(self.labels[index])
