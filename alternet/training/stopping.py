"""How a run stops, in one place: the policy, and the code of every layer but the loader workers'.

* **A stop signal during the training steps** (``callbacks.preemption.signals``: SIGUSR1 from SLURM's
  ``--signal=USR1@90``, SIGUSR2, SIGTERM from a scheduler, ``timeout`` or ``docker stop``, Ctrl-C's SIGINT):
  :class:`PreemptionCheckpoint` lets the step finish, saves a resumable ``last.ckpt`` (mid-epoch), requeues a SLURM
  job, and ends the command on one line (:class:`Preempted`) with the command that resumes. A second signal before
  that checkpoint is safe stops at once (:class:`StoppedWithoutSaving`); the previous ``last.ckpt`` stays whole.
  The second signal's handler raises that error wherever the step is; where code there put its own error in its
  place (Lightning's step calls ``inspect``, which does), the command still ends on the stop's line
  (:func:`raised_by_a_stop`).
* **Ctrl-C anywhere else** (Hydra composing a job, set-up, the sanity check, testing, scoring, between a sweep's
  jobs) raises KeyboardInterrupt wherever it lands; Lightning's own answer inside ``fit`` and ``test`` (a line and
  ``sys.exit(1)``) is raised on as one (:func:`lightning_ctrl_c_raised`). The command ends on its stop line
  (:func:`ends_on_its_stop_line`: :data:`TRAINING_INTERRUPTED`, :data:`EVALUATION_INTERRUPTED`), which says what is
  kept and how to go on. Where Ctrl-C lands inside Hydra's own code, a clean-up there can raise another error in its
  place, which Hydra reports as its own and exits 1: the command notes that Ctrl-C came (:func:`ctrl_c_noted`) and
  ends on the same line.
* **Other stop signals outside the training steps** keep their defaults: the process ends there. Nothing is lost
  but the step in progress: checkpoints, records and exports are written atomically, and the run directory's lock
  (``alternet.runs.RunDirLock``) goes with the process.
* **Loader workers** ignore the stop signals and leave the stop to the main process, which shuts them down after
  its checkpoint (``alternet.data.workers``: the one part of this policy that lives elsewhere, with the workers).
* A SIGINT that was ignored when the process started (a shell's background job) stays ignored, in training too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L

from ..errors import AlternetError, ConfigValueError, exit_with_error
from ..rundir import RunDir
from ..runs import resume_command
from .callbacks import ends_optimizer_step

TRAINING_INTERRUPTED = (
    "stopped by SIGINT outside the training steps (set-up, testing, or between a sweep's jobs); the checkpoints and "
    "finished runs already written are kept: run the same command with ckpt_path=last to continue"
)
EVALUATION_INTERRUPTED = "stopped by SIGINT; the files already written are kept: run the same command to score again"


class Preempted(AlternetError):
    """Training stopped on a pre-emption signal after saving a resumable checkpoint."""


class StoppedWithoutSaving(AlternetError):
    """A second stop signal came before the pre-emption checkpoint was safe: the run stopped at once."""


def raised_by_a_stop(error: BaseException | None) -> StoppedWithoutSaving | None:
    """The :class:`StoppedWithoutSaving` that ``error`` stands in for, if any. A second stop signal's handler raises
    it wherever the main thread is, and code there that catches every exception raises another in its place,
    chained to it (``inspect.getfullargspec``, which Lightning calls in every step, turns it into ``TypeError:
    unsupported callable``): the command ends on the stop's own line all the same. (:class:`Preempted` is raised
    from a callback hook, after the step, where nothing stands in for it.)"""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, StoppedWithoutSaving):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


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
        if not ends_optimizer_step(trainer, batch_idx) or not self._stop_now(trainer):
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


class NotedCtrlC:
    """Python's own Ctrl-C (raise KeyboardInterrupt), remembering that it came: a command tells by it a failure that
    Ctrl-C caused (e.g. inside Hydra, which reports it as another error) from any other (:func:`ctrl_c_noted`)."""

    def __init__(self) -> None:
        self.came = False

    def __call__(self, signum: int, frame: object) -> None:
        self.came = True
        raise KeyboardInterrupt


def is_pythons_ctrl_c(handler: object) -> bool:
    """Whether a SIGINT handler is Python's own, or the :class:`NotedCtrlC` that stands in for it (nothing for a
    pre-emption stop to forward the signal to)."""
    return handler is signal.default_int_handler or isinstance(handler, NotedCtrlC)


@contextlib.contextmanager
def ctrl_c_noted() -> Iterator[NotedCtrlC]:
    """Ctrl-C as Python handles it, noted, for the duration; where SIGINT is ignored or someone else's (a background
    job, a test harness) or outside the main thread it stays as it is, and nothing is noted."""
    noted = NotedCtrlC()
    in_main_thread = threading.current_thread() is threading.main_thread()
    if not in_main_thread or not is_pythons_ctrl_c(signal.getsignal(signal.SIGINT)):
        yield noted
        return
    previous = signal.signal(signal.SIGINT, noted)
    try:
        yield noted
    finally:
        if signal.getsignal(signal.SIGINT) is noted:
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def lightning_ctrl_c_raised(trainer: L.Trainer) -> Iterator[None]:
    """Lightning answers Ctrl-C inside ``fit`` or ``test`` where the pre-emption callback does not hold SIGINT (set-up,
    the sanity check, testing) with its own line and ``sys.exit(1)``; raise it on as the KeyboardInterrupt it was,
    so the command ends on its one-line stop message with the way to continue (:data:`TRAINING_INTERRUPTED`)."""
    try:
        yield
    except SystemExit:
        if not trainer.interrupted:
            raise
        raise KeyboardInterrupt from None


def ends_on_its_stop_line(message: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """A command's main that ends on ``message`` (``error: MESSAGE``, exit status 1) when Ctrl-C stops it, also
    where Ctrl-C broke something inside Hydra that raised another error in its place."""

    def wrap(main: Callable[[], Any]) -> Callable[[], Any]:
        @functools.wraps(main)
        def run() -> Any:
            with ctrl_c_noted() as ctrl_c:
                try:
                    return main()
                except KeyboardInterrupt:
                    exit_with_error(message)
                except SystemExit as exited:
                    if ctrl_c.came and exited.code not in (None, 0):
                        exit_with_error(message)
                    raise
                except Exception:
                    if ctrl_c.came:  # what Ctrl-C broke inside Hydra, raised in its place
                        exit_with_error(message)
                    raise

        return run

    return wrap
