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
import math
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from traceback import walk_tb
from types import TracebackType
from typing import Any

from lightning.fabric.utilities.seed import pl_worker_init_function
from threadpoolctl import threadpool_limits
from torch.utils.data import DataLoader, Dataset, get_worker_info

from ..errors import DataError
from ..files import STOPS, die_with_parent, stop_signals_blocked
from ..hardware import cpu_cores
from .config import check_workers

# num_workers=auto: where the training loader starts; it grows while the step waits (more_workers).
# Image files: 8 decode JPEGs for one GPU on most machines. Arrays in memory (crop, flip, RandAugment of 32-px images):
# one worker makes ~6,000 paper-recipe images/s (bench/RESULTS.md), and every idle worker's CPU and wake-ups come
# out of the main process, which launches the GPU's work (8 made an H100 run's step 3.4x slower than 4).
FILE_WORKERS, ARRAY_WORKERS = 8, 1
WAIT_TO_GROW = 0.05  # the share of an epoch's training loop spent waiting for batches that adds workers
BUSY_TO_GROW = 0.5  # ... while the workers were making batches at least this share of it (else they kept up)
MEASURED_BATCHES = 10  # an epoch with fewer batches measures too little to decide on


def loader_workers(setting: int | str | None, key: str = "num_workers", *, in_memory: bool = False) -> int:
    """DataLoader workers for the setting ``key``: ``auto`` (or null) starts at :data:`ARRAY_WORKERS` for arrays in
    memory (``in_memory``) and :data:`FILE_WORKERS` for image files, within the cores left beside the main process
    (a training loader then grows while its step waits: :func:`more_workers`); a number is capped at the
    available CPUs (more workers than CPUs only slow each other down)."""
    check_workers(setting, key)
    if setting is None or setting == "auto":
        return min(spare_cores(), ARRAY_WORKERS if in_memory else FILE_WORKERS)
    return min(int(setting), cpu_cores())  # the affinity mask's CPUs (a SLURM allocation), not the machine's


def more_workers(workers: int, most: int, waited: float, busy: float = 1.0) -> int:
    """The workers an ``auto`` training loader runs next epoch after its step waited for batches for the share
    ``waited`` of this one, while its workers were making batches for the share ``busy`` of it (the mean of their
    own): as many as would have kept up with a quarter to spare (a loader-bound epoch's steps took ``1 - waited`` of
    it), at least one more, at most ``most``. The same while the step waited less than :data:`WAIT_TO_GROW`, or the
    workers idled half the time or more: then the wait was the main process taking batches in (tensors' handles
    passed between processes), which more workers do not shorten."""
    if waited < WAIT_TO_GROW or busy < BUSY_TO_GROW or workers >= most:
        return workers
    return min(most, max(workers + 1, math.ceil(1.25 * workers / (1 - min(waited, 0.9)))))


def node_share(local_rank: int = 0, local_ranks: int = 1) -> list[int]:
    """The cores of this process and its loader workers: its affinity mask, split evenly among the ``local_ranks``
    training processes of this machine when it inherited the mask from its parent (Lightning's launcher,
    ``torchrun``, a container's cpuset: every rank holds the same cores); a mask a scheduler set for this task
    alone (``srun --cpu-bind``: it differs from the parent's) is the task's share as it is."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows: no affinity to read or set
        return list(range(os.cpu_count() or 1))
    try:
        inherited = os.sched_getaffinity(os.getppid()) == set(allowed)
    except OSError:  # the parent is gone, or not ours to read: assume the ranks share the mask
        inherited = True
    count = len(allowed)
    if 1 < local_ranks <= count and inherited:
        return allowed[local_rank * count // local_ranks : (local_rank + 1) * count // local_ranks]
    return allowed


def spare_cores(share: list[int] | None = None) -> int:
    """How many loader workers ``share`` (this process's :func:`node_share`) holds beside its main process: all its
    cores but one, and at least one."""
    return max(1, len(node_share() if share is None else share) - 1)


def worker_cores(workers: int, share: list[int]) -> frozenset[int] | None:
    """The cores loader workers run on: all of ``share`` but its first, which stays the main process's (it launches
    the GPU's work, or runs the step on the CPU); None where no core is spare or the OS sets no affinity (the
    workers then run anywhere). The workers share them: the OS spreads them, and other processes' workers."""
    if workers < 1 or len(share) < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    return frozenset(share[1:])


