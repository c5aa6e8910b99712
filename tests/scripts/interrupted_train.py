"""Train from the command line's overrides and interrupt the run deterministically, as a pre-emption would.

``interrupted_train.py OUT KILL|USR1|INT|TERM STEP [override ...]``: after optimizer step STEP (and after every
checkpoint callback has run for it) the process sends itself SIGKILL (it dies on the spot, as under ``kill -9`` or an
OOM killer), SIGUSR1 (SLURM's pre-emption warning), SIGINT (Ctrl-C) or SIGTERM (a scheduler's stop), the last three
handled by alternet. Used by ``tests/training/test_resume_mid_epoch.py``.
"""

import os
import signal
import sys
from pathlib import Path

import lightning as L

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers

from alternet.apps.train import train
from alternet.errors import AlternetError, exit_with_error
from alternet.training import builders

from helpers import compose_train

out, how, at_step, *overrides = sys.argv[1:]


class Interrupt(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == int(at_step):
            os.kill(os.getpid(), getattr(signal, f"SIG{how}"))


_build_callbacks = builders.build_callbacks


def build_callbacks(*args, **kwargs):
    # Lightning runs callbacks in order: SIGKILL after the mid-epoch checkpoint of this step was written; SIGUSR1
    # before the pre-emption callback looks for it
    callbacks = _build_callbacks(*args, **kwargs)
    return [*callbacks, Interrupt()] if how == "KILL" else [Interrupt(), *callbacks]


builders.build_callbacks = build_callbacks
try:
    train(compose_train(*overrides, output_dir=out))
except AlternetError as error:
    exit_with_error(error)  # as every command line ends on one
