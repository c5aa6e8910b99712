"""The suite's fixtures (what tests share that is not a fixture lives in tests/helpers/): the real CIFAR-100 files,
a small image folder and its shards, and one trained, evaluated and exported digits run for every test that needs
one. Under pytest-xdist each worker computes with cpus // workers threads (subprocesses included), and the
session-wide data are made once for all workers (a file lock; each worker has its own session)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

if os.environ.get("PYTEST_XDIST_WORKER"):  # one share of the CPUs per worker, for torch and the processes it starts
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    _threads = str(max(1, len(os.sched_getaffinity(0)) // _workers))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, _threads)


@pytest.fixture(autouse=True)
def _no_logging_handler_outlives_its_test():
    """A Hydra job run in this process configures the root logger with handlers on the streams of that moment
    (a test's captured ones, which pytest closes after it); a later command in the same worker that logs would then
    print ``--- Logging error ---`` and a traceback into its own test. Handlers a test added are closed and removed
    at its end (pytest's own logging handlers excepted)."""
    root = logging.getLogger()
    before = set(root.handlers)
    yield
    for handler in [h for h in root.handlers if h not in before and not type(h).__module__.startswith("_pytest")]:
        root.removeHandler(handler)
        handler.close()


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """``make(path)`` run once per test session, even across pytest-xdist workers: the workers of one session share
    the parent of their base temporary directories, and the first to take the lock makes ``path`` there."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            make(path)
            done.touch()
    return path


@pytest.fixture(scope="session")
def cifar100_root() -> Path:
    """The directory holding the original ``cifar-100-python/`` files (skips when absent)."""
    from helpers import SHARED_DATA

    if not (SHARED_DATA / "cifar-100-python" / "train").is_file():
        pytest.skip(f"real CIFAR-100 not found under {SHARED_DATA} (set ALTERNET_TEST_DATA to its parent directory)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> Path:
    """A small class-folder data set (3 classes, 12 training and 3 validation images each, plus odd formats)."""
    from helpers.imagefolders import make_image_folder

    def make(path: Path) -> None:
        make_image_folder(path, size=20, splits={"train": 12, "val": 3})

    return made_once(tmp_path_factory, "folder", make)


@pytest.fixture(scope="session")
def image_shards(image_folder, tmp_path_factory) -> Path:
    """LitData shards of ``image_folder``'s training split, written once (litdata's start-up costs seconds)."""
    from alternet.data.files.shards import write_shards

    def make(path: Path) -> None:
        write_shards(image_folder, path, chunk_bytes="4KB", num_workers=1)

    return made_once(tmp_path_factory, "shards", make)


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory) -> Path:
    """The run directory of alternet_tiny trained on digits (helpers.DIGITS_RUN: debug=fast, tested,
    evaluated and exported at the end of training), made once per session. Tests read it and never write into it
    (copy it to write); the session checks at its end that no file in it changed."""
    from alternet.apps.train import train

    from helpers import DIGITS_RUN, compose_train, fingerprint

    def make(path: Path) -> None:
        train(compose_train(*DIGITS_RUN, output_dir=path))

    run_dir = made_once(tmp_path_factory, "digits-run", make)
    before = fingerprint(run_dir)
    yield run_dir
    assert fingerprint(run_dir) == before, f"a test changed the shared digits run {run_dir}: copy it to write into it"


@pytest.fixture(scope="session")
def digits_summary(digits_run):
    """``digits_run``'s summary (metrics.json) as ``train`` returns it."""
    from alternet.runs.summary import RunSummary

    return RunSummary.from_json(digits_run / "metrics.json")


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, offline: hub and timm loads read only what a test writes into it
    (``helpers.cached_repo``)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what alternet's own reachability check reads (models.external)
    return cache


def pytest_configure(config: pytest.Config) -> None:
    """In a process that runs tests (not pytest-xdist's controller, which only hands them out: its ~5 s of imports
    delayed every worker's start), torch's threads and what every test needs imported. Then refuse the one pairing
    that silently drops this suite's xdist groups: pytest 9.2 ignores the group suffix pytest-xdist 3.8 writes into
    node ids (pytest-dev/pytest-xdist#1386), so every worker would build each shared run and two 2-process DDP runs
    could overlap."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not config.getoption("numprocesses", None):
        _import_for_tests()
    if config.getoption("dist", "no") != "loadgroup":
        return
    from importlib.metadata import version

    xdist = version("pytest-xdist")
    if pytest.version_tuple[:2] >= (9, 2) and tuple(map(int, xdist.split(".")[:2])) <= (3, 8):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with pytest-xdist {xdist} drops this suite's xdist_group marks "
            '(pytest-dev/pytest-xdist#1386): pip install -e ".[dev]" (pytest<9.2), or run with -n 0'
        )


def _import_for_tests() -> None:
    import torch

    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # Lightning now: the log handler it adds at import then writes to the session's stderr, not to the captured
    # stream of the first test that imports it (closed after that test: "Logging error" tracebacks in later tests)
    import lightning.pytorch  # noqa: F401

    import alternet.apps.config  # noqa: F401 - the schemas of train.yaml and evaluate.yaml, as the commands register
