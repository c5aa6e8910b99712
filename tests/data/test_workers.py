"""Loader workers' thread pools: one OpenCV and one BLAS thread in each, the main process's own left as they were."""

import sys

import cv2
from threadpoolctl import threadpool_info
from torch.utils.data import Dataset

from alternet.data.workers import PlainLoader, _quiet_when_the_main_process_left, init_loader_worker


class _ThreadCounts(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> tuple[int, int]:
        blas = max((pool["num_threads"] for pool in threadpool_info()), default=1)
        return cv2.getNumThreads(), blas


def test_loader_workers_run_one_opencv_and_one_blas_thread_and_the_main_process_keeps_its_own():
    """Each worker is one of many processes: pools of one thread per core in each oversubscribe the CPUs that the
    main process needs to launch the GPU's work (8 workers made an H100 run's step 3.4x slower than 4)."""
    previous = cv2.getNumThreads()
    cv2.setNumThreads(4)
    try:
        loader = PlainLoader(_ThreadCounts(), batch_size=2, num_workers=2, worker_init_fn=init_loader_worker)
        counts = {(int(c), int(b)) for cv, blas in loader for c, b in zip(cv, blas, strict=True)}
        assert counts == {(1, 1)}
        assert cv2.getNumThreads() == 4
    finally:
        cv2.setNumThreads(previous)


def _raised_in(filename: str, error: BaseException) -> tuple:
    """``sys.exc_info()`` of ``error`` raised by code compiled as ``filename``."""
    namespace: dict = {}
    exec(compile("def serve(error):\n    raise error\n", filename, "exec"), namespace)
    try:
        namespace["serve"](error)
    except BaseException:
        return sys.exc_info()
    raise AssertionError("not raised")


def test_a_worker_says_nothing_of_a_file_descriptor_handshake_its_main_process_left():
    """A main process that stops at once (a second stop signal) can leave a worker's fd sharer mid-handshake; the
    worker's report of that would follow the stop line, so the worker's excepthook drops it, and only it."""
    seen = []
    hook = _quiet_when_the_main_process_left(lambda *info: seen.append(info[0]))
    sharer = "/usr/lib/python3/multiprocessing/resource_sharer.py"
    hook(*_raised_in(sharer, EOFError()))
    hook(*_raised_in(sharer, ConnectionResetError()))
    assert seen == []
    hook(*_raised_in(sharer, ValueError()))
    hook(*_raised_in("/work/user/data.py", EOFError()))
    assert seen == [ValueError, EOFError]
