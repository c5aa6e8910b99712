"""Metric definitions shared by training and evaluation: accuracy and calibration on whole splits (numpy), and
the same calibration error accumulated batch by batch (torchmetrics)."""

from .calibration import (
    ReliabilityBins,
    apply_temperature,
    calibration_metrics,
    fit_temperature,
    nll_from_logits,
    reliability_bins,
    softmax,
)
from .streaming import BinnedCalibrationError, TopKAccuracy

__all__ = [
    "BinnedCalibrationError",
    "ReliabilityBins",
    "TopKAccuracy",
    "apply_temperature",
    "calibration_metrics",
    "fit_temperature",
    "nll_from_logits",
    "reliability_bins",
    "softmax",
]
