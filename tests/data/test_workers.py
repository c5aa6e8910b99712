"""Loader workers: one OpenCV and one BLAS thread in each (the main process's own left as they were), on cores off
the main process's, and as many as ``auto`` finds keep up with the step."""

import os
import sys
import time
import types

import cv2
import lightning as L
import pytest
import torch
from threadpoolctl import threadpool_info
from torch.utils.data import Dataset, get_worker_info

from alternet.data import DigitsDataModule
from alternet.data.base import EpochSampler, ResumableLoader
from alternet.data.workers import (
    WAIT_TO_GROW,
    OnCores,
    PlainLoader,
    _quiet_when_the_main_process_left,
    init_loader_worker,
    more_workers,
    node_share,
    spare_cores,
    worker_cores,
)
from alternet.errors import DataError


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


# How many workers, and where they run -----------------------------------------------------------------------------


def test_an_auto_loader_grows_by_what_its_step_waited_within_its_ceiling():
    assert more_workers(1, 8, 0.0) == more_workers(1, 8, WAIT_TO_GROW - 0.01) == 1  # it kept up: the fewest stay
    assert more_workers(1, 8, 0.10) == 2  # at least one more
    assert more_workers(2, 8, 0.50) == 5  # 2 workers fed half the epoch's time: 4 would keep up, 5 with room
    assert more_workers(4, 8, 0.95) == more_workers(8, 8, 0.5) == 8  # never above the cores beside the main process
    assert more_workers(4, 3, 0.5) == 4  # a count set above the ceiling is not cut back
    assert more_workers(1, 8, 0.5, busy=0.3) == 1  # idle workers: the wait was taking batches in, not making them


def test_ranks_that_inherit_one_mask_split_its_cores_and_a_mask_a_scheduler_set_is_kept(monkeypatch):
    masks = {0: set(range(16)), os.getppid(): set(range(16))}  # this process's (pid 0) and its parent's
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: masks[pid], raising=False)
    assert node_share() == list(range(16))
    assert node_share(1, 4) == [4, 5, 6, 7]  # Lightning's launcher, torchrun or a container: the ranks share one mask
    assert spare_cores(node_share(1, 4)) == 3
    masks[0] = {8, 9, 10, 11}  # srun --cpu-bind gave this task its own cores, unlike its parent's
    assert node_share(2, 4) == [8, 9, 10, 11]
    masks[os.getppid()] = {8, 9, 10, 11}  # a cpuset of 4 cores that 4 ranks inherit: one core each
    assert node_share(2, 4) == [10]
    assert worker_cores(8, [8, 9, 10, 11]) == worker_cores(2, [8, 9, 10, 11]) == frozenset({9, 10, 11})
    assert worker_cores(2, [5]) is None and worker_cores(0, [8, 9]) is None  # nothing spare; no workers
    assert spare_cores([5]) == 1


