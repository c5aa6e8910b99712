"""Loader workers' thread pools: one OpenCV and one BLAS thread in each, the main process's own left as they were."""

import cv2
from threadpoolctl import threadpool_info
from torch.utils.data import Dataset

from alternet.data.workers import PlainLoader, init_loader_worker


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
