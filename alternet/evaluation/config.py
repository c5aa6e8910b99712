"""The typed evaluation settings (conf/evaluation/default.yaml): ``alternet evaluate``'s root, and ``evaluate:`` in a
training config. Keys and types only; every default is in the YAML (:mod:`alternet.typed`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..typed import Section
from .evaluator import check_settings


@dataclass(kw_only=True)
class CalibrationConfig(Section):
    n_bins: int
    temperature_scaling: bool  # fitted on the validation split


@dataclass(kw_only=True)
class OodConfig(Section):
    """Out-of-distribution images scored against the test split (:mod:`alternet.evaluation.ood`)."""

    root: str | None
    max_images: int | None


@dataclass(kw_only=True)
class RobustnessConfig(Section):
    """Corruption robustness: real files (``root``) or corruptions generated into ``cache_dir``."""

    enabled: Any  # auto | true | false
    root: str | None
    cache_dir: str
    corruptions: list[str] | None
    severities: list[int]
    preprocess: str
    seed: int
    precision: str
    workers: int | None
    max_images: int | None
    baseline: str | None


@dataclass(kw_only=True)
class EvaluationConfig(Section):
    """Where and how checkpoints are scored; checked by :func:`alternet.evaluation.check_settings`, the one rule
    :class:`alternet.evaluation.Evaluator` also applies."""

    device: str
    precision: str
    batch_size: int
    num_workers: Any  # auto | an integer >= 0
    calibration: CalibrationConfig
    ood: OodConfig
    robustness: RobustnessConfig

    def check(self) -> None:
        check_settings({f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(EvaluationConfig)})


def _plain(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
