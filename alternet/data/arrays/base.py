"""The base of the data sets held in memory as uint8 arrays (CIFAR, digits): :class:`ArrayDataModule` reads each
split once (:meth:`~ArrayDataModule.load_split`), holds out the validation split with a seeded permutation, and
serves an :class:`ArrayDataset` per split whose albumentations pipeline is reseeded per sample, or whose batches
go through one :class:`~.transforms.BatchPipeline` where the augmentation is crop and flip alone."""

from __future__ import annotations

import albumentations as A
import numpy as np
import torch
from torch.utils.data import Dataset

from ...errors import DataError
from ..base import ImageDataModule, split_size
from .transforms import BatchPipeline, augmentation_ops, build_transform, reseed


class ArrayDataset(Dataset):
    """uint8 HWC images and integer labels, transformed on access.

    A key may be an index or ``(index, seed)``: the seed fixes that sample's augmentation. With ``batch``, a
    loader's batch of keys goes through it at once (``__getitems__``, which ``DataLoader`` calls); indexing one
    sample still takes ``transform``.
    """

    def __init__(
        self, images: np.ndarray, labels: np.ndarray, transform: A.Compose, batch: BatchPipeline | None = None
    ):
        if len(images) != len(labels):
            raise DataError(f"{len(images)} images but {len(labels)} labels")
        self.images = images
        self.labels = labels.astype(np.int64)
        self.transform = transform
        self.batch = batch

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        index, seed = key if isinstance(key, tuple) else (key, None)
        if seed is not None:
            reseed(self.transform, seed)
        return self.transform(image=self.images[index])["image"], int(self.labels[index])

    def __getitems__(self, keys: list[int | tuple[int, int]]) -> list[tuple[torch.Tensor, int]]:
        if self.batch is None:
            return [self[key] for key in keys]
        seeded = bool(keys) and isinstance(keys[0], tuple)
        indices = np.fromiter((key[0] if seeded else key for key in keys), np.intp, len(keys))
        seeds = np.fromiter((key[1] for key in keys), np.uint64, len(keys)) if seeded else None
        images = self.batch(self.images[indices], seeds)
        return list(zip(images.unbind(0), self.labels[indices].tolist(), strict=True))


class ArrayDataModule(ImageDataModule):
    """Base of the in-memory data sets. Subclasses implement :meth:`load_split` and set the class attributes."""

    IN_MEMORY = True

    augment_section = "arrays"
    stored_size: int | None = None  # the side the arrays are stored at (setup reads it): CIFAR's 32

    def check_augment(self) -> None:
        if self.augment:
            augmentation_ops(self.augment, self.image_size, self.mean)

    def train_transform(self) -> A.Compose:
        """The training split's pipeline: :attr:`augment` (recipe.augment.arrays), normalisation, a tensor."""
        return build_transform(self.mean, self.std, self.image_size, self.augment, self.stored_size)

    def load_split(self, train: bool) -> tuple[np.ndarray, np.ndarray]:
        """(images uint8 (N, H, W, C), labels int (N,)) of the train pool or the test split."""
        raise NotImplementedError

    @property
    def class_names(self) -> list[str]:
        return [str(i) for i in range(self.num_classes)]

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        images, labels = self._checked(*self.load_split(train=True), train=True)
        self.stored_size = images.shape[1]  # CIFAR's 32 px whatever data.image_size asks: resized image by image
        n_val = split_size(self.val_size, len(images))
        order = np.random.default_rng(self.split_seed).permutation(len(images))
        val_idx, train_idx = np.sort(order[:n_val]), np.sort(order[n_val:])
        self._train_pool = len(train_idx)
        train_idx = train_idx[self._subset_mask(labels[train_idx])]
        self.check_every_class_trains(labels[train_idx])
        eval_transform = build_transform(self.mean, self.std, self.image_size, stored_size=self.stored_size)
        evaluate, train = self._batch_pipelines(images)
        self.splits["train"] = ArrayDataset(images[train_idx], labels[train_idx], self.train_transform(), train)
        if n_val:
            self.splits["val"] = ArrayDataset(images[val_idx], labels[val_idx], eval_transform, evaluate)
        if self.train_clean_size:
            clean = train_idx[self._train_clean_mask(labels[train_idx])]
            self.splits["train_clean"] = ArrayDataset(images[clean], labels[clean], eval_transform, evaluate)
        test_images, test_labels = self._checked(*self.load_split(train=False), train=False, size=images.shape[1:3])
        self.splits["test"] = ArrayDataset(test_images, test_labels, eval_transform, evaluate)

    def _checked(
        self, images: np.ndarray, labels: np.ndarray, *, train: bool, size: tuple[int, ...] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """What :meth:`load_split` gave, refused in one line before any work where it is not uint8 (N, H, W, 3)
        images (of the training split's size) and N integer labels of the data set's classes: float images were
        divided by 255 once more and trained to chance, others failed mid-run in a traceback or a wrong advice."""
        images, labels = np.asarray(images), np.asarray(labels)
        given = f"{self.name}: load_split(train={train}) gave"
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
            raise DataError(
                f"{given} {images.dtype} images of shape {images.shape}; it must give uint8 RGB images (N, H, W, 3) "
                "in 0-255, e.g. np.round(x * 255).astype(np.uint8), or np.repeat(grey[..., None], 3, axis=-1)"
            )
        if size is not None and images.shape[1:3] != size:
            raise DataError(
                f"{given} {images.shape[1]}x{images.shape[2]} images where the training split's are "
                f"{size[0]}x{size[1]}: give every split one size"
            )
        if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
            raise DataError(
                f"{given} labels of shape {labels.shape} and dtype {labels.dtype} for {len(images)} images; it must "
                "give one integer class index per image"
            )
        if len(labels) and (labels.min() < 0 or labels.max() >= self.num_classes):
            raise DataError(
                f"{given} labels in [{labels.min()}, {labels.max()}]; they must lie in [0, {self.num_classes - 1}] "
                f"for its {self.num_classes} classes (num_classes)"
            )
        return images, labels

    def _batch_pipelines(self, images: np.ndarray) -> tuple[BatchPipeline | None, BatchPipeline | None]:
        """(evaluation, training) :class:`BatchPipeline`: where the images are stored at the training size, and for
        training where the augmentation is crop and flip alone (None: the per-image pipeline)."""
        if images.shape[1:3] != (self.image_size, self.image_size):
            return None, None
        evaluate = BatchPipeline(self.mean, self.std, self.image_size)
        served = BatchPipeline.serves(self.augment)
        return evaluate, BatchPipeline(self.mean, self.std, self.image_size, self.augment) if served else None
