"""``data``: the typed section of each data family, chosen by ``data.name`` (:func:`data_section`).

Each DataModule names the section its keyword arguments form (``ImageDataModule.settings``): in-memory arrays take
:class:`DataConfig`, image folders and ImageNet :class:`FolderDataConfig`. A user's data module registered under its
own name (:func:`alternet.data.register_datamodule`) takes its base's, or declares a subclass with its own keys.
The rules on the data keys live here and nowhere else: the sections check them as they are made, the DataModules'
constructors (the Python API) call the same functions.

The schema imports no torch, so that the command line's help answers at once: the sections by data set name are a
table here (:data:`DATA_SECTIONS`), which the registry of DataModules extends, and the loader-workers rule
(:func:`check_workers`) lives here for the loaders to call.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigValueError, is_integer, one_of, require
from ..typed import Section, build, integer

INTERPOLATIONS = ("bilinear", "bicubic")  # data.interpolation: the evaluation resize of image files
CROP_MODES = ("center", "squash", "border")  # data.crop_mode: timm's evaluation crops (timm.data.create_transform)
DECODES = ("exact", "fast")  # data.decode: training images decoded whole, or at the DCT scale their crop needs
LOADERS = ("torch", "dali")  # data.loader: the training split through torch's DataLoader, or NVIDIA DALI
DESCRIPTIVE = ("name", "num_classes")  # keys that name the data set rather than configure its module


def _channels(low: float, low_included: bool) -> Any:
    """Three numbers in [low, 1] (``(low, 1]`` when ``low_included`` is false), one per RGB channel."""

    def rule(values: Any) -> bool:
        numbers = [float(v) for v in values if not isinstance(v, bool | str)]
        return len(numbers) == len(values) == 3 and all(
            (v >= low if low_included else v > low) and v <= 1 for v in numbers
        )

    return rule


# data.mean and data.std: of images scaled to [0, 1] (the pipeline divides the pixels by 255 before normalising)
_UNITS = "one per RGB channel, of pixels scaled to [0, 1] (statistics in 0-255 units: divide them by 255)"
STATISTICS = {
    "mean": (_channels(0.0, True), f"must be 3 values in [0, 1], {_UNITS}"),
    "std": (_channels(0.0, False), f"must be 3 values in (0, 1], {_UNITS}"),
}


def check_statistics(**given: tuple[str, Any]) -> None:
    """``mean=(NAME, VALUE), std=(NAME, VALUE)`` as a data module is built with them (``data.mean`` from a config or
    in Python, or its class's ``default_mean``), refused in one line naming them: a std of 0 made every image inf,
    statistics in 0-255 units nearly constant images."""
    for key, (name, value) in given.items():
        rule, expectation = STATISTICS[key]
        require(name, tuple(value) if isinstance(value, list) else value, rule, expectation)


@dataclass(kw_only=True)
class DataConfig(Section):
    """The keys of every data set (``conf/data/_base.yaml`` and each option's)."""

    name: str
    image_size: int
    mean: list[float] | None  # null: the data set's own statistics
    std: list[float] | None
    val_size: int | float  # a count, or a fraction in (0, 1)
    num_workers: int | str  # auto or a count
    split_seed: int
    subset: float | None
    subset_repeat: bool
    train_clean_size: int
    root: str | None = None  # where the data set lives (none for the bundled digits)
    download: bool | None = None
    pin_memory: bool | None = None
    num_classes: int | None = None  # a data set's class count, where a config states it

    def check(self) -> None:
        self.require("image_size", integer(1), "must be an integer >= 1")
        for key, (rule, expectation) in STATISTICS.items():
            self.require(key, rule, f"{expectation} (or null: the data set's own)")
        check_val_size(self.val_size, "val_size")
        check_subset(self.subset, self.subset_repeat, self.train_clean_size)
        check_workers(self.num_workers, "num_workers")

    def arguments(self) -> dict[str, Any]:
        """The DataModule's keyword arguments: the set keys that configure it."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in DESCRIPTIVE}
        return {k: v for k, v in values.items() if v is not None}


@dataclass(kw_only=True)
class FolderDataConfig(DataConfig):
    """Image files: a folder of class folders, ImageNet (``conf/data/imagefolder.yaml``)."""

    crop_pct: float  # evaluation: resize to image_size / crop_pct, then centre crop
    crop_mode: str  # how: center (the shorter side), squash (both sides) or border (fit, then pad), as timm's
    decode: str  # exact: the training images decoded whole; fast: at the smallest DCT scale their crop needs
    loader: str = "torch"  # the training split through loader workers (torch) or NVIDIA DALI (dali); runs before
    # 2026-11-30 record none
    interpolation: str  # the evaluation resize
    skip_corrupt: bool
    train_shards: str | None  # LitData shards of train/ to stream instead of the files

    def check(self) -> None:
        super().check()
        check_folder_settings(
            self.crop_pct,
            self.crop_mode,
            self.interpolation,
            self.decode,
            self.loader,
            self.train_shards,
            self.skip_corrupt,
            self.subset,
        )


def check_folder_settings(
    crop_pct: Any,
    crop_mode: Any,
    interpolation: Any,
    decode: Any,
    loader: Any,
    train_shards: str | None,
    skip_corrupt: bool,
    subset: float | None,
) -> None:
    """The one check of an image folder's own settings (the config's and the data module's)."""
    check_crop_pct(crop_pct)
    one_of("data.interpolation", interpolation, INTERPOLATIONS)
    one_of("data.crop_mode", crop_mode, CROP_MODES)
    one_of("data.decode", decode, DECODES)
    check_loader(loader, decode, train_shards, skip_corrupt)
    if subset is not None and train_shards:
        raise ConfigValueError(
            "data.subset cannot thin streamed shards (data.train_shards): write shards of the subset instead "
            "(alternet shards on a folder of it)"
        )


def check_workers(setting: Any, key: str = "num_workers") -> None:
    """The one check of a loader-workers setting (``data.num_workers``, evaluation's ``num_workers``): auto, null
    or an integer >= 0 (the config checks call it before any work, :func:`loader_workers` too)."""
    require(key, setting, lambda v: v in (None, "auto") or is_integer(v, 0), "must be auto or an integer >= 0")


def check_loader(
    loader: Any, decode: str = "exact", train_shards: str | None = None, skip_corrupt: bool = False
) -> None:
    """The one check of ``data.loader``: DALI installed (the ``alternet[dali]`` extra), and none of the settings
    only the torch loader honours."""
    one_of("data.loader", loader, LOADERS)
    if loader != "dali":
        return
    if importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None:
        raise ConfigValueError(
            "data.loader=dali needs NVIDIA DALI, which is not installed: pip install 'alternet[dali]' (or "
            "data.loader=torch)"
        )
    refused = {
        f"data.train_shards={train_shards}": (train_shards, "DALI reads the files; data.loader=torch streams shards"),
        "data.skip_corrupt=true": (skip_corrupt, "DALI stops at an unreadable image; data.loader=torch skips them"),
        f"data.decode={decode}": (decode != "exact", "DALI decodes only the crop's region of a JPEG itself"),
    }
    for setting, (set_, why) in refused.items():
        if set_:
            raise ConfigValueError(f"{setting} does not apply with data.loader=dali ({why}): leave it at its default")


def check_val_size(val_size: Any, key: str = "data.val_size") -> None:
    """The one check of ``data.val_size`` on its own (the data module's split also compares it with the images
    there are)."""
    require(
        key,
        val_size,
        lambda v: is_integer(v, 0) or (isinstance(v, float) and 0 < v < 1),
        "must be a count >= 0 or a fraction in (0, 1)",
    )


def check_subset(fraction: Any, repeat: Any = False, train_clean_size: Any = 0) -> None:
    """The one check of ``data.subset``, ``data.subset_repeat`` and ``data.train_clean_size``."""
    if fraction is not None and (
        isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1
    ):
        raise ConfigValueError(f"data.subset={fraction!r} is invalid: a fraction of the training split in (0, 1]")
    require("data.subset_repeat", repeat, lambda v: isinstance(v, bool), "true or false")
    if isinstance(train_clean_size, bool) or not isinstance(train_clean_size, int) or train_clean_size < 0:
        raise ConfigValueError(
            f"data.train_clean_size={train_clean_size!r} is invalid: an image count >= 0 (0: no train_clean metrics)"
        )


def check_crop_pct(crop_pct: Any, key: str = "data.crop_pct") -> None:
    require(key, crop_pct, lambda v: 0 < v <= 1, "must be in (0, 1]")


# data.name -> the section its DataModule's keyword arguments form (its ``settings``; tests/data check the two agree);
# alternet.data.register_datamodule adds a user's
DATA_SECTIONS: dict[str, type[DataConfig]] = {
    "digits": DataConfig,
    "cifar10": DataConfig,
    "cifar100": DataConfig,
    "imagefolder": FolderDataConfig,
    "imagenet": FolderDataConfig,
}


def data_section(values: Mapping[str, Any]) -> type[DataConfig]:
    """The section a data config is typed by: its DataModule's (``data.name``, with the known names listed)."""
    if values.get("name") in (None, "???"):
        raise ConfigValueError("data.name must be set")
    one_of("data.name", values.get("name"), DATA_SECTIONS)
    return DATA_SECTIONS[values["name"]]


def data_config(values: Mapping[str, Any]) -> DataConfig:
    """A data section (as composed, or as a run's config.yaml keeps it) as its data set's typed object, checked."""
    return build(data_section(values), values, "data.")
