"""Any image folder, and ImageNet: ``root/train/<class>/*``, ``root/val/<class>/*``, optionally ``root/test/``.

Images are decoded in the loader workers. Class names are the train folder names, sorted; they travel with
checkpoints and exports so a pulled model predicts names. The training split can instead stream from LitData
shards written by ``alternet shards`` (``data.train_shards``), for many nodes; validation and test
always read the folders, in order, so evaluation stays exact.

Splits: validation is ``val/`` when it exists, otherwise a seeded, class-stratified hold-out of ``data.val_size``
from ``train/`` (0: none). Test is ``test/`` when it exists, else ``val/``, else the hold-out.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch.utils.data import DataLoader

from ...dataset_facts import FACTS
from ...errors import AlternetWarning, DataError
from ..base import ImageDataModule, split_size, stratified_holdout
from ..config import FolderDataConfig, check_folder_settings
from ..workers import WorkerLedger, init_loader_worker
from .dali import DaliLoader, check_dali_augment
from .images import DecodingDataset, FileList, SkipCounter, scan_split
from .listing import class_folders
from .shards import StreamingImages, StreamingLoader, read_shard_classes, shard_images
from .transforms import DraftedCrop, drafted, file_transform


class ImageFolderDataModule(ImageDataModule):
    name = "imagefolder"
    augment_section = "files"
    settings = FolderDataConfig
    default_mean, default_std = FACTS["in1k"].mean, FACTS["in1k"].std  # ImageNet's, for any folder
    expected_classes: ClassVar[int | None] = None  # a fixed class count (ImageNet) checked before training

    def __init__(
        self,
        *,
        root: str = "data",
        train_shards: str | None = None,
        skip_corrupt: bool = False,
        crop_pct: float = 0.875,
        crop_mode: str = "center",
        interpolation: str = "bilinear",
        decode: str = "exact",
        loader: str = "torch",
        **kwargs: Any,
    ):
        super().__init__(root=root, **kwargs)
        check_folder_settings(
            crop_pct, crop_mode, interpolation, decode, loader, train_shards, skip_corrupt, self.subset
        )
        self.decode, self.loader = decode, loader
        if loader == "dali":
            check_dali_augment(self.augment)
        self.train_shards = train_shards
        self.skip_corrupt = skip_corrupt
        self.crop_pct, self.crop_mode = crop_pct, crop_mode
        self.interpolation = interpolation
        self._skipped = SkipCounter() if skip_corrupt else None
        self.ledger = WorkerLedger()  # what each loader worker reads, for a worker that dies mid-sample
        self._classes: list[str] | None = None
        self._shards_record: dict[str, Any] = {}  # classes.json of data.train_shards, read with the class folders

    def check_augment(self) -> None:
        if self.augment:
            file_transform(self.mean, self.std, self.image_size, self.augment)

    def train_transform(self) -> Any:
        """The training split's pipeline (folders and shards alike): timm's, augmenting by :attr:`augment`
        (recipe.augment.files; null: the evaluation pipeline, its crop settings included)."""
        return (
            file_transform(self.mean, self.std, self.image_size, self.augment)
            if self.augment
            else self.eval_transform()
        )

    def eval_transform(self) -> Any:
        """The evaluation splits' pipeline (timm's ``validate.py``: resize by ``crop_pct``, centre crop); also the
        one out-of-distribution images of image files go through (:mod:`alternet.evaluation.ood`)."""
        return file_transform(
            self.mean,
            self.std,
            self.image_size,
            crop_pct=self.crop_pct,
            crop_mode=self.crop_mode,
            eval_interpolation=self.interpolation,
        )

    def train_pipeline(self) -> tuple[DraftedCrop | None, Any]:
        """(the crop made while decoding, the rest): with ``data.decode=fast`` and a random-resized crop to draw
        (an augmenting recipe), the crop decodes no more of a JPEG than it needs; else the whole pipeline after a
        full decode."""
        transform = self.train_transform()
        if self.decode == "fast" and self.augment:
            return drafted(transform)
        return None, transform

    # the folder layout ---------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return Path(self.root).expanduser()

    def _split_dir(self, split: str) -> Path | None:
        path = self.directory / split
        return path if path.is_dir() else None

    @property
    def class_names(self) -> list[str]:
        if self._classes is None:
            train = self.directory / "train"
            if not train.is_dir():
                raise DataError(
                    f"{self.name}: {train} not found. data.root must hold train/<class>/<images> (and optionally "
                    "val/ and test/ in the same layout)"
                )
            classes = class_folders(train)
            if len(classes) < 2:
                raise DataError(
                    f"{self.name}: {train} holds one class folder ({classes[0]}); a classifier needs at least two: "
                    "add a folder per class under train/"
                )
            if self.expected_classes and len(classes) != self.expected_classes:
                raise DataError(
                    f"{self.name}: found {len(classes)} class folders in {train}, expected {self.expected_classes}. "
                    "Arrange the data as train/<wnid>/*.JPEG and val/<wnid>/*.JPEG (docs/training.md, ImageNet)"
                )
            if self.train_shards:
                written = read_shard_classes(self.train_shards)
                self._shards_record = written or {}
                shard_classes, source = (list(written["classes"]), written.get("source")) if written else (None, None)
                if written is None:
                    warnings.warn(
                        f"data.train_shards={self.train_shards} is remote: its classes.json is not checked against "
                        f"{train}; the shards must come from the same class folders",
                        AlternetWarning,
                        stacklevel=2,
                    )
                elif source is not None and Path(source) != train.resolve():  # moved data, or another split's images
                    warnings.warn(
                        f"data.train_shards={self.train_shards} was written from {source}, not from {train}: its "
                        "images must be this train/'s, or validation and test may score images it trained on",
                        AlternetWarning,
                        stacklevel=2,
                    )
                if written is not None and shard_classes != classes:
                    only_shards = sorted(set(shard_classes) - set(classes))[:3]
                    only_folder = sorted(set(classes) - set(shard_classes))[:3]
                    differ = "; ".join(
                        [f"only in the shards: {', '.join(only_shards)}"] * bool(only_shards)
                        + [f"only in the folder: {', '.join(only_folder)}"] * bool(only_folder)
                    )
                    raise DataError(
                        f"data.train_shards={self.train_shards} was written for other classes than {train} "
                        f"({len(shard_classes)} vs {len(classes)} classes; {differ or 'in another order'}); "
                        f"write them anew into a new folder (alternet shards {train.parent} NEW_DIR) and train with "
                        "data.train_shards=NEW_DIR"
                    )
            self._classes = classes
        return self._classes

    @property
    def num_classes(self) -> int:  # type: ignore[override]  # a folder's class count is found, not declared
        return len(self.class_names)

    @property
    def has_validation(self) -> bool:
        return self._split_dir("val") is not None or bool(self.val_size)

    @property
    def skipped_images(self) -> int | None:
        return self._skipped.count if self._skipped is not None else None

    # Lightning hooks ------------------------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        classes, train = self.class_names, self._train_files
        listed = self._shards_record.get("listed")  # absent from older shards, and where no shards are streamed
        listing = self._shards_record.get("listing")  # the listing's digest (shards since 2026-12-01)
        if (listed is not None and listed != len(train)) or (listing is not None and listing != train.digest()):
            now = f"{len(train)} images" if listed != len(train) else "other files (moved, renamed or replaced)"
            warnings.warn(
                f"data.train_shards={self.train_shards} were written from {listed} images of "
                f"{self.directory / 'train'}, which holds {now} now: the shards train on what the folder held then, "
                "and validation or test may score images they hold; write the shards anew into a new folder "
                f"(alternet shards {self.directory} NEW_DIR) and train with data.train_shards=NEW_DIR",
                AlternetWarning,
                stacklevel=2,
            )
        val_dir, test_dir = self._split_dir("val"), self._split_dir("test")
        val = scan_split(val_dir, classes) if val_dir else None
        if val is None and self.val_size:
            held = stratified_holdout(train.labels, split_size(self.val_size, len(train)), self.split_seed)
            train, val = train.take(np.flatnonzero(~held)), train.take(np.flatnonzero(held))
        self._train_pool = len(train)
        train = train.take(np.flatnonzero(self._subset_mask(train.labels)))
        if not self.train_shards:  # streamed shards: their classes are checked against the folders when written
            self.check_every_class_trains(train.labels)
        test = scan_split(test_dir, classes) if test_dir else val
        if test is None:
            raise DataError(
                f"{self.name}: {self.directory} has neither val/ nor test/ and data.val_size=0: nothing to evaluate "
                "on; add val/ or test/, or hold out part of train/ with data.val_size (e.g. 0.1)"
            )
        eval_transform = self.eval_transform()
        crop, transform = self.train_pipeline()
        if self.train_shards:
            self.splits["train"] = StreamingImages(
                self.train_shards, transform, seed=self.seed, ledger=self.ledger, crop=crop
            )
        else:
            self.splits["train"] = DecodingDataset(train, transform, self._skipped, self.ledger, crop)
        if val is not None:
            self.splits["val"] = DecodingDataset(val, eval_transform, self._skipped, self.ledger)
        self.splits["test"] = DecodingDataset(test, eval_transform, self._skipped, self.ledger)
        if self.train_clean_size:
            clean = train.take(np.flatnonzero(self._train_clean_mask(train.labels)))
            self.splits["train_clean"] = DecodingDataset(clean, eval_transform, self._skipped, self.ledger)
        self.files = {"train": train, "val": val, "test": test}

    def train_dataloader(self) -> DataLoader | DaliLoader:
        if self.loader == "dali":
            return self._dali_loader()
        return self._shards_loader() if self.train_shards else super().train_dataloader()

    def check_before_fit(self) -> None:
        if not self.train_shards:
            super().check_before_fit()
            return
        if self.holds_out_of_train:
            raise DataError(
                f"data.val_size={self.val_size} holds validation images out of {self.directory / 'train'}, which "
                f"data.train_shards streams whole: they would be trained on. Give {self.directory} a val/ folder, or "
                "a test/ folder and data.val_size=0"
            )
        if (images := self.train_images()) is not None:  # counted from their index: LitData's reader is opened
            self.check_batch(images)  # inside the run, where it reads its ranks

    def train_images(self) -> int | None:
        return shard_images(self.train_shards) if self.train_shards else super().train_images()

    def _takes_from_train(self, key: str) -> bool:  # streamed shards hold train/ whole; a val/ folder is validation
        return not self.train_shards and (key == "subset" or self._split_dir("val") is None)

    def train_batches(self) -> int:
        if not self.train_shards:
            return super().train_batches()
        self.setup("fit")
        return len(self._shards_loader())  # LitData's length is already this rank's share (and its workers')

    def _dali_loader(self) -> DaliLoader:
        sampler = self._train_sampler()
        return DaliLoader(
            self.splits["train"],
            sampler,
            batch_size=self.batch_size,
            drop_last=self._drop_last(len(sampler)),
            augment=self.augment,
            image_size=self.image_size,
            mean=self.mean,
            std=self.std,
            threads=self._dali_threads(),
            device=self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu"),
            seed=self.seed,
        )

    def _dali_threads(self) -> int:
        """DALI's CPU threads: ``data.num_workers``, or with ``auto`` this rank's share of the cores."""
        workers, most = self.worker_counts()
        return max(1, most if self.auto_workers else workers)

    def _shards_loader(self) -> DataLoader:
        trainer = self.trainer
        ranks = (trainer.world_size, trainer.global_rank, trainer.num_nodes) if trainer is not None else (1, 0, 1)
        self.splits["train"].share(*ranks)
        loader = StreamingLoader(
            self.splits["train"],
            batch_size=self.batch_size,
            drop_last=True,
            num_workers=self.worker_counts()[0],  # LitData's loader does not grow its workers
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            worker_init_fn=init_loader_worker,
        )
        return self.on_node(loader)

    @cached_property
    def _train_files(self) -> FileList:
        return scan_split(self.directory / "train", self.class_names)

    @property
    def holds_out_of_train(self) -> bool:
        """Validation is a seeded hold-out of train/ (no val/ folder, ``data.val_size`` set)."""
        return self._split_dir("val") is None and bool(self.val_size)

    @property
    def test_is_validation(self) -> bool:
        """No test/ folder: the test split is the validation split (val/, or the hold-out)."""
        return self._split_dir("test") is None

    def facts(self) -> dict[str, Any]:
        """The data set's facts, and where validation (or test) is a hold-out of train/, a digest of train/'s
        listing: an evaluation draws that hold-out again only from the same listing."""
        listing = self._train_files.digest() if self.holds_out_of_train else None
        return replace(
            super().facts(),
            crop_pct=self.crop_pct,
            crop_mode=self.crop_mode,
            interpolation=self.interpolation,
            train_listing=listing,
        )

    def _read_from(self) -> str:
        if self.loader == "dali":
            threads = self._dali_threads()
            return f", train decoded and augmented by DALI ({threads} thread{'s' * (threads > 1)})"
        return f", train streamed from {self.train_shards}" if self.train_shards else ""

    @property
    def grows_workers(self) -> bool:
        return self.auto_workers and not self.train_shards and self.loader == "torch"  # LitData's, DALI's keep theirs


class ImageNetDataModule(ImageFolderDataModule):
    """ILSVRC-2012 in the class-folder layout (docs/training.md, ImageNet): 1000 classes, named by their WordNet ids."""

    name = "imagenet"
    expected_classes = FACTS["in1k"].num_classes


__all__ = ["ImageFolderDataModule", "ImageNetDataModule"]
