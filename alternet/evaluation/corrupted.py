"""The corrupted sets robustness is scored on, as one dataset per (corruption, severity) condition: real CIFAR-C
.npy files or an ImageNet-C tree (``robustness.root``), or CIFAR-C corruptions generated from the test split and
cached. Everything is opened and checked here, before any inference.

Conditions of the four corruptions beyond the benchmark's 15 (speckle_noise, gaussian_blur, spatter, saturate:
shipped in the public CIFAR-C archives and ImageNet-C's extra set) are scored too, and reported apart
(:func:`~alternet.data.corrupted.names.is_benchmark`), never in the headline mean or mCE.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from ..data import ArrayDataset, ImageDataModule
from ..data.arrays.transforms import build_transform
from ..data.corrupted.cifar_c import generate_and_load, load_cifar_c, read_manifest
from ..data.corrupted.imagenet_c import (
    ImageFileDataset,
    check_image_size,
    crop_transform,
    is_image_tree,
    load_imagenet_c,
)
from ..data.files.images import FileList
from ..errors import DataError
from ..runs.results import CorruptedImages
from .config import RobustnessConfig, requested

CIFAR_BENCHMARKS = {"cifar10": "cifar10-c", "cifar100": "cifar100-c"}  # data set -> its built-in baseline tables


@dataclass(frozen=True)
class CorruptedSets:
    """Every condition to score, all from one source."""

    layout: str  # "cifar-c" (.npy files) or "imagenet-c" (image folders)
    source: str  # "real" or "generated"
    root: Path
    conditions: tuple[tuple[str, int], ...]
    datasets: tuple[Dataset, ...] = field(repr=False)
    clean_images: int | None  # the clean reference: the first N test images; None: the whole test split
    benchmark: str | None  # the built-in baselines' name for it (cifar10-c, cifar100-c, imagenet-c), if any
    synthetic_frost: bool = False
    frost_source: str | None = None  # generated frost: photographs (the reference's) or synthetic
    preprocess: str | None = None  # ImageNet-C only
    max_images: int | None = None  # robustness.max_images: only the first N images of each severity are scored

    def images(self) -> CorruptedImages:
        """What a robustness result says about where the corrupted images came from and how they were read."""
        return CorruptedImages(
            layout=self.layout,
            root=str(self.root),
            benchmark=self.benchmark,
            preprocess=self.preprocess,
            synthetic_frost=self.synthetic_frost,
            frost_source=self.frost_source,
            max_images=self.max_images,
            images_per_condition=self.clean_images,
        )

    def describe(self) -> str:
        """What the progress lines call these sets: their source, and the part of each scored when it is not all."""
        subset = f" (the first {self.clean_images} images of each, robustness.max_images={self.max_images})"
        return f"{self.source} corruptions" + (subset if self.max_images else "")


def source_and_benchmark(cfg: RobustnessConfig, datamodule: ImageDataModule) -> tuple[str, str | None]:
    """Where the corrupted images will come from (real or generated) and the benchmark whose built-in baseline
    tables fit the data set (a generated set's too: its real files would be that benchmark's) — known before
    anything is opened or generated, so a baseline is checked first."""
    root = cfg.root
    if not root:
        return "generated", CIFAR_BENCHMARKS.get(datamodule.name)
    if is_image_tree(root):
        return "real", "imagenet-c"
    manifest = read_manifest(Path(root).expanduser()) if Path(root).expanduser().is_dir() else None
    if manifest is not None:  # a directory generate_cifar_c wrote
        return manifest.get("source", "generated"), CIFAR_BENCHMARKS.get(datamodule.name)
    return "real", CIFAR_BENCHMARKS.get(datamodule.name)


def open_corrupted_sets(
    cfg: RobustnessConfig, datamodule: ImageDataModule, class_names: Sequence[str] | None = None
) -> CorruptedSets:
    """The conditions of ``cfg`` (the ``robustness`` settings) for a model trained on ``datamodule``'s classes;
    ``class_names`` (the model's, in order) are checked against an ImageNet-C tree's class folders."""
    root = cfg.root
    corruptions, severities = requested(cfg, generated=not root)
    if root and is_image_tree(root):
        return _imagenet_c(cfg, Path(root).expanduser(), corruptions, severities, datamodule, class_names)
    max_images = cfg.max_images
    if root:
        _require_cifar_c(Path(root).expanduser())
        sets = load_cifar_c(root, corruptions, num_classes=datamodule.num_classes)
        scored = _images_to_score(sets, datamodule, root, max_images)
    else:
        sets = _generated(cfg, datamodule, corruptions, severities)
        scored = sets.n_per_severity  # generated from the first max_images test images only
    stored = getattr(datamodule, "stored_size", None)  # the test split's arrays as stored (CIFAR: 32), as the sets
    transform = build_transform(datamodule.mean, datamodule.std, datamodule.image_size, stored_size=stored)
    conditions, datasets = [], []
    for corruption, severity in sets.sets():
        if severity in severities:
            images, labels = sets.get(corruption, severity)  # memory-mapped: workers read, nothing is copied
            conditions.append((corruption, severity))
            datasets.append(ArrayDataset(images[:scored], labels[:scored], transform))
    return CorruptedSets(
        layout="cifar-c",
        source=sets.source,
        root=sets.root,
        conditions=tuple(conditions),
        datasets=tuple(datasets),
        clean_images=scored,
        benchmark=CIFAR_BENCHMARKS.get(datamodule.name) if sets.source == "real" else None,  # generated: none
        synthetic_frost=sets.synthetic_frost,
        frost_source=sets.frost_source,
        max_images=max_images if max_images and scored < len(datamodule.splits["test"]) else None,  # it cut
    )


def _images_to_score(sets: Any, datamodule: ImageDataModule, root: str | Path, max_images: int | None) -> int:
    """How many images of each severity to score: all, or with ``robustness.max_images=N`` the first N.

    Real CIFAR-C files corrupt one particular clean test split: the whole split (the archives hold 10,000 images
    per severity, with ``max_images`` the first N of each are scored, against the first N test labels), or, with
    ``max_images=N``, files of exactly its first N images. Files that cannot be of it (another image size, another
    number of images per severity, other labels) are refused instead of being reported as its robustness."""
    test = datamodule.splits["test"]
    held = sets.n_per_severity
    images, labels = sets.get(*next(iter(sets.sets())))
    problems = []
    stored = test.images.shape[1:3] if hasattr(test, "images") else (datamodule.image_size,) * 2
    if images.shape[1:3] != stored:
        problems.append(f"images are {images.shape[1]}x{images.shape[2]}, the test images {stored[0]}x{stored[1]}")
    if held != len(test) and held != max_images:
        limit = f" and robustness.max_images={max_images}" if max_images else ""
        problems.append(f"{held} images per severity, the test split has {len(test)}{limit}")
    elif hasattr(test, "labels") and not np.array_equal(np.asarray(labels), test.labels[:held]):
        problems.append(f"their labels are not the {datamodule.name} test labels in order")
    if problems:
        raise DataError(
            f"robustness.root={root} does not corrupt this model's {datamodule.name} test split: {'; '.join(problems)}"
        )
    return min(held, max_images or held)


def _require_cifar_c(root: Path) -> None:
    """A root that is neither layout gets one error naming both."""
    if root.is_dir() and not any(root.glob("*.npy")):
        raise DataError(
            f"robustness.root={root} holds neither CIFAR-C files (<corruption>.npy + labels.npy) nor ImageNet-C "
            "folders (<corruption>/<severity>/<wnid>/*.JPEG, optionally under a family folder)"
        )


def _generated(
    cfg: RobustnessConfig, datamodule: ImageDataModule, corruptions: tuple[str, ...], severities: tuple[int, ...]
):
    """CIFAR-C corruptions of the test split (its first ``max_images``), generated once and cached."""
    test = datamodule.splits["test"]
    if not hasattr(test, "images"):
        raise DataError(
            f"generated corruptions are CIFAR-C's, made from in-memory 32-px test arrays; {datamodule.name} reads "
            "image files: give real corruption files with robustness.root=DIR (e.g. ImageNet-C), or "
            "robustness.enabled=false"
        )
    images, labels = test.images, test.labels
    if cfg.max_images:
        images, labels = images[: cfg.max_images], labels[: cfg.max_images]
    cache = Path(cfg.cache_dir) / f"{datamodule.name}-c-seed{cfg.seed}-n{len(images)}"
    return generate_and_load(
        images,
        labels,
        cache,
        corruptions,
        severities,
        cfg.seed,
        cfg.workers,
        num_classes=datamodule.num_classes,
        option="robustness.cache_dir",
    )


def _imagenet_c(
    cfg: RobustnessConfig,
    root: Path,
    corruptions: tuple[str, ...],
    severities: tuple[int, ...],
    datamodule: ImageDataModule,
    class_names: Sequence[str] | None,
) -> CorruptedSets:
    preprocess = cfg.preprocess
    transform = crop_transform(datamodule.mean, datamodule.std, datamodule.image_size, preprocess)
    tree = load_imagenet_c(root, corruptions, severities, class_names=class_names, num_classes=datamodule.num_classes)
    n = min(cfg.max_images, len(datamodule.splits["test"])) if cfg.max_images else None
    first = _first_test_images(datamodule, n) if n else None
    conditions, datasets = [], []
    for corruption, severity in tree.sets():
        paths, labels = tree.files(corruption, severity)
        if n:  # the first N of each, against the first N test images: they must be the same images, all N
            if len(paths) < n:
                raise DataError(
                    f"robustness.max_images={cfg.max_images} scores the first {n} images of each ImageNet-C "
                    f"condition, but {root}/{corruption}/{severity} holds {len(paths)}: set it to at most {len(paths)}"
                )
            paths, labels = paths[:n], labels[:n]
            _check_first_images(paths, labels, first, datamodule.name, f"{root}/{corruption}/{severity}")
        check_image_size(paths[0], datamodule.image_size, preprocess)
        conditions.append((corruption, severity))
        datasets.append(ImageFileDataset(paths, labels, transform, datamodule.ledger))
    return CorruptedSets(
        layout="imagenet-c",
        source="real",
        root=root,
        conditions=tuple(conditions),
        datasets=tuple(datasets),
        clean_images=n,
        benchmark="imagenet-c",
        preprocess=preprocess,
        max_images=n if n is not None and n < len(datamodule.splits["test"]) else None,  # a subset: it cut
    )


def _first_test_images(datamodule: ImageDataModule, n: int) -> tuple[list[str] | None, np.ndarray | None]:
    """The first ``n`` test images as a condition's first files must be: their file names where the test split is
    image files (an image folder's :class:`~alternet.data.files.images.FileList`), else their labels (None: nothing
    to compare)."""
    test = datamodule.splits["test"]
    files = getattr(test, "items", None)
    if isinstance(files, FileList):
        return [Path(os.fsdecode(p)).name for p in files.paths[:n]], None
    return None, (np.asarray(test.labels[:n]) if hasattr(test, "labels") else None)


def _check_first_images(
    paths: np.ndarray, labels: np.ndarray, first: tuple[list[str] | None, np.ndarray | None], data: str, where: str
) -> None:
    """ImageNet-C keeps the validation images' file names and class folders: with ``robustness.max_images=N`` the
    first N files of a condition must be the first N test images (:func:`_first_test_images`), or the clean
    reference would be other images."""
    names, first_labels = first
    if names is not None:
        same = [Path(p).name for p in paths] == names
    else:
        same = first_labels is None or np.array_equal(labels, first_labels)
    if not same:
        n = len(paths)
        raise DataError(
            f"robustness.max_images={n} scores the first {n} images of each ImageNet-C condition against the first "
            f"{n} test images, but the first of {where} are other images than {data}'s test split "
            "in order: score every image (robustness.max_images=null max_images=null), or test on the split "
            "ImageNet-C was made from"
        )