def init_loader_worker(worker_id: int) -> None:
    """The ``worker_init_fn`` of every loader: leave the stop signals to the main process, use one BLAS/OpenMP
    thread, then seed as Lightning would have (``seed_everything(workers=True)`` adds its own ``worker_init_fn``
    only to loaders without one). The workers already fill the CPUs; pools of one thread per core in each compete
    with the main process, which launches the GPU's work (bench/RESULTS.md, as for :data:`ARRAY_WORKERS`)."""
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
    die_with_parent()  # a worker ignoring the stop signals must not outlive a main process killed outright
    ignored = STOPS - {signal.SIGTERM}
    for sig in ignored:
        signal.signal(sig, signal.SIG_IGN)  # one sent since the fork waited, blocked: ignoring it discards it
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, ignored)
    if hasattr(signal, "sigwaitinfo"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=_exit_on_sigterm_from, args=(os.getppid(),), name="sigterm", daemon=True).start()


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

    ranks_on_node = (0, 1)  # (this process's local rank, training processes on this machine): its node_share

    def _get_iterator(self):  # DataLoader's one place that starts workers
        init = self.worker_init_fn.init if isinstance(self.worker_init_fn, OnCores) else self.worker_init_fn
        cores = worker_cores(self.num_workers, node_share(*self.ranks_on_node))
        self.worker_init_fn = init if cores is None else OnCores(cores, init)
        with stop_signals_blocked(), one_cv2_thread():
            return super()._get_iterator()


@dataclass(frozen=True)
class OnCores:
    """A ``worker_init_fn`` that first keeps the worker on ``cores`` (off its main process's core), then runs
    ``init``."""

    cores: frozenset[int]
    init: Callable[[int], None] | None

    def __call__(self, worker_id: int) -> None:
        with contextlib.suppress(OSError):  # a cpuset changed since (Kubernetes' CPU manager): run where allowed
            os.sched_setaffinity(0, self.cores)
        if self.init is not None:
            self.init(worker_id)


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


def end_workers(batches: Iterator[Any]) -> None:
    """End the worker processes of a loader's iterator now, as torch does when an epoch runs out. An iterator left
    to the garbage collector (held by a traceback's frames, or with its loader in a cycle) has its workers' queues
    closed before it asks the workers to end on them: each then costs 5 s, torch's wait before it kills one."""
    shutdown = getattr(batches, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _exit_on_sigterm_from(parent: int) -> None:
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
            os._exit(0)


class BusyDataset(Dataset):
    """``dataset`` as the loader's workers read it, with the seconds each spent fetching its batches' samples kept
    in shared memory (slots by worker id), so that the main process can tell workers that kept up (mostly idle)
    from workers that could not (busy throughout)."""

    SLOTS = 64

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self._seconds = multiprocessing.get_context().RawArray("d", self.SLOTS)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: Any) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: list[Any]) -> list[Any]:
        start = time.perf_counter()
        fetch = getattr(self.dataset, "__getitems__", None)
        samples = fetch(keys) if fetch else [self.dataset[key] for key in keys]
        info = get_worker_info()
        if info is not None:
            self._seconds[info.id % self.SLOTS] += time.perf_counter() - start
        return samples

    def busy(self, workers: int, seconds: float) -> float:
        """The share of ``seconds`` the ``workers`` workers spent fetching on average, read and then set to zero."""
        spent = sum(self._seconds)
        self._seconds[:] = [0.0] * self.SLOTS
        return spent / max(workers * seconds, 1e-9)


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


# torch's errors where shared memory cannot hold a worker's batch (its file there cannot grow)
_SHARED_MEMORY = re.compile(
    r"unable to (?:resize|write to) file <?/?torch_|out of shared memory|insufficient shared memory"
)


def one_line_reason(error: BaseException) -> str:
    """The last line of an error's message (torch's worker errors carry the worker's traceback before it)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def dead_worker_error(error: BaseException, ledger: WorkerLedger | None) -> DataError | None:
    """``error`` (torch's report of a loader worker that died) as one line naming the sample the worker was reading,
    when the ledger knows it, or a worker's batch that shared memory could not hold; None for any other error."""
    if _SHARED_MEMORY.search(str(error)):
        return DataError(
            "a data loader worker could not pass its batch through shared memory (/dev/shm is full, or limited: "
            f"{one_line_reason(error)}); free or enlarge /dev/shm (a container's --shm-size), or set data.num_workers=0"
        )
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
