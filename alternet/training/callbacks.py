"""Callbacks and plugins that make runs reproducible, resumable mid-epoch, and their checkpoints safe."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..errors import AlternetError, ConfigValueError, is_pythons_ctrl_c
from ..files import atomic_write
from ..rundir import RunDir
from ..runs import resume_command
from ..seeds import derive_seed


class BatchSeed(L.Callback):
    """Reseed Python, NumPy and torch before every training batch from (seed, epoch, batch, rank).

    Dropout, stochastic depth and mixup then depend only on the batch's position, so a run resumed from any
    checkpoint — at an epoch boundary or mid-epoch — replays exactly what an uninterrupted run would have done,
    with no generator state to save. (Data order and augmentation are seeded per sample by the data module.)
    """

    def __init__(self, seed: int):
        self.seed = seed

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        seed = derive_seed(self.seed, "batch", trainer.current_epoch, batch_idx, trainer.global_rank)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        seed_torch(seed, pl_module.device)


def seed_torch(seed: int, device: torch.device) -> None:
    """What ``torch.manual_seed`` does for a run on ``device``, without its per-call cost: for each backend not yet
    initialised (CUDA on a CPU run, and the others torch knows) it queues a deferred seeding with a formatted stack
    trace, ~2 ms a call on a 2-core CPU and a list that grows by three entries per step. The CPU generator is seeded
    always, the device's own when the run is on one (initialised by then, so seeded at once)."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)
    elif device.type != "cpu":
        torch.manual_seed(seed)


def parse_interval(value: float | str | None) -> float | None:
    """Seconds from a number or ``"DD:HH:MM:SS"`` / ``"HH:MM:SS"`` (Lightning's ``max_time`` format)."""
    if value is None or isinstance(value, (int, float)):
        return None if value is None else float(value)
    parts = [float(p) for p in str(value).split(":")]
    seconds = 0.0
    for part, unit in zip(reversed(parts), (1, 60, 3600, 86400)):
        seconds += part * unit
    return seconds


def _ends_optimizer_step(trainer: L.Trainer, batch_idx: int) -> bool:
    """A checkpoint taken mid-accumulation would lose the accumulated gradients: save only after a step."""
    return (batch_idx + 1) % trainer.accumulate_grad_batches == 0


class BestAndLastCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint``, with ``last.ckpt`` written at every epoch end it checks, as this project
    promises (and Lightning did before 2.6): Lightning 2.6 writes ``last.ckpt`` only when a top-k checkpoint was saved
    at the same step, so with ``save_top_k: 1`` it held the best epoch's weights whenever a later epoch was worse, and
    ``ckpt_path=last`` went back to that epoch. Its state is saved under ``ModelCheckpoint``'s key, so checkpoints of
    either class resume with their best-so-far."""

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_missed(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_missed(trainer)

    def _save_last_if_missed(self, trainer: L.Trainer) -> None:
        # skipped when nothing is to be saved now, or when a checkpoint (top-k, and last with it) was saved at this step
        if self.save_last and not self._should_skip_saving_checkpoint(trainer) and self._epoch_due(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _epoch_due(self, trainer: L.Trainer) -> bool:
        """``every_n_epochs`` (N > 1: a fast GPU epoch's end is mostly its checkpoint) holds for ``last.ckpt`` too,
        and the run's last epoch is always saved; mid-epoch and pre-emption checkpoints cover resuming between."""
        every = self._every_n_epochs
        epoch = trainer.current_epoch + 1
        last = trainer.should_stop or (trainer.max_epochs is not None and epoch >= trainer.max_epochs)
        last = last or (trainer.max_steps is not None and 0 < trainer.max_steps <= trainer.global_step)
        return every <= 1 or epoch % every == 0 or last

    @property
    def state_key(self) -> str:
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)


