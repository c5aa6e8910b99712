"""Data sets read from image files (any class-folder tree, ImageNet; the training split optionally streamed from
LitData shards), decoded in the loader workers and augmented by timm's ImageNet pipeline; ``alternet shards`` writes
the shards (:mod:`.cli`, imported without torch: the names below load on first use)."""

from __future__ import annotations

from ...lazy import exports

__all__ = ["ImageFolderDataModule", "ImageNetDataModule"]
__getattr__, __dir__ = exports(__name__, {"ImageFolderDataModule": "folder", "ImageNetDataModule": "folder"})
