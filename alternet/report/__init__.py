"""A sweep directory as the paper's figures and verdicts: ``alternet report SWEEP_DIR`` (:mod:`.cli`). The builder
is :mod:`.build`; a sweep's jobs are read by :mod:`.runs`, compared by :mod:`.statistics`, judged by
:mod:`.verdicts` and drawn by :mod:`.figures`."""

from .build import Statistics, build_report

__all__ = ["Statistics", "build_report"]
