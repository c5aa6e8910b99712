"""What a folder of image files holds, by the names on disk alone (torch-free: the config checks read it before
any import of torch): the image files under a folder, a split's class folders, and the CIFAR sets' folders."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ...errors import DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
CIFAR_FOLDERS = {"cifar-10-batches-py": "cifar10", "cifar-100-python": "cifar100"}  # torchvision's -> data.name


def class_folders(directory: Path) -> list[str]:
    """The class folder names of a split directory, sorted (their positions are the class indices)."""
    if not directory.is_dir():
        raise DataError(f"{directory} is not a directory: expected one folder per class in it (<split>/<class>/*)")
    names = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir() and not entry.name.startswith("."))
    if not names:
        flat = any(entry.is_file() for entry in os.scandir(directory))
        hint = (  # ImageNet's official validation images come so, their labels in the devkit
            "; images lying flat in it (as ImageNet's val/ comes) go into their class folders first (docs/training.md, "
            '"ImageNet": torchvision arranges them)'
            if flat
            else ""
        )
        raise DataError(f"{directory} holds no class folders: expected {directory}/<class>/<image> files{hint}")
    return names


def images_under(folder: Path) -> list[str]:
    """Every image file under ``folder`` (any depth), in sorted order, as paths relative to ``folder``'s parent;
    hidden files and folders (``.ipynb_checkpoints``, macOS's ``._NAME.jpg``) left out, as hidden class folders are."""
    return list(walk_images(folder))


def walk_images(folder: Path) -> Iterator[str]:
    """:func:`images_under`, one at a time (``next(walk_images(folder), None)``: whether there is any)."""
    for parent, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = os.path.relpath(parent, folder.parent)
        shown = (f for f in sorted(files) if not f.startswith("."))
        yield from (os.path.join(rel, f) for f in shown if f.lower().endswith(IMAGE_EXTENSIONS))
