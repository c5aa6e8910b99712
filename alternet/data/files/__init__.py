"""Data sets read from image files (any class-folder tree, ImageNet; the training split optionally streamed from
LitData shards), decoded in the loader workers and augmented by timm's ImageNet pipeline."""

from __future__ import annotations

from .folder import ImageFolderDataModule, ImageNetDataModule

__all__ = ["ImageFolderDataModule", "ImageNetDataModule"]
