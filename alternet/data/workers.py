"""Loader worker processes: how many a machine can feed (one home for ``num_workers: auto``), their thread pools
(one thread each: the workers are the parallelism), and how they behave when the run is told to stop.

Clusters and terminals signal a whole process group (SLURM's ``scancel`` and ``--signal``, Ctrl-C, ``timeout``,
``docker stop``, Kubernetes), so loader workers get the run's stop signals too. torch's workers die on SIGTERM (a
C handler re-raises it with the default action) and SIGUSR2 (the default action), and the main process's SIGCHLD
handler then raises ``DataLoader worker (pid …) is killed by signal`` wherever it happens to be — inside the step
or the checkpoint that the pre-emption handler was about to write. Every loader of the package therefore starts its
workers with :func:`init_loader_worker`: they leave the stop signals to the main process, which finishes its step,
saves, and shuts them down itself; the signals are blocked from the fork on (:class:`StartsWorkersSafely` says why).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from traceback import walk_tb
from types import TracebackType
from typing import Any

from lightning.fabric.utilities.seed import pl_worker_init_function
from threadpoolctl import threadpool_limits
from torch.utils.data import DataLoader, get_worker_info

from ..errors import DataError, is_integer, require
from ..hardware import cpu_cores

MAX_AUTO_WORKERS = 8  # num_workers=auto for image files: enough to decode JPEGs for one GPU; more only contend
# num_workers=auto for arrays in memory (crop, flip, RandAugment of 32-px images): on a 16-core H100 machine 8 workers
# made the paper recipe's step 3.4x slower than 4 did (bench/RESULTS.md, gpu-nvidia-h100-80gb-hbm3): their CPU and
# wake-ups come out of the main process, which launches the GPU's work. bench/gpu_perf.sh re-measures 4 against 8.
MAX_AUTO_ARRAY_WORKERS = 4

# What schedulers and terminals send to stop a run (the pre-emption callback's choices): never a worker's business.
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")
_STOPS = frozenset(getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name))  # those this OS has


def loader_workers(setting: int | str | None, key: str = "num_workers", *, in_memory: bool = False) -> int:
    """DataLoader workers for the setting ``key``: ``auto`` (or null) is min(available CPUs, 8) for image files and
    min(available CPUs, 4) for arrays in memory (``in_memory``); a number is capped at the available CPUs (more
    workers than CPUs only slow each other down)."""
    cpus = cpu_cores()  # the affinity mask's CPUs (a SLURM allocation), not the machine's
    check_workers(setting, key)
    if setting is None or setting == "auto":
        return min(cpus, MAX_AUTO_ARRAY_WORKERS if in_memory else MAX_AUTO_WORKERS)
    return min(int(setting), cpus)


def check_workers(setting: Any, key: str = "num_workers") -> None:
    """The one check of a loader-workers setting (``data.num_workers``, evaluation's ``num_workers``): auto, null
    or an integer >= 0 (the config checks call it before any work, :func:`loader_workers` too)."""
    require(key, setting, lambda v: v in (None, "auto") or is_integer(v, 0), "must be auto or an integer >= 0")


def init_loader_worker(worker_id: int) -> None:
    """The ``worker_init_fn`` of every loader: leave the stop signals to the main process, use one BLAS/OpenMP
    thread, then seed as Lightning would have (``seed_everything(workers=True)`` adds its own ``worker_init_fn``
    only to loaders without one). The workers already fill the CPUs; pools of one thread per core in each compete
    with the main process, which launches the GPU's work (bench/RESULTS.md, as for :data:`MAX_AUTO_ARRAY_WORKERS`)."""
    leave_stop_signals_to_main_process()
    sys.excepthook = _quiet_when_the_main_process_left(sys.excepthook)
    threadpool_limits(1)  # BLAS and OpenMP pools (torch sets its own to one thread in a worker)
    if int(os.environ.get("PL_SEED_WORKERS", 0)):
        pl_worker_init_function(worker_id)


def _quiet_when_the_main_process_left(hook: Callable[..., Any]) -> Callable[..., Any]:
    """A worker's ``sys.excepthook`` that says nothing of a connection its file-descriptor sharer lost: the main
    process takes each batch's tensors through it (``multiprocessing.resource_sharer``, torch's ``file_descriptor``
    strategy), and a main process that stops at once (a second stop signal) leaves mid-handshake. The sharer's
    thread reports that through ``sys.excepthook``; the main process's own stop line is what the user needs."""

    def excepthook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
        lost = issubclass(kind, EOFError | ConnectionError)
        if lost and any(frame.f_code.co_filename.endswith("resource_sharer.py") for frame, _ in walk_tb(trace)):
            return
        hook(kind, error, trace)

    return excepthook


def leave_stop_signals_to_main_process() -> None:
    """In a loader worker: ignore the stop signals sent to the process group, so the worker lives until the main
    process has saved and shuts it down.

    SIGTERM is the one a worker still needs from its own parent (``Process.terminate`` when a worker does not
    finish in time, and at interpreter exit): it is blocked and waited for in a thread that exits the worker, as
    torch's own handler does, only when the parent sent it. Where ``sigwaitinfo`` does not exist (macOS) torch's
    handler stays.
    """
    ignored = _STOPS - {signal.SIGTERM}
    for sig in ignored:
        signal.signal(sig, signal.SIG_IGN)  # one sent since the fork waited, blocked: ignoring it discards it
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, ignored)
    if hasattr(signal, "sigwaitinfo"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=_exit_on_sigterm_from, args=(os.getppid(),), name="sigterm", daemon=True).start()


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """The stop signals blocked in this thread while the body runs (one sent meanwhile waits; another thread of
    the process takes it if one can). Processes forked or spawned here start with them blocked in every thread."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class StartsWorkersSafely:
    """A DataLoader mixin for how workers start.

    * With the stop signals blocked. A worker ignores them in :func:`leave_stop_signals_to_main_process`, but only
      once its ``worker_init_fn`` runs: a group's Ctrl-C or SLURM's SIGUSR1 landing in between killed it (a
      KeyboardInterrupt, or the signal's default action), and the main process failed on the dead worker instead of
      saving. It blocks SIGTERM for good, but only in its own thread; threads that libraries start in the child
      right after the fork (W&B's OpenTelemetry exporters restart theirs) would not have it blocked, take the
      group's SIGTERM and die of it, before the main process has saved.
    * With OpenCV single-threaded (:func:`one_cv2_thread`): each worker is one of many processes already, and
      OpenCV's default pool of one thread per core in every worker oversubscribes the CPUs the main process needs
      to feed the GPU."""

    def _get_iterator(self):  # DataLoader's one place that starts workers
        with stop_signals_blocked(), one_cv2_thread():
            return super()._get_iterator()


@contextlib.contextmanager
def one_cv2_thread() -> Iterator[None]:
    """OpenCV set to one thread while the body forks workers (they keep it), then restored in this process. Set
    before the fork, never in the child: a forked child that reconfigures a pool its parent had running can
    deadlock in it (seen in the CIFAR-C generator)."""
    import cv2

    previous = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(previous)


class PlainLoader(StartsWorkersSafely, DataLoader):
    """A DataLoader whose workers start as every loader of the package's do (evaluation passes, unshuffled splits)."""


def _exit_on_sigterm_from(parent: int) -> None:
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
            os._exit(0)


class WorkerLedger:
    """What each loader worker is reading now, in shared memory, so that a worker that dies in the middle of a
    sample (a decoder's segfault, the kernel's OOM killer) is reported by that sample instead of torch's bare
    ``DataLoader worker (pid N) is killed by signal``. Created in the main process before the workers start (they
    inherit it); a worker writes its pid and the sample's name before reading and clears them after."""

    SLOTS, WIDTH = 64, 1024  # worker ids modulo SLOTS; a name's UTF-8 bytes cut at WIDTH

    def __init__(self) -> None:
        context = multiprocessing.get_context()
        self._pids = context.RawArray("q", self.SLOTS)
        self._names = context.RawArray("c", self.SLOTS * self.WIDTH)

    def _slot(self) -> int | None:
        info = get_worker_info()
        return None if info is None else info.id % self.SLOTS

    def reading(self, name: object) -> None:
        """In a worker: the sample it starts reading (nothing in the main process, which reports its own errors)."""
        slot = self._slot()
        if slot is None:
            return
        encoded = str(name).encode("utf-8", "replace")[: self.WIDTH]
        start = slot * self.WIDTH
        self._names[start : start + self.WIDTH] = encoded.ljust(self.WIDTH, b"\0")
        self._pids[slot] = os.getpid()

    def done(self) -> None:
        slot = self._slot()
        if slot is not None:
            self._pids[slot] = 0

    def sample_of(self, pid: int) -> str | None:
        """The sample worker ``pid`` was reading when it last wrote, or None."""
        for slot in range(self.SLOTS):
            if self._pids[slot] == pid:
                start = slot * self.WIDTH
                return bytes(self._names[start : start + self.WIDTH]).rstrip(b"\0").decode("utf-8", "replace")
        return None


# torch's two messages for a worker that died: its SIGCHLD handler's, and the loader's when the queue stays empty
_DEAD_WORKER = re.compile(
    r"DataLoader worker \(pids?(?:\(s\))? ([\d, ]+)\) (is killed by signal: [^.\n]+|exited unexpectedly)"
)


def dead_worker_error(error: BaseException, ledger: WorkerLedger | None) -> DataError | None:
    """``error`` (torch's report of a loader worker that died) as one line naming the sample the worker was reading,
    when the ledger knows it; None for any other error."""
    found = _DEAD_WORKER.search(str(error)) if ledger is not None else None
    if found is None:
        return None
    for pid in (int(p) for p in re.findall(r"\d+", found.group(1))):
        sample = ledger.sample_of(pid)
        if sample is not None:
            return DataError(
                f"a data loader worker (pid {pid}) died while reading {sample} ({found.group(2)}): a decoder crash "
                "on that file, or the kernel's out-of-memory killer. Decode the file alone to tell; replace or delete "
                "it, or lower data.num_workers / the batch size if memory ran out"
            )
    return None