class MidEpochCheckpoint(L.Callback):
    """Write ``checkpoints/last.ckpt`` every ``every_n_train_steps`` optimizer steps and/or every
    ``train_time_interval`` seconds, mid-epoch; it holds the train loader's position, so ``ckpt_path=last`` resumes
    with exactly the samples not yet seen."""

    def __init__(self, dirpath: Path, every_n_train_steps: int | None = None, train_time_interval: float | None = None):
        self.path = Path(dirpath) / RunDir.LAST
        self.every = int(every_n_train_steps or 0)
        self.interval = train_time_interval
        self._last_save = time.monotonic()
        self._last_step = -1

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not _ends_optimizer_step(trainer, batch_idx):
            return
        step = trainer.global_step
        due = (self.every and step % self.every == 0) or (
            self.interval is not None and time.monotonic() - self._last_save >= self.interval
        )
        if due and step != self._last_step and step > 0:
            trainer.save_checkpoint(self.path, weights_only=False)  # the full state: exactly resumable
            self._last_save, self._last_step = time.monotonic(), step


class Preempted(AlternetError):
    """Training stopped on a pre-emption signal after saving a resumable checkpoint."""


class StoppedWithoutSaving(AlternetError):
    """A second stop signal came before the pre-emption checkpoint was safe: the run stopped at once."""


def _say(line: str) -> None:
    """Write a line to stderr from a signal handler: ``os.write``, not ``print`` (the handler may interrupt a print to
    the same stream, and a nested print raises "reentrant call")."""
    os.write(2, f"\n{line}\n".encode())


def check_preemption(signals: Sequence[Any], sync_every_n_steps: Any, key: str = "callbacks.preemption.") -> None:
    """The one check of ``callbacks.preemption`` (``key``: where its keys sit): its typed section
    (:class:`alternet.training.config.PreemptionConfig`) calls it, :class:`PreemptionCheckpoint` too."""
    if isinstance(sync_every_n_steps, bool) or not isinstance(sync_every_n_steps, int) or sync_every_n_steps < 1:
        raise ConfigValueError(f"{key}sync_every_n_steps must be a positive integer, got {sync_every_n_steps!r}")
    unknown = [name for name in signals or [] if not isinstance(getattr(signal, str(name), None), signal.Signals)]
    if unknown:
        raise ConfigValueError(f"{key}signals has unknown signal names {unknown}; use names such as SIGUSR1, SIGTERM")


