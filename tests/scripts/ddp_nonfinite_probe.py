"""Train with 2-process CPU DDP where only rank 0's inputs turn to inf at step 2, and record each rank's error.

``ddp_nonfinite_probe.py OUT``. Lightning re-executes this script for rank 1, so both ranks run it; each writes
``rank<N>.json`` (the NonFiniteLossError's message) into OUT. Used by ``tests/training/test_resume.py``.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers

from alternet.apps.train import train
from alternet.training import ClassificationModule, NonFiniteLossError

from helpers import DDP_CPU, compose_train

out = sys.argv[1]
rank = int(os.environ.get("LOCAL_RANK", "0"))
forward = ClassificationModule.forward


def poisoned(self, x):
    return forward(self, x * float("inf") if self.training and self.global_step == 2 and rank == 0 else x)


ClassificationModule.forward = poisoned
try:
    train(compose_train(*DDP_CPU, "trainer.limit_train_batches=6", "recipe.batch_size=16", output_dir=out))
    error = None
except NonFiniteLossError as exc:
    error = str(exc)
(Path(out) / f"rank{rank}.json").write_text(json.dumps({"error": error}))
