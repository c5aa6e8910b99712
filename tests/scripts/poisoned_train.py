"""Run ``train.py`` exactly as the command line would, with one fault: the forward pass of optimizer step STEP sees
inf inputs, so its loss is NaN (and BatchNorm's running statistics go NaN in the same pass).

``poisoned_train.py STEP [override ...]``; ``sys.argv[0]`` is ``train.py``, so the resume command the run prints
runs the real, unpoisoned ``train.py``. Used by ``tests/test_resume.py``.
"""

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from alternet.training.module import ClassificationModule  # noqa: E402 - after the path insert

step, *overrides = sys.argv[1:]
forward = ClassificationModule.forward


def poisoned(self, x):
    return forward(self, x * float("inf") if self.training and self.global_step == int(step) else x)


ClassificationModule.forward = poisoned
sys.argv = ["train.py", *overrides]
runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