class PreemptionCheckpoint(L.Callback):
    """On a pre-emption signal (SLURM's ``--signal=USR1@90``, SIGTERM from a scheduler, ``timeout`` or
    ``docker stop``, Ctrl-C) finish the current step, save a resumable ``last.ckpt`` (mid-epoch), print the resume
    command, requeue a SLURM job, and stop. A second signal before that checkpoint is safe stops at once; the
    previous ``last.ckpt`` stays intact (checkpoints are written atomically).

    The handler only raises a flag: saving inside a signal handler could catch the step half done. Signals sent to
    the whole process group reach the loader workers too; they ignore them (``data.workers.init_loader_worker``) and
    live until the checkpoint is saved. A handler that was installed before the run (e.g. submitit's) still runs,
    after the checkpoint is safe; Lightning's own SIGTERM handler, which would stop the run without a checkpoint, is
    set aside while training. With several processes the ranks must agree to stop at the same step, which takes a
    collective and a host sync: they agree every ``sync_every_n_steps`` optimizer steps, not on every step (a
    scheduler's warning comes 90 s ahead; a single process reads its flag every step for free).
    """

    def __init__(self, dirpath: Path, signals: list[str], requeue: bool = True, sync_every_n_steps: int = 10):
        self.path = Path(dirpath) / RunDir.LAST
        check_preemption(signals, sync_every_n_steps)
        self.sync_every = sync_every_n_steps
        self.signals = [getattr(signal, name) for name in signals]
        self.requeue = requeue
        self.received: int | None = None
        self._before_run: dict[int, Any] = {}  # the handlers the run started with (e.g. submitit's): forwarded to
        self._displaced: dict[int, Any] = {}  # the handlers ours replace while training (Lightning's): restored
        self._run_dir: Path | None = None
        self._rank = ""  # "[rank N] " under DDP: every rank of a signalled group says so

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Before Lightning installs its own signal handlers: remember the ones the run started with."""
        self._before_run = {sig: signal.getsignal(sig) for sig in self.signals}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # a second signal: the user or the scheduler will not wait for the step
            raise StoppedWithoutSaving(self._stopped_at_once(signal.Signals(signum).name))
        self.received = signum
        _say(f"{self._rank}{signal.Signals(signum).name}: saving a resumable checkpoint after this step")

    def _stopped_at_once(self, name: str) -> str:
        kept = (
            f"{self.path} holds the previous checkpoint. Resume with: {resume_command(self._run_dir)}"
            if self.path.is_file() and self._run_dir is not None
            else "no checkpoint was saved yet"
        )
        return f"stopped at once by a second signal ({name}) before the pre-emption checkpoint was saved; {kept}"

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._run_dir = Path(trainer.default_root_dir)
        self._rank = f"[rank {trainer.global_rank}] " if trainer.world_size > 1 else ""
        for sig in self.signals:
            if self._before_run.get(sig) is signal.SIG_IGN:  # e.g. SIGINT in a script's background job: it stays
                self._say_ignored(trainer, sig)  # ignored, as outside training, not honoured only mid-step
                continue
            self._displaced[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        if signal.SIGTERM in self._displaced and trainer.world_size > 1:
            _skip_sigterm_broadcast(trainer)

    def _say_ignored(self, trainer: L.Trainer, sig: int) -> None:
        if trainer.is_global_zero:
            others = [signal.Signals(s).name for s in self.signals if self._before_run.get(s) is not signal.SIG_IGN]
            _say(
                f"{signal.Signals(sig).name} was ignored when this process started (a shell's background job): it "
                f"stays ignored; stop this run with {' or '.join(others) or 'SIGKILL (no checkpoint)'}"
            )

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore()

    def _restore(self) -> None:
        for sig, handler in self._displaced.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._displaced.clear()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not _ends_optimizer_step(trainer, batch_idx) or not self._stop_now(trainer):
            return
        trainer.save_checkpoint(self.path, weights_only=False)
        name = signal.Signals(self.received).name if self.received else "a signal on another rank"
        command = resume_command(Path(trainer.default_root_dir))
        requeued = self.requeue and requeue_slurm_job() if trainer.is_global_zero else False
        self._forward_to_previous_handler()
        raise Preempted(
            f"stopped by {name} at global step {trainer.global_step} (epoch {trainer.current_epoch}); saved "
            f"{self.path}. "
            + ("The SLURM job was requeued and will resume from it. " if requeued else "")
            + f"Resume with: {command}"
        )

    def _forward_to_previous_handler(self) -> None:
        """Run the handler the run started with for this signal (e.g. submitit's own checkpoint-and-requeue)."""
        previous = self._before_run.get(self.received) if self.received else None
        if callable(previous) and not is_pythons_ctrl_c(previous):
            previous(self.received, None)

    def _stop_now(self, trainer: L.Trainer) -> bool:
        if trainer.world_size == 1:
            return self.received is not None
        if trainer.global_step % self.sync_every:  # global_step moves in lockstep: every rank skips the same steps
            return False
        return trainer.strategy.reduce_boolean_decision(self.received is not None, all=False)


def _skip_sigterm_broadcast(trainer: L.Trainer) -> None:
    """Under DDP, Lightning's training loop broadcasts its SIGTERM flag from rank 0 and reads it back with
    ``.item()`` before every step: a collective and a host sync per step. While :class:`PreemptionCheckpoint` holds
    SIGTERM, Lightning's own handler is set aside and its flag never rises, so that broadcast only costs; the ranks
    agree to stop through ``_stop_now`` instead, every ``sync_every_n_steps`` steps. (Lightning has no switch for
    it: the loop's method is replaced on this trainer's loop only.)"""
    trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor = lambda: None


def requeue_slurm_job() -> bool:
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    if not job or "SLURM_JOB_ID" not in os.environ:
        return False
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job = f"{job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return subprocess.run(["scontrol", "requeue", job], check=False).returncode == 0


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint through a temporary file renamed into place: a run killed while saving never
    leaves a truncated file under the final name. Read them as plain data only (``weights_only=True``): a resumed
    checkpoint is a file a user hands in, and ours hold nothing else."""

    def load_checkpoint(self, path: str | Path, map_location: Any = None, weights_only: bool | None = None) -> Any:
        return super().load_checkpoint(path, map_location=map_location or _storage_as_saved, weights_only=True)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        atomic_write(
            path, lambda tmp: super(AtomicCheckpointIO, self).save_checkpoint(checkpoint, tmp, storage_options)
        )


def _storage_as_saved(storage: Any, location: str) -> Any:
    """Lightning's default ``map_location``: tensors stay where they were loaded (the CPU)."""
    return storage
