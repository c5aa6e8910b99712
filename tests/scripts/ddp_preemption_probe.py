"""Train with 2-process CPU DDP where only rank 1 receives SIGUSR1 (after optimizer step 2), and record each rank's
outcome.

``ddp_preemption_probe.py OUT``. Lightning re-executes this script for rank 1, so both ranks run it; each writes
``rank<N>.json`` (the Preempted error's message) into OUT. The ranks agree on a signal every 4 optimizer steps
(``callbacks.preemption.sync_every_n_steps=4``), so both must stop at step 4. Used by
``tests/training/test_resume_mid_epoch.py``.
"""

import json
import os
import signal
import sys
from pathlib import Path

import lightning as L

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers

from alternet.apps.train import train
from alternet.training import builders
from alternet.training.stopping import Preempted

from helpers import DDP_CPU, compose_train

out = sys.argv[1]
rank = int(os.environ.get("LOCAL_RANK", "0"))


class SignalRankOne(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 2 and rank == 1:
            os.kill(os.getpid(), signal.SIGUSR1)


_build_callbacks = builders.build_callbacks
builders.build_callbacks = lambda *args, **kwargs: [SignalRankOne(), *_build_callbacks(*args, **kwargs)]
overrides = ["trainer.limit_train_batches=8", "recipe.batch_size=16", "callbacks.preemption.sync_every_n_steps=4"]
try:
    train(compose_train(*DDP_CPU, *overrides, output_dir=out))
    error = None
except Preempted as exc:
    error = str(exc)
(Path(out) / f"rank{rank}.json").write_text(json.dumps({"error": error}))
