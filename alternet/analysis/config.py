"""Typed analysis configs: plain mappings (the ``conf/analysis/*.yaml`` files) checked against dataclasses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from .errors import AnalysisConfigError

C = TypeVar("C")


# Accepted value types per annotated field type (the dataclasses use postponed annotations: strings).
_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,)}


def parse_config(cls: type[C], values: Mapping[str, Any] | None, analysis: str) -> C:
    """``cls(**values)``, with unknown keys reported by name together with the valid ones, and values of
    the wrong type rejected."""
    values = dict(values or {})
    types = {f.name: f.type for f in fields(cls)}
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise AnalysisConfigError(f"analysis {analysis!r}: unknown config key(s) {unknown}; valid keys: {list(types)}")
    for key, value in values.items():
        accepted = _TYPES[types[key]]
        if isinstance(value, bool) or not isinstance(value, accepted):
            raise AnalysisConfigError(f"analysis {analysis!r}: {key} must be {types[key]}, got {value!r}")
    return cls(**{key: float(v) if types[key] == "float" else v for key, v in values.items()})


def require(condition: bool, analysis: str, message: str) -> None:
    """Raise :class:`AnalysisConfigError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise AnalysisConfigError(f"analysis {analysis!r}: {message}")


@dataclass(frozen=True)
class SampleConfig:
    """A fixed, seeded sample of a data split, processed in batches."""

    analysis: ClassVar[str] = "sample"

    images: int = 256
    batch_size: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        require(self.images >= 1, self.analysis, f"images must be >= 1, got {self.images}")
        require(self.batch_size >= 1, self.analysis, f"batch_size must be >= 1, got {self.batch_size}")
