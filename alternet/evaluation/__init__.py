"""Evaluation of a trained model: calibration on the test split (metric definitions: :mod:`alternet.metrics`),
temperature scaling, corruption robustness, report figures; :class:`Evaluator` runs them all."""

from __future__ import annotations

from .config import EvaluationConfig
from .evaluator import Evaluator
from .inference import choose_device, predict
from .plots import corruption_heatmap, reliability_diagram
from .robustness import (
    CORRUPTIONS,
    FAMILIES,
    SEVERITIES,
    SOURCES,
    RobustnessBaseline,
    RobustnessError,
    RobustnessRow,
    load_baseline,
    robustness_record,
    robustness_summary,
    update_metrics_json,
    write_accuracy_csv,
    write_table_csv,
)

__all__ = [
    "CORRUPTIONS",
    "FAMILIES",
    "SEVERITIES",
    "SOURCES",
    "EvaluationConfig",
    "Evaluator",
    "RobustnessBaseline",
    "RobustnessError",
    "RobustnessRow",
    "choose_device",
    "corruption_heatmap",
    "load_baseline",
    "predict",
    "reliability_diagram",
    "robustness_record",
    "robustness_summary",
    "update_metrics_json",
    "write_accuracy_csv",
    "write_table_csv",
]