class _Affinity(Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> list[int]:
        return sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_loader_workers_run_off_the_main_process_core_and_it_keeps_all_of_its_own():
    mine = sorted(os.sched_getaffinity(0))
    loader = PlainLoader(_Affinity(), batch_size=1, num_workers=1, worker_init_fn=init_loader_worker)
    seen = {tuple(int(core) for core in batch) for batch in loader}
    assert seen == {tuple(mine[1:])}  # every core of the process's but its first
    assert sorted(os.sched_getaffinity(0)) == mine
    assert list(loader) and isinstance(loader.worker_init_fn, OnCores)  # a second epoch wraps init once
    assert loader.worker_init_fn.init is init_loader_worker


class _Slow(Dataset):
    """Samples that take ``seconds`` each and say how many workers made them."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __len__(self) -> int:
        return 48  # 12 batches: more than MEASURED_BATCHES

    def __getitem__(self, key: tuple[int, int]) -> tuple[int, int]:
        time.sleep(self.seconds)
        info = get_worker_info()
        return key[0], info.num_workers if info is not None else 0


def _epoch(loader: ResumableLoader, step_seconds: float = 0.0) -> tuple[list[int], set[int]]:
    indices, workers = [], set()
    for index, count in loader:
        indices += index.tolist()
        workers |= set(count.tolist())
        time.sleep(step_seconds)
    return indices, workers


def _auto_loader(dataset: Dataset, most: int | None = 2) -> ResumableLoader:
    return ResumableLoader(
        dataset,
        batch_size=4,
        sampler=EpochSampler(len(dataset), seed=0, shuffle=True),
        num_workers=1,
        persistent_workers=True,
        worker_init_fn=init_loader_worker,
        most_workers=most,
    )


def test_an_auto_loader_that_kept_its_step_waiting_starts_more_workers_for_the_next_epoch_with_the_same_batches():
    loader = _auto_loader(_Slow(0.005))  # 20 ms a batch from one worker, taken at once
    first, workers = _epoch(loader)
    assert workers == {1} and loader.state_dict()["workers"] == 2
    again, workers = _epoch(loader)
    assert workers == {2} == {loader.num_workers} and again == first  # the sampler's order, whatever the workers

    resumed = _auto_loader(_Slow(0.0))
    resumed.load_state_dict(loader.state_dict())
    assert resumed.num_workers == loader.num_workers  # a resumed run starts with what the run had grown to
    fixed = _auto_loader(_Slow(0.005), most=None)  # a number the user set: kept
    _epoch(fixed)
    assert fixed.num_workers == 1


def test_an_auto_loader_that_keeps_up_with_its_step_keeps_its_one_worker():
    loader = _auto_loader(_Slow(0.0))
    _epoch(loader, step_seconds=0.02)  # the step takes 20 ms, a batch takes well under 1 ms to make
    assert loader.state_dict()["workers"] == 1


class _SlowSplit(Dataset):
    def __init__(self, split: Dataset):
        self.split = split

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, key):
        time.sleep(0.002)
        return self.split[key]


class _Linear(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3 * 32 * 32, 10)

    def training_step(self, batch, batch_index):
        images, labels = batch
        return torch.nn.functional.cross_entropy(self.net(images.flatten(1)), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_training_run_with_auto_workers_grows_them_when_its_step_waits(monkeypatch, tmp_path, caplog):
    """Through Lightning's own loop, whose fetcher knows the loader's length and asks for no batch after the last:
    the loader decides as it delivers the last."""
    monkeypatch.setattr("alternet.data.base.spare_cores", lambda share: 2)  # a machine with two cores to spare
    data = DigitsDataModule(num_workers="auto", batch_size=16, subset=0.25)
    data.setup("fit")
    data.splits["train"] = _SlowSplit(data.splits["train"])  # 32 ms a batch from one worker; the step takes ~1
    trainer = L.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path
    )
    with caplog.at_level("INFO"):
        trainer.fit(_Linear(), datamodule=data)
    loader = trainer.train_dataloader
    assert isinstance(loader, ResumableLoader) and loader.most_workers == 2 and loader.ranks_on_node == (0, 1)
    assert loader.num_workers == 2 and loader.state_dict()["workers"] == 2  # the second epoch ran with two
    assert "2 workers from the next epoch" in caplog.text


def test_the_banner_says_how_many_workers_load_and_how_far_auto_may_grow(monkeypatch):
    monkeypatch.setattr("alternet.data.base.spare_cores", lambda share: 7)
    auto = DigitsDataModule(num_workers="auto", batch_size=8)
    auto.setup("fit")
    assert auto.describe().endswith("; 1 loader worker (auto: up to 7 while the step waits for batches)")
    assert DigitsDataModule(num_workers=0, batch_size=8).describe().endswith("; loaded in the training process")


def test_streamed_shards_promise_no_growth(tmp_path):
    from alternet.data import ImageFolderDataModule

    data = ImageFolderDataModule(root=str(tmp_path), num_workers="auto", train_shards=str(tmp_path / "shards"))
    assert data.auto_workers and not data.grows_workers


def test_a_batch_shared_memory_cannot_hold_is_one_line_around_the_loop():
    """torch's worker error (its traceback inside) reached the user as a 40-line traceback ending in "unable to resize
    file </torch_...>: File too large"."""
    raised = RuntimeError(
        "Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        '  File "worker.py", line 1\nRuntimeError: unable to resize file </torch_1_2_0> to the right size: File too '
        "large (27)"
    )
    refused = pytest.raises(DataError, match=r"^a data loader worker could not pass its batch through shared memory")
    with refused, DigitsDataModule(image_size=8, batch_size=4).dead_workers_named():
        raise raised


def test_a_dead_workers_report_raised_inside_inspect_is_named_all_the_same():
    """torch's SIGCHLD report landed inside inspect (Lightning's self.log), which raised TypeError('unsupported
    callable') from it: a traceback where the sample's one line was due (seen once in CI)."""
    data = DigitsDataModule(image_size=8, batch_size=4)
    killed = RuntimeError("DataLoader worker (pid(s) 4242) exited unexpectedly")
    data.ledger = types.SimpleNamespace(sample_of=lambda pid: "images/broken.jpg" if pid == 4242 else None)
    refused = pytest.raises(DataError, match=r"^a data loader worker \(pid 4242\) died while reading images/broken")
    with refused, data.dead_workers_named():
        raise TypeError("unsupported callable") from killed
    with pytest.raises(TypeError, match="unrelated"), data.dead_workers_named():
        raise TypeError("unrelated")
