"""Data sets held in memory as uint8 arrays (CIFAR-10/100, scikit-learn's digits), augmented by albumentations and
an OpenCV port of timm's RandAugment."""

from __future__ import annotations

from .base import ArrayDataModule, ArrayDataset
from .cifar import CIFAR10DataModule, CIFAR100DataModule
from .digits import DigitsDataModule

__all__ = ["ArrayDataModule", "ArrayDataset", "CIFAR10DataModule", "CIFAR100DataModule", "DigitsDataModule"]
