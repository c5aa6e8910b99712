"""CIFAR-10 and CIFAR-100 from the original python-pickle files, md5-verified.

``data.root`` is the directory that holds ``cifar-10-batches-py/`` or ``cifar-100-python/`` (the
folder itself is accepted too). ``data.download=true`` fetches the archive with torchvision.
"""

from __future__ import annotations

import functools
import logging
import pickle
from pathlib import Path
from typing import ClassVar
from urllib.error import URLError

import numpy as np
from torchvision.datasets import CIFAR10, CIFAR100

from ...dataset_facts import FACTS
from ...errors import DataError
from ...files import file_digest, lock_file
from .base import ArrayDataModule

log = logging.getLogger(__name__)
DOWNLOAD_LOCK = ".alternet-download.lock"


def _wait_for(name: str, root: Path, owner: str) -> None:
    log.warning("%s is being downloaded into %s by another process (%s); waiting for it", name, root, owner)


class CIFARDataModule(ArrayDataModule):
    """Shared loader for both CIFARs; subclasses name the folder, files and label key."""

    folder: ClassVar[str]
    train_files: ClassVar[dict[str, str]]  # file name -> md5
    test_files: ClassVar[dict[str, str]]
    meta_file: ClassVar[tuple[str, str]]
    label_key: ClassVar[str]
    names_key: ClassVar[str]
    url_page = "https://www.cs.toronto.edu/~kriz/cifar.html"
    _fetched = False  # data.download done in this process

    @property
    def directory(self) -> Path:
        root = Path(self.root).expanduser()
        return root if root.name == self.folder else root / self.folder

    def prepare_data(self) -> None:
        """With ``data.download=true``, the archive fetched and unpacked into ``data.root`` unless its files are
        there and whole (torchvision checks their md5): before the first file is read (the checks before training,
        an evaluation's class names), once per process, under a lock in ``data.root`` so that the ranks of a
        torchrun or srun launch wait for one download instead of writing the same files. Files all there are left
        to :meth:`verify` (a read-only ``data.root`` holding them takes no lock)."""
        if not self.download or self._fetched or not self._missing():
            return
        dataset = CIFAR100 if self.num_classes == 100 else CIFAR10
        root = self.directory.parent
        try:
            root.mkdir(parents=True, exist_ok=True)
            handle = lock_file(root / DOWNLOAD_LOCK, wait=functools.partial(_wait_for, self.name, root))
            try:
                dataset(str(root), download=True)  # the archive holds both splits
            finally:
                if handle is not None:
                    handle.close()
        except (URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise DataError(
                f"cannot download {self.name} ({dataset.url}) to {root}: {reason}. Without network, fetch the "
                f"archive on another machine and unpack it so that {self.directory} exists"
            ) from None
        self._fetched = True

    @property
    def _expected(self) -> dict[str, str]:
        """Each file of the data set and its md5."""
        return {**self.train_files, **self.test_files, self.meta_file[0]: self.meta_file[1]}

    def _missing(self) -> list[str]:
        return [name for name in self._expected if not (self.directory / name).is_file()]

    def verify(self) -> None:
        """Raise a :class:`DataError` naming what is missing or corrupt, and how to fix it."""
        expected, missing = self._expected, self._missing()
        if missing:
            raise DataError(
                f"{self.name} not found: looked in {self.directory.resolve()} for {sorted(expected)}; "
                f"missing {missing}. Point data.root at the directory containing '{self.folder}/' "
                f"(e.g. data.root=/path/to/datasets), or set data.download=true to fetch it ({self.url_page})."
            )
        for name, md5 in expected.items():
            found = file_digest(self.directory / name, "md5")
            if found != md5:
                raise DataError(
                    f"{self.name} file {self.directory / name} is corrupt: md5 {found}, expected {md5}. "
                    "Delete it and download again (data.download=true)."
                )

    def load_split(self, train: bool) -> tuple[np.ndarray, np.ndarray]:
        self.prepare_data()
        if train:
            self.verify()
        batches = [self._unpickle(name) for name in (self.train_files if train else self.test_files)]
        data = np.concatenate([b["data"] for b in batches])
        labels = np.concatenate([np.asarray(b[self.label_key], dtype=np.int64) for b in batches])
        images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        return np.ascontiguousarray(images), labels

    @property
    def class_names(self) -> list[str]:
        return list(self._unpickle(self.meta_file[0])[self.names_key])

    def _unpickle(self, name: str) -> dict:
        self.prepare_data()
        path = self.directory / name
        try:
            with open(path, "rb") as f:
                return pickle.load(f, encoding="latin1")
        except FileNotFoundError:
            raise DataError(
                f"{path} does not exist: set data.root to the folder that holds {self.folder}/ (alternet evaluate: "
                "data_root=DIR), or data.download=true to fetch it there"
            ) from None
        except (OSError, pickle.UnpicklingError, EOFError) as error:
            raise DataError(f"cannot read {path}: {error}. Re-download with data.download=true.") from error


class CIFAR10DataModule(CIFARDataModule):
    name = "cifar10"
    num_classes = 10
    default_mean, default_std = FACTS["cifar10"].mean, FACTS["cifar10"].std
    folder = CIFAR10.base_folder
    train_files: ClassVar[dict[str, str]] = dict(CIFAR10.train_list)
    test_files: ClassVar[dict[str, str]] = dict(CIFAR10.test_list)
    meta_file = (CIFAR10.meta["filename"], CIFAR10.meta["md5"])
    label_key = "labels"
    names_key = CIFAR10.meta["key"]


class CIFAR100DataModule(CIFARDataModule):
    name = "cifar100"
    num_classes = 100
    default_mean, default_std = FACTS["cifar100"].mean, FACTS["cifar100"].std
    folder = CIFAR100.base_folder
    train_files: ClassVar[dict[str, str]] = dict(CIFAR100.train_list)
    test_files: ClassVar[dict[str, str]] = dict(CIFAR100.test_list)
    meta_file = (CIFAR100.meta["filename"], CIFAR100.meta["md5"])
    label_key = "fine_labels"
    names_key = CIFAR100.meta["key"]
