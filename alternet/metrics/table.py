"""The metrics every scored split reports, named once: their key (in metrics.json, the logs as ``<split>/<key>`` and
W&B), the short name the console and the model card print, and their model-index type and name on the Hugging Face
Hub. Training (:func:`alternet.training.module.evaluation_metrics`, NLL beside them), the evaluator
(:func:`.calibration.calibration_metrics`), the console, the model card and the checkpoint monitor's choices read
this table; a metric added here and computed there reaches them all."""

from __future__ import annotations

from typing import NamedTuple


class Metric(NamedTuple):
    key: str
    label: str  # the console's and the model card's short name
    hub_type: str  # the Hub's model-index metric type
    hub_name: str  # its name on the Hub


SPLIT_METRICS = (
    Metric("acc", "accuracy", "accuracy", "Top-1 accuracy"),
    Metric("top5", "top-5 accuracy", "top_5_accuracy", "Top-5 accuracy"),
    Metric("nll", "NLL", "nll", "Negative log-likelihood"),
    Metric("ece", "ECE (10 bins)", "ece", "Expected calibration error (10 bins)"),
)
SPLIT_KEYS = tuple(metric.key for metric in SPLIT_METRICS)
