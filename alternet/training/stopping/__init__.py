"""How a run stops, in one place: the policy, and the code of every layer but the loader workers'. What a user
sees (which signals, what is saved, how to resume): docs/training.md, "Resume mid-epoch, pre-emption".

* **A stop signal during the training steps** (``callbacks.preemption.signals``): :class:`PreemptionCheckpoint` lets
  the step finish, saves a resumable ``last.ckpt`` (mid-epoch), requeues a SLURM job, and ends the command on one
  line (:class:`Preempted`) with the command that resumes. A second signal before that checkpoint is safe stops at
  once (:class:`StoppedWithoutSaving`); the previous ``last.ckpt`` stays whole.
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
* **Other stop signals outside the training steps** keep their defaults: the process ends there, and the run
  directory's lock (``alternet.runs.ownership.RunDirLock``) goes with it.
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
from typing import TYPE_CHECKING, Any

from ...errors import AlternetError, ConfigValueError, exit_with_error
from ...lazy import exports

if TYPE_CHECKING:
    import lightning as L

__getattr__, __dir__ = exports(__name__, {"PreemptionCheckpoint": "preemption"})  # Lightning's: imported on use

TRAINING_INTERRUPTED = (
    "stopped by SIGINT outside the training steps (set-up, testing, or between a sweep's jobs); the checkpoints and "
    "finished runs already written are kept: run the same command with ckpt_path=last to continue"
)
# SIGTERM where Lightning answers it (testing, the sanity check): its loops raise SIGTERMException there
TRAINING_TERMINATED = TRAINING_INTERRUPTED.replace("SIGINT", "SIGTERM", 1)
EVALUATION_INTERRUPTED = (
    "stopped by SIGINT; an evaluation's files land together at its end, so the output folder holds the earlier "
    "scores, or this evaluation's complete ones if it got that far: run the same command to score again"
)
# the other commands': what Ctrl-C leaves of their output, and how to go on
WHOLE_FOLDER_INTERRUPTED = (
    "stopped by SIGINT; {what} is as it was before this command (it is written whole or not at all): run the same "
    "command again to write it"
)
COMMAND_INTERRUPTED = {
    "export": WHOLE_FOLDER_INTERRUPTED.format(what="the export directory"),
    "import-hdvw": WHOLE_FOLDER_INTERRUPTED.format(what="the export directory"),
    "report": WHOLE_FOLDER_INTERRUPTED.format(what="the report directory"),
    "cifar-c": (
        "stopped by SIGINT; the CIFAR-C files completed so far are kept, listed in the directory's manifest: run the "
        "same command again to generate the rest"
    ),
    "shards": "stopped by SIGINT; the shards output is unfinished: run the same command again to write it anew",
    "buildup": "stopped by SIGINT; the search's finished jobs are kept: run the same command again to resume it",
    "push": "stopped by SIGINT; the Hub repository has the last commit that finished: run the same command again",
}


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


def say(line: str) -> None:
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


def requeue_slurm_job() -> bool:
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    if not job or "SLURM_JOB_ID" not in os.environ:
        return False
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job = f"{job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    try:
        return subprocess.run(["scontrol", "requeue", job], check=False).returncode == 0
    except OSError:  # no scontrol here (a container on a SLURM node): the stop line says to resume by hand
        return False


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
    so the command ends on its one-line stop message with the way to continue (:data:`TRAINING_INTERRUPTED`; a
    SIGTERM there, which Lightning's loops answer the same way, on :data:`TRAINING_TERMINATED`)."""
    try:
        yield
    except SystemExit:
        if not trainer.interrupted:
            raise
        if getattr(trainer, "received_sigterm", False):  # Lightning's own SIGTERM stop, not a Ctrl-C
            exit_with_error(TRAINING_TERMINATED)
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
