"""The pre-emption callback of the stopping policy (:mod:`alternet.training.stopping`, which states it): the one part
of it that needs Lightning, apart so that the command line's help never imports Lightning."""

from __future__ import annotations

import signal
import sys
from typing import Any

import lightning as L

from ...runs.directories import RunDir
from ...runs.records import resume_command
from ..callbacks import ends_optimizer_step, epochs_last_batch, written_before_any_rank_ends
from . import Preempted, StoppedWithoutSaving, check_preemption, is_pythons_ctrl_c, requeue_slurm_job, say


class PreemptionCheckpoint(L.Callback):
    """The stop on a signal during the training steps, as the policy's first point says
    (:mod:`alternet.training.stopping`): the step finishes, a resumable ``last.ckpt`` is saved, and the run stops.

    The handler only raises a flag: saving inside a signal handler could catch the step half done. Signals sent to
    the whole process group reach the loader workers too; they ignore them (``data.workers.init_loader_worker``) and
    live until the checkpoint is saved. A handler that was installed before the run (e.g. submitit's) still runs,
    after the checkpoint is safe; Lightning's own SIGTERM handler, which would stop the run without a checkpoint, is
    set aside while training. With several processes the ranks must agree to stop at the same step, which takes a
    collective and a host sync: they agree every ``sync_every_n_steps`` optimizer steps, not on every step (a
    scheduler's warning comes 90 s ahead; a single process reads its flag every step for free).
    """

    def __init__(self, run: RunDir, signals: list[str], requeue: bool = True, sync_every_n_steps: int = 10):
        self.run = run
        self.path = run.last_checkpoint
        check_preemption(signals, sync_every_n_steps)
        self.sync_every = sync_every_n_steps
        self.signals = [getattr(signal, name) for name in signals]
        self.requeue = requeue
        self.received: int | None = None
        self._before_run: dict[int, Any] = {}  # the handlers the run started with (e.g. submitit's): forwarded to
        self._displaced: dict[int, Any] = {}  # the handlers ours replace while training (Lightning's): restored
        self._rank = ""  # "[rank N] " under DDP: every rank of a signalled group says so
        self._at_epoch_end: tuple[int, int] | None = None  # (step, epoch) of a stop asked for in an epoch's last batch

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Before Lightning installs its own signal handlers: remember the ones the run started with."""
        self._before_run = {sig: signal.getsignal(sig) for sig in self.signals}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # a second signal: the user or the scheduler will not wait for the step
            sys.unraisablehook = _quiet_half_built(sys.unraisablehook)
            raise StoppedWithoutSaving(self._stopped_at_once(signal.Signals(signum).name))
        self.received = signum
        say(f"{self._rank}{signal.Signals(signum).name}: saving a resumable checkpoint after this step")

    def _stopped_at_once(self, name: str) -> str:
        kept = (
            f"{self.path} holds the previous checkpoint. Resume with: {resume_command(self.run)}"
            if self.path.is_file()
            else "no checkpoint was saved yet"
        )
        return f"stopped at once by a second signal ({name}) before the pre-emption checkpoint was saved; {kept}"

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
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
            say(
                f"{signal.Signals(sig).name} was ignored when this process started (a shell's background job): it "
                f"stays ignored; stop this run with {' or '.join(others) or 'SIGKILL (no checkpoint)'}"
            )

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A stop asked for in the epoch's last batch waited for the epoch's validation and end (saved before them,
        the resumed run would go on with the next epoch without them): the fit ends here, and :meth:`on_train_end`
        saves and stops."""
        received = self.received is not None
        if trainer.world_size > 1:  # every rank reaches the epoch's end: one collective an epoch
            received = trainer.strategy.reduce_boolean_decision(received, all=False)
        loop = trainer.fit_loop  # Lightning would not stop before trainer.min_epochs / min_steps: the next step does
        early = (loop.min_epochs or 0) > trainer.current_epoch + 1 or (loop.min_steps or 0) > trainer.global_step
        if received and not early:
            self._at_epoch_end = (trainer.global_step, trainer.current_epoch)
            trainer.should_stop = True

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._at_epoch_end is not None:
            self._save_and_stop(trainer, *self._at_epoch_end)
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
        if not ends_optimizer_step(trainer, batch_idx) or epochs_last_batch(trainer) or not self._stop_now(trainer):
            return
        trainer._logger_connector.update_train_step_metrics()  # this step's row (train/loss, train/lr), which
        # Lightning writes only after the callbacks return: a resume starts at the next step and never writes it
        self._save_and_stop(trainer, trainer.global_step, trainer.current_epoch)

    def _save_and_stop(self, trainer: L.Trainer, step: int, epoch: int) -> None:
        trainer.save_checkpoint(self.path, weights_only=False)
        with written_before_any_rank_ends(trainer, "stopped"):  # and requeued
            self._restore()  # saved: a signal from here on (the requeue's own SIGTERM) is no longer one "before saving"
            name = signal.Signals(self.received).name if self.received else "a signal on another rank"
            command = resume_command(self.run)
            previous = self._before_run.get(self.received) if self.received else None
            requeues_itself = getattr(previous, "__module__", "").startswith("submitit")  # submitit's handler requeues
            requeue = self.requeue and trainer.is_global_zero and not requeues_itself
            requeued = requeue_slurm_job() if requeue else False
        self._forward_to(previous)
        raise Preempted(
            f"stopped by {name} at global step {step} (in epoch {epoch + 1}); saved "
            f"{self.path}. "
            + ("The SLURM job was requeued and will resume from it. " if requeued else "")
            + f"Resume with: {command}"
        )

    def _forward_to(self, previous: Any) -> None:
        """Run ``previous``, the handler the run started with for this signal (e.g. submitit's own
        checkpoint-and-requeue)."""
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


def _quiet_half_built(hook: Any) -> Any:
    """``sys.unraisablehook`` after a stop raised at once: the stop can land inside any constructor (a suite run met it
    in torch's ``StorageWeakRef`` as a loader worker's batch arrived), and the half-built object's ``__del__`` then
    fails with an ``AttributeError`` that would print after the run's one error line. Those are dropped; anything
    else still goes to ``hook``."""

    def quiet(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, AttributeError):
            hook(unraisable)

    return quiet
