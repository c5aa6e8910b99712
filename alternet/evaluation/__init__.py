"""Evaluation: calibration metrics and temperature scaling, corruption robustness, report figures."""

from __future__ import annotations

from .calibration import (
    ReliabilityBins,
    apply_temperature,
    calibration_metrics,
    fit_temperature,
    reliability_bins,
    softmax,
)
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
    "ReliabilityBins",
    "RobustnessBaseline",
    "RobustnessError",
    "RobustnessRow",
    "apply_temperature",
    "calibration_metrics",
    "corruption_heatmap",
    "fit_temperature",
    "load_baseline",
    "reliability_bins",
    "reliability_diagram",
    "robustness_record",
    "robustness_summary",
    "softmax",
    "update_metrics_json",
    "write_accuracy_csv",
    "write_table_csv",
]
