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
    mode: str  # "max" where higher is better, else "min": a checkpoint monitor's mode, a sweeper's direction


SPLIT_METRICS = (
    Metric("acc", "accuracy", "accuracy", "Top-1 accuracy", "max"),
    Metric("top5", "top-5 accuracy", "top_5_accuracy", "Top-5 accuracy", "max"),
    Metric("nll", "NLL", "nll", "Negative log-likelihood", "min"),
    Metric("ece", "ECE (10 bins)", "ece", "Expected calibration error (10 bins)", "min"),
)
SPLIT_KEYS = tuple(metric.key for metric in SPLIT_METRICS)


def metric_mode(name: str) -> str | None:
    """``max`` or ``min``: which way a logged metric (``val/acc``, ``test_ema/nll``) is better; None for a name
    outside the table."""
    key = str(name).rsplit("/", 1)[-1]
    return next((metric.mode for metric in SPLIT_METRICS if metric.key == key), None)
