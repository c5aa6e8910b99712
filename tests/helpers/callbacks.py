"""Callbacks a test puts into a run through ``callbacks.extra`` (``_target_: helpers.callbacks.NAME``)."""

import os
import signal
import time

import lightning as L


class SignalBeforeStep(L.Callback):
    """Send this process ``signal`` (a name: TERM, INT, USR1) as optimizer step ``step`` (1-based) starts: the
    run's handler sees it before the step's own hooks."""

    def __init__(self, step: int, signal: str = "TERM"):
        self.step, self.signal = step, signal

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step + 1 == self.step:
            os.kill(os.getpid(), getattr(signal, f"SIG{self.signal}"))


def step_logs():
    """A fake trainer's ``_logger_connector`` as the pre-emption callback uses it: it writes the step's row."""
    from types import SimpleNamespace

    return SimpleNamespace(update_train_step_metrics=lambda: None)


def fit_loop_inside_an_epoch():
    """A fake trainer's ``fit_loop`` as the checkpoint callbacks read it: not at an epoch's last batch."""
    from types import SimpleNamespace

    return SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(is_last_batch=False)))


class SlowWritesOnRankZero(L.Callback):
    """Rank 0's checkpoint writes take ``seconds`` longer, as a large checkpoint on a slow disk does (written in the
    background under ``performance.async_checkpoint=true``)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def setup(self, trainer, pl_module, stage):
        if not trainer.is_global_zero:
            return
        io = trainer.strategy.checkpoint_io
        writer = getattr(io, "checkpoint_io", None) or io  # the background writer's own writer
        save = writer.save_checkpoint

        def slow_save(*args, **kwargs):
            time.sleep(self.seconds)
            return save(*args, **kwargs)

        writer.save_checkpoint = slow_save


class HoldUntil(L.Callback):
    """Hold the run at the start of epoch ``epoch`` (0-based) until the file ``path`` exists (at most ``timeout``
    seconds): the run still owns its directory when a test's second command arrives, however fast it trains."""

    def __init__(self, path: str, epoch: int = 1, timeout: float = 120):
        self.path, self.epoch, self.timeout = path, epoch, timeout

    def on_train_epoch_start(self, trainer, pl_module):
        from pathlib import Path

        deadline = time.monotonic() + self.timeout
        while trainer.current_epoch == self.epoch and not Path(self.path).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
