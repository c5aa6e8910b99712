"""A sweep directory as the paper's figures and verdicts: ``alternet report SWEEP_DIR`` (:mod:`.cli`). The builder
is :mod:`.build`; a sweep's jobs are read by :mod:`.runs`, compared by :mod:`.statistics`, judged by
:mod:`.verdicts` and drawn by :mod:`.figures`."""

from ..lazy import exports

__getattr__, __dir__ = exports(__name__, {"Statistics": "build", "build_report": "build"})
