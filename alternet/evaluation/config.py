"""The typed evaluation settings (conf/evaluation/default.yaml): ``alternet evaluate``'s root, and ``evaluate:`` in a
training config. Keys and types, and each key's rule beside it; every default is in the YAML (:mod:`alternet.typed`).
:class:`alternet.evaluation.Evaluator` takes an :class:`EvaluationConfig`, checked once, when it is made.

The schema imports no torch, so that the command line's help answers at once: each rule and its table are torch-free
(the corruption names: :mod:`alternet.data.corrupted.names`); whether ``device`` exists on this machine is asked by
the commands before any work (:func:`alternet.evaluation.inference.choose_device`), not here."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.config import check_workers
from ..data.corrupted.names import CORRUPTIONS, EXTRA_CORRUPTIONS, SEVERITIES, check_preprocess, is_benchmark
from ..data.files.listing import CIFAR_FOLDERS, IMAGE_EXTENSIONS, walk_images
from ..errors import AlternetWarning, ConfigValueError, DataError
from ..typed import Section, integer

INTEGER_1 = "must be an integer >= 1"
PRECISIONS = ("32", "bf16", "16")  # an evaluation's precision (inference.AUTOCAST: each one's autocast dtype)
MAX_BINS = 100_000  # calibration bins: more than any test split fills (and each class's bins are held at once)


@dataclass(kw_only=True)
class CalibrationConfig(Section):
    n_bins: int
    temperature_scaling: bool  # fitted on the validation split

    def check(self) -> None:
        self.require("n_bins", lambda v: integer(1)(v) and v <= MAX_BINS, f"must be an integer in [1, {MAX_BINS:,}]")


BENCHMARKS = ("cifar10-c", "cifar100-c", "imagenet-c")
BUILTIN = {  # a built-in robustness baseline's name -> the table of alexnet.yaml each benchmark reads (baselines.py)
    "alexnet": {"cifar10-c": "cifar10-c", "cifar100-c": "cifar100-c", "imagenet-c": "hendrycks-imagenet-c"},
    "alexnet_hdvw": {benchmark: benchmark for benchmark in BENCHMARKS},
}


@dataclass(kw_only=True)
class OodConfig(Section):
    """Out-of-distribution images scored against the test split (:mod:`alternet.evaluation.ood`)."""

    root: str | None
    max_images: int | None

    def check(self) -> None:
        self.require("max_images", integer(1), "must be >= 1 or null")
        if self.root is not None:
            check_ood_root(Path(self.root).expanduser())
        if self.max_images is not None and self.root is None:
            warnings.warn(
                f"ood.max_images={self.max_images} does nothing without ood.root (no out-of-distribution images are "
                "scored): set ood.root=DIR",
                AlternetWarning,
                stacklevel=2,
            )


def check_ood_root(root: Path) -> None:
    """``ood.root`` is a folder with images (at any depth) or a CIFAR-format set, by the names on disk: the first
    image found ends the search."""
    if not root.is_dir():
        raise DataError(f"ood.root={root} is not a directory: give a folder of images or a CIFAR-format set")
    cifar = root.name in CIFAR_FOLDERS or any((root / folder).is_dir() for folder in CIFAR_FOLDERS)
    if not cifar and next(walk_images(root), None) is None:
        raise DataError(f"ood.root={root} holds no images ({', '.join(IMAGE_EXTENSIONS)}) and no CIFAR-format set")


@dataclass(kw_only=True)
class RobustnessConfig(Section):
    """Corruption robustness: real files (``root``) or corruptions generated into ``cache_dir``."""

    enabled: Any  # auto | true | false
    root: str | None
    cache_dir: str
    corruptions: list[str] | None
    severities: list[int]
    preprocess: str  # ImageNet-C's only
    seed: int
    precision: str  # auto: the device's fast precision
    workers: int | None
    max_images: int | None
    baseline: str | None

    def check(self) -> None:
        """The settings that need no files; opening the sets (:mod:`alternet.evaluation.corrupted`) reads the rest."""
        self.require("enabled", lambda v: v == "auto" or isinstance(v, bool), "must be auto, true or false")
        requested(self, generated=not self.root, prefix="")
        if self.root is not None and (root := Path(self.root).expanduser()).exists() and not root.is_dir():
            raise DataError(  # where it is missing, opening the sets says where to get them
                f"robustness.root={root} is a file: give the folder of the corrupted sets (CIFAR-C's .npy files, "
                "ImageNet-C's corruption folders)"
            )
        self.require("max_images", integer(1), "null (every image) or a count >= 1")
        check_preprocess(self.preprocess, "preprocess")
        self.one_of("precision", (*PRECISIONS, "auto"))
        named = self.baseline is None or self.baseline in BUILTIN
        if not named and not Path(self.baseline).expanduser().is_file():
            raise ConfigValueError(
                f"baseline={self.baseline} is neither a built-in baseline ({', '.join(BUILTIN)}) nor a metrics.json "
                "that exists: evaluate the baseline's robustness first, and give its metrics.json"
            )


def requested(
    cfg: RobustnessConfig, generated: bool, prefix: str = "robustness."
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``robustness.corruptions`` (null: the 15) and ``robustness.severities``, checked (by the typed section as it
    is made, and as the sets are opened)."""
    if cfg.corruptions is not None and not cfg.corruptions:
        raise ConfigValueError(f"{prefix}corruptions=[] names none: leave it null for the 15, or name some")
    corruptions = tuple(dict.fromkeys(cfg.corruptions or CORRUPTIONS))
    allowed = CORRUPTIONS if generated else CORRUPTIONS + EXTRA_CORRUPTIONS
    unknown = [name for name in corruptions if name not in allowed]
    if unknown:
        where = f" (the extra ones exist only as real files: set {prefix}root)" if generated else ""
        raise ConfigValueError(f"{prefix}corruptions: unknown {unknown}; choose from {list(allowed)}{where}")
    if not any(map(is_benchmark, corruptions)):
        raise ConfigValueError(
            f"{prefix}corruptions={list(corruptions)} has none of the 15 benchmark corruptions; the extra ones "
            "found in real files are scored anyway, next to them"
        )
    severities = tuple(sorted(set(cfg.severities or ())))
    if not severities or not set(severities) <= set(SEVERITIES):
        raise ConfigValueError(f"{prefix}severities={list(cfg.severities or [])} must be a non-empty subset of 1..5")
    return corruptions, severities


@dataclass(kw_only=True)
class EvaluationConfig(Section):
    """Where and how checkpoints are scored: :class:`alternet.evaluation.Evaluator`'s settings."""

    device: str
    precision: str
    batch_size: int
    max_images: int | None  # the first N test images only (robustness.max_images follows it when null)
    num_workers: Any  # auto | an integer >= 0
    calibration: CalibrationConfig
    ood: OodConfig
    robustness: RobustnessConfig

    def check(self) -> None:
        self.one_of("precision", PRECISIONS)
        self.require("batch_size", integer(1), INTEGER_1)
        self.require("max_images", integer(1), "null (every test image) or a count >= 1")
        within = self.robustness.max_images is None or self.max_images is None
        if not within and self.robustness.max_images > self.max_images:
            raise ConfigValueError(
                f"robustness.max_images={self.robustness.max_images} is more than max_images={self.max_images}: the "
                "corrupted sets are scored against the clean test images; leave robustness.max_images null to follow "
                "max_images, or set it <= max_images"
            )
        check_workers(self.num_workers, "num_workers")
