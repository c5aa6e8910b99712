"""Evaluation results as the evaluator records them, for tests of their readers: a robustness result whose mean
accuracy is a given number (one corruption at every severity, each at that accuracy)."""

from __future__ import annotations

from dataclasses import replace

from alternet.evaluation.robustness import RobustnessRow, robustness_record, robustness_summary
from alternet.runs.results import CorruptedImages, RobustnessResult


def robustness_result(acc: float, source: str = "generated", images: int = 100) -> RobustnessResult:
    rows = [RobustnessRow("fog", severity, acc, 1.0, 0.1, images, source) for severity in range(1, 6)]
    record = robustness_record(rows, robustness_summary(rows))
    return replace(record, images=CorruptedImages(layout="cifar-c", images_per_condition=images), precision="32")
