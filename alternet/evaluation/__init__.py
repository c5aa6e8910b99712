"""Evaluation of a trained model: calibration on the test split (metric definitions: :mod:`alternet.metrics`),
temperature scaling, corruption robustness, report figures; :class:`Evaluator` runs them all."""

from __future__ import annotations

from ..lazy import exports

__getattr__, __dir__ = exports(
    __name__,
    {
        "CORRUPTIONS": "robustness",
        "FAMILIES": "robustness",
        "SEVERITIES": "robustness",
        "SOURCES": "robustness",
        "EvaluationConfig": "config",
        "Evaluator": "evaluator",
        "RobustnessBaseline": "robustness",
        "RobustnessError": "robustness",
        "RobustnessRow": "robustness",
        "choose_device": "inference",
        "corruption_heatmap": "plots",
        "load_baseline": "robustness",
        "reliability_diagram": "plots",
        "robustness_record": "robustness",
        "robustness_summary": "robustness",
        "update_metrics_json": "robustness",
        "write_accuracy_csv": "robustness",
        "write_table_csv": "robustness",
    },
)
