"""Typed analysis configs: plain mappings checked against dataclasses.

Every budget's default lives in one place, the packaged ``conf/analysis/<name>.yaml`` (also Hydra's
``analysis=<name>`` option); the dataclasses declare the keys and their types only, and :func:`parse_config`
fills whatever the caller leaves out from that file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from importlib import resources
from typing import Any, ClassVar, TypeVar

import yaml

from .errors import AnalysisConfigError

C = TypeVar("C")


# Accepted value types per annotated field type (the dataclasses use postponed annotations: strings).
_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "int | None": (int, type(None)),
    "float | None": (int, float, type(None)),
    "bool": (bool,),
}


def default_values(analysis: str) -> dict[str, Any]:
    """The budgets of ``conf/analysis/<analysis>.yaml`` (``{}`` for a name without a packaged file)."""
    path = resources.files("alternet.conf") / "analysis" / f"{analysis}.yaml"
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def parse_config(cls: type[C], values: Mapping[str, Any] | None, analysis: str) -> C:
    """``cls(**values)`` over the packaged defaults of ``analysis`` (:func:`default_values`), with unknown keys
    reported by name together with the valid ones, and values of the wrong type rejected."""
    values = dict(values or {})
    types = {f.name: f.type for f in fields(cls)}
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise AnalysisConfigError(f"analysis {analysis!r}: unknown config key(s) {unknown}; valid keys: {list(types)}")
    values = {**default_values(analysis), **values}
    missing = [f.name for f in fields(cls) if f.name not in values and f.default is MISSING]
    if missing:
        raise AnalysisConfigError(f"analysis {analysis!r}: missing config key(s) {missing} (no packaged default)")
    for key, value in values.items():
        accepted = _TYPES[types[key]]
        if isinstance(value, bool) != (types[key] == "bool") or not isinstance(value, accepted):
            raise AnalysisConfigError(f"analysis {analysis!r}: {key} must be {types[key]}, got {value!r}")
    floats = ("float", "float | None")
    return cls(**{key: float(v) if types[key] in floats and v is not None else v for key, v in values.items()})


def require(condition: bool, analysis: str, message: str) -> None:
    """Raise :class:`AnalysisConfigError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise AnalysisConfigError(f"analysis {analysis!r}: {message}")


def require_choice(value: str, choices: tuple[str, ...], analysis: str, key: str) -> None:
    """Raise :class:`AnalysisConfigError` naming ``key`` and its valid values unless ``value`` is one of them."""
    require(value in choices, analysis, f"{key} must be one of {list(choices)}, got {value!r}")


@dataclass(frozen=True)
class SampleConfig:
    """A fixed, seeded sample of a data split, processed in batches."""

    analysis: ClassVar[str] = "sample"

    images: int
    batch_size: int
    seed: int

    def __post_init__(self) -> None:
        require(self.images >= 1, self.analysis, f"images must be >= 1, got {self.images}")
        require(self.batch_size >= 1, self.analysis, f"batch_size must be >= 1, got {self.batch_size}")


# what the loss is measured on: the training loss (the recipe's mixup/cutmix and label smoothing, soft-target
# cross-entropy, as HDVW's landscapes) or the sampled images' own labels (cross-entropy with label_smoothing)
TARGETS = ("training", "labels")
# the L2 term: HDVW's wd * sum ||w|| (unsquared, every trainable parameter), 0.5 * wd * sum ||w||^2 over the
# parameters training decays (the decay's own objective for SGD), or none
REGULARISERS = ("hdvw", "decay_squared", "none")


@dataclass(frozen=True)
class ObjectiveConfig:
    """A seeded sample of augmented training images and the loss measured on it (Hessian, landscape).

    ``batch_size: null`` is the checkpoint recipe's batch size: mixup/cutmix mix the images of one batch, so
    the batches are those training saw.
    """

    analysis: ClassVar[str] = "objective"

    images: int
    batch_size: int | None
    seed: int
    targets: str
    regulariser: str
    label_smoothing: float

    def __post_init__(self) -> None:
        require(self.images >= 1, self.analysis, f"images must be >= 1, got {self.images}")
        require(
            self.batch_size is None or self.batch_size >= 1,
            self.analysis,
            f"batch_size must be >= 1 or null (the recipe's), got {self.batch_size}",
        )
        require_choice(self.targets, TARGETS, self.analysis, "targets")
        require_choice(self.regulariser, REGULARISERS, self.analysis, "regulariser")
        require(
            0.0 <= self.label_smoothing < 1.0,
            self.analysis,
            f"label_smoothing must be in [0, 1), got {self.label_smoothing}",
        )
        require(
            self.targets == "labels" or self.label_smoothing == 0.0,
            self.analysis,
            "label_smoothing applies to targets=labels only (targets=training uses the recipe's)",
        )
