"""What a model trained on a data set must know (:class:`DataFacts`): what a data module states of its data, what a
training checkpoint saves as its ``data`` hyperparameters, and the public data sets' own (:data:`FACTS`: class counts
and per-channel normalisation statistics of 0-1 pixels), which the data modules normalise with and the model
registry's tagged ``pretrained_cfg``s (``alternet_r50.cifar100``) describe weights trained on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class DataFacts:
    """A data set's name, class count, input size and normalisation; its class names when known (the files are
    read); and for image folders how evaluation resizes (``crop_pct``, ``crop_mode``, ``interpolation``) and, where
    validation is a hold-out of train/, a digest of train/'s listing (``train_listing``)."""

    name: str
    num_classes: int
    image_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    class_names: tuple[str, ...] | None = None
    crop_pct: float | None = None
    crop_mode: str | None = None
    interpolation: str | None = None
    train_listing: str | None = None  # where validation is a hold-out of train/: a digest of its listing

    def to_dict(self) -> dict[str, Any]:
        """The checkpoint's form (plain lists; the keys set only): what ``from_dict`` reads back."""
        plain = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        return {key: list(value) if isinstance(value, tuple) else value for key, value in plain.items()}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> DataFacts:
        """A checkpoint's or an export's ``data`` section (keys this record does not hold, e.g. an export's
        ``val_size``, are left out)."""
        known = {f.name for f in fields(cls)}
        given = {key: value for key, value in values.items() if key in known}
        missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in given]
        if missing:
            raise ValueError(f"the data facts lack {', '.join(missing)} (a data module's facts() hold them all)")
        for key in ("mean", "std", "class_names"):
            if given.get(key) is not None:
                given[key] = tuple(given[key])
        return cls(**given)


FACTS = {
    "cifar10": DataFacts("cifar10", 10, 32, (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "cifar100": DataFacts("cifar100", 100, 32, (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    # timm's tag for ImageNet-1k, with timm's IMAGENET_DEFAULT_MEAN / _STD (written here: this module is imported
    # before timm, which registers the zoo when it is imported: alternet/__init__.py)
    "in1k": DataFacts(  # evaluated at Resize(256) + CenterCrop(224), bilinear: HDVW's ops/datasets.py, timm's default
        "in1k", 1000, 224, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), crop_pct=0.875, interpolation="bilinear"
    ),
}
