"""Faults a user meets while a run works, run as the user runs them: ``train.py`` in a real subprocess started in
its own session (a process group, as SLURM, a terminal, ``timeout``, Docker and Kubernetes start it) and stopped by
a real signal to that group (they all signal the whole group, loader workers included) or to the process alone.

Each case asserts the exit status, the one line the user reads, the files left behind, that no process of the
group outlives the run, and that ``ckpt_path=last`` (the printed resume command, run as printed) reaches the same
weights as a run never interrupted. The default suite runs one representative case per fault; the full matrix
(signals x data paths x loader workers x single process / 2-process CPU DDP) is marked slow.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import multiprocessing
import os
import pickle
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from alternet import files
from alternet.apps.train import train
from alternet.data import licence
from alternet.data.corrupted import cifar_c
from alternet.data.licence import LicenceError
from alternet.data.workers import (
    PlainLoader,
    StartsWorkersSafely,
    init_loader_worker,
    leave_stop_signals_to_main_process,
)
from alternet.evaluation.evaluator import write_npz
from alternet.files import OUTPUT_LOCK, WriteError, atomic_write, stop_signals_blocked, write_json
from alternet.runs.checkpoints import read_checkpoint
from alternet.runs.directories import RunDir
from alternet.training import builders
from alternet.training.callbacks import AtomicCheckpointIO
from alternet.training.stopping import PreemptionCheckpoint, StoppedWithoutSaving

from helpers import FAST, ROOT, compose_train, run_main, run_warm, warm
from helpers.callbacks import fit_loop_inside_an_epoch, step_logs
from helpers.models import assert_same_weights

# pytest-xdist: the whole module on one worker, so that its session-scoped fixtures (an image folder, its shards and the
# reference runs) are made once; the worker of the other tests that start processes of their own (the 2-process DDP
# runs), so one warm interpreter (helpers.warm) serves them all
pytestmark = pytest.mark.xdist_group("processes")

STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")
EPOCHS, STEPS = 2, 30  # optimizer steps per epoch: the signal comes a few steps into the second epoch

COMMON = [
    f"trainer.max_epochs={EPOCHS}",
    f"trainer.limit_train_batches={STEPS}",
    "trainer.limit_val_batches=2",
    "trainer.limit_test_batches=1",
    "evaluate.after_training=false",
    "callbacks.progress.interval=0",  # a progress line after every step: the test sees where the run is
    "callbacks.preemption.sync_every_n_steps=2",  # DDP ranks agree on a stop every 2 steps
]
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]


def data_overrides(path: str, workers: int, folder: Path, shards: Path | None, ranks: int = 1) -> list[str]:
    """The overrides of one data path: arrays (digits), an image folder, or LitData shards of that folder; at least
    STEPS batches per epoch on each of ``ranks`` processes."""
    if path == "digits":
        return ["data=digits", "recipe.batch_size=16", f"data.num_workers={workers}"]
    overrides = ["data=imagefolder", f"data.root={folder}", "data.image_size=16", f"recipe.batch_size={4 // ranks}"]
    overrides += ["recipe.epochs=2", "recipe.warmup_epochs=1", f"data.num_workers={workers}"]
    return [*overrides, f"data.train_shards={shards}"] if path == "shards" else overrides


class TrainingProcess:
    """``python train.py OVERRIDES`` (or ``command``, a ``python SCRIPT ...`` line) in a session of its own, its
    stdout and stderr in one log file: a warm child (helpers.warm: a process of its own, without a fresh
    interpreter's imports)."""

    def __init__(self, run_dir: Path, overrides: list[str], command: list[str] | None = None, log: str = ".log"):
        self.run_dir = run_dir
        self.log = run_dir.with_name(run_dir.name + log)
        tests = str(ROOT / "tests")  # helpers.callbacks for callbacks.extra, in rank 0 and the ranks Lightning starts
        python_path = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": python_path}
        python, script, *args = command or [sys.executable, "train.py", *overrides, f"hydra.run.dir={run_dir}"]
        assert Path(python).name.startswith("python") and script.endswith(".py"), f"not a python SCRIPT line: {command}"
        self.process = warm.start(script, args, cwd=ROOT, env=env, stdout=self.log, new_session=True)
        self.group = self.process.pid  # the session leader's id is its process group's id

    @property
    def output(self) -> str:
        return self.log.read_text()

    def wait_for(self, text: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"the run never printed {text!r}:\n{self.output[-3000:]}")
            time.sleep(0.02)

    def send(self, name: str, *, group: bool) -> None:
        (os.killpg if group else os.kill)(self.group, getattr(signal, name))

    def wait(self, timeout: float = 240) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the run did not stop within {timeout} s:\n{self.output[-3000:]}")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.group, signal.SIGKILL)

    def group_is_gone(self, timeout: float = 15) -> bool:
        """No process of the run's group is left (loader workers and DDP ranks included)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.group, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.1)
        self.kill()
        return False


def epoch_means(run_dir: Path) -> list[dict[str, str]]:
    """Each epoch's train/acc and train/nll_epoch as logs/metrics.csv holds them: an epoch a stop cut continues the
    sums its checkpoint saved (each rank its own), so a resumed run logs the uninterrupted run's numbers."""
    with open(run_dir / "logs" / "metrics.csv", newline="") as f:
        rows = [row for row in csv.DictReader(f) if row.get("train/acc")]
    assert len(rows) == EPOCHS, rows
    return [{key: row[key] for key in ("epoch", "train/acc", "train/nll_epoch")} for row in rows]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = read_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert checkpoint["global_step"] == EPOCHS * STEPS
    return checkpoint["state_dict"]


def resume_as_printed(run_dir: Path, output: str) -> None:
    """Run the resume command the stopped run printed, exactly as printed; it must finish the run."""
    command = re.search(r"Resume with: (.+)$", output, re.MULTILINE)
    assert command, output[-2000:]
    resumed = TrainingProcess(run_dir, [], command=shlex.split(command.group(1)), log=".resumed.log")
    assert resumed.wait(300) == 0, resumed.output[-3000:]


@pytest.fixture(scope="session")
def big_folder(tmp_path_factory) -> Path:
    """An image folder of 3 x 40 training images: 30 steps of 4 images per epoch."""
    from helpers.imagefolders import make_image_folder

    return make_image_folder(tmp_path_factory.mktemp("faults-folder"), size=20, splits={"train": 40, "val": 3})


@pytest.fixture(scope="session")
def big_shards(big_folder, tmp_path_factory) -> Path:
    from alternet.data.files.shards import write_shards

    out = tmp_path_factory.mktemp("faults-shards") / "shards"
    write_shards(big_folder, out, chunk_bytes="4KB", num_workers=1)
    return out


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """The final weights of each data path's run never interrupted. The number of workers changes nothing on the
    arrays and folder paths (each sample is seeded); LitData hands chunks to workers, so the shards' order differs."""
    cache: dict[tuple, tuple[dict[str, torch.Tensor], list[dict[str, str]]]] = {}

    def weights(overrides: list[str], key: tuple) -> tuple[dict[str, torch.Tensor], list[dict[str, str]]]:
        """(the final weights, the epochs' training means)."""
        if key not in cache:
            run_dir = tmp_path_factory.mktemp("reference") / "run"
            run = TrainingProcess(run_dir, overrides)
            assert run.wait() == 0, run.output[-3000:]
            cache[key] = final_weights(run_dir), epoch_means(run_dir)
        return cache[key]

    return weights


def stop_and_resume(tmp_path: Path, overrides: list[str], signal_name: str, *, group: bool, ranks: int = 1) -> str:
    """Stop a run a few steps into its second epoch with ``signal_name``; check the stop and the files it leaves,
    resume it as printed; returns what the stopped run printed."""
    run = TrainingProcess(tmp_path / "run", overrides)
    run.wait_for(f"epoch 2/{EPOCHS}  batch 3/")
    run.send(signal_name, group=group)
    returncode = run.wait()
    output = run.output
    assert returncode == 1, output[-3000:]
    last_line = output.strip().splitlines()[-1]
    assert re.fullmatch(rf"error: stopped by {signal_name} at global step (\d+) \(in epoch 2\); saved .+", last_line), (
        output[-3000:]
    )
    for noise in ("Traceback", "killed by signal", "weights_only", "Received SIGTERM"):
        assert noise not in output, output[-3000:]
    assert output.count("saving a resumable checkpoint after this step") == ranks  # not the loader workers
    step = int(re.search(r"global step (\d+)", last_line).group(1))
    assert STEPS < step < EPOCHS * STEPS  # mid-epoch 2
    checkpoints = run.run_dir / "checkpoints"
    assert read_checkpoint(checkpoints / "last.ckpt")["global_step"] == step
    assert not list(checkpoints.glob(".*.tmp")), "a temporary checkpoint was left behind"
    assert not (run.run_dir / "metrics.json").exists()
    assert run.group_is_gone(), "a process of the stopped run outlived it"
    resume_as_printed(run.run_dir, output)
    return output


CASES = [
    pytest.param("SIGTERM", "folder", 2, True, False, id="SIGTERM-group-folder-2workers"),  # the run
    *(
        pytest.param(name, path, workers, group, False, marks=pytest.mark.slow, id=f"{name}-group-{path}-{workers}w")
        for name in STOP_SIGNALS
        for path in ("digits", "folder", "shards")
        for workers in (0, 1, 2)
        for group in (True,)
        if (name, path, workers) != ("SIGTERM", "folder", 2)
    ),
    *(  # to the training process alone (kill PID): its loader workers never see the signal
        pytest.param(name, path, workers, False, False, marks=pytest.mark.slow, id=f"{name}-process-{path}-{workers}w")
        for name in STOP_SIGNALS
        for path in ("digits", "folder", "shards")
        for workers in (1, 2)  # with no workers the process is the whole group: the group cases above
    ),
    *(
        pytest.param(
            name,
            path,
            workers,
            True,
            True,
            marks=[pytest.mark.slow, pytest.mark.xdist_group("processes")],
            id=f"{name}-group-{path}-{workers}w-ddp",
        )
        for name in STOP_SIGNALS
        for path in ("digits", "folder", "shards")
        for workers in (0, 1, 2)
    ),
]


@pytest.mark.parametrize(("signal_name", "path", "workers", "group", "ddp"), CASES)
def test_a_stop_signal_saves_mid_epoch_and_the_run_resumes_exactly(
    signal_name, path, workers, group, ddp, tmp_path, big_folder, request, reference
):
    shards = request.getfixturevalue("big_shards") if path == "shards" else None
    overrides = [*COMMON, *(DDP if ddp else []), *data_overrides(path, workers, big_folder, shards, 2 if ddp else 1)]
    expected, means = reference(overrides, (path, ddp, workers if path == "shards" else None))
    stop_and_resume(tmp_path, overrides, signal_name, group=group, ranks=2 if ddp else 1)
    assert_same_weights(expected, final_weights(tmp_path / "run"))
    assert epoch_means(tmp_path / "run") == means


# a second signal: stop at once, the previous checkpoint intact ---------------------------------------------------


@pytest.mark.slow  # a subprocess run stopped twice, ~7 s: the default suite's time (the first signal's tests stay)
def test_a_second_signal_stops_at_once_and_leaves_the_previous_checkpoint_intact(tmp_path, big_folder, reference):
    """SIGTERM then SIGINT to the group (the scheduler's stop, then an impatient Ctrl-C): the run stops before the
    step ends, saves nothing, and the mid-epoch checkpoint written before resumes exactly."""
    overrides = [*COMMON, *data_overrides("folder", 2, big_folder, None), "callbacks.checkpoint.every_n_train_steps=4"]
    expected, means = reference([o for o in overrides if "every_n_train_steps" not in o], ("folder", False, None))
    run = TrainingProcess(tmp_path / "run", overrides)
    run.wait_for(f"epoch 2/{EPOCHS}  batch 7/")
    run.send("SIGTERM", group=True)
    run.send("SIGINT", group=True)
    assert run.wait() == 1, run.output[-3000:]
    output = run.output
    last_line = output.strip().splitlines()[-1]
    assert re.match(r"error: stopped at once by a second signal \(SIG(INT|TERM)\) before the pre-emption", last_line)
    assert "holds the previous checkpoint. Resume with: " in last_line
    assert "Traceback" not in output and "killed by signal" not in output
    checkpoints = tmp_path / "run" / "checkpoints"
    assert read_checkpoint(checkpoints / "last.ckpt")["global_step"] in (32, 36)  # every 4 steps, in epoch 2
    assert not list(checkpoints.glob(".*.tmp"))
    assert run.group_is_gone()
    resume_as_printed(run.run_dir, output)
    assert_same_weights(expected, final_weights(tmp_path / "run"))
    assert epoch_means(tmp_path / "run") == means


@pytest.mark.slow  # ~40 s: a 2-process run whose rank 0 writes its checkpoints 6 s late
@pytest.mark.xdist_group("processes")
def test_no_rank_ends_a_ddp_stop_before_rank_0_has_written_its_checkpoint(tmp_path, big_folder, reference):
    """Rank 1 raised its stop as soon as the save's barrier passed, and exited 1; Lightning's launcher then killed
    every process, rank 0 too, while its background write was under way: the pre-emption checkpoint was lost."""
    overrides = [*COMMON, *DDP, *data_overrides("digits", 0, big_folder, None, 2)]
    expected, means = reference(overrides, ("digits", True, None))
    slow = "callbacks.extra=[{_target_:helpers.callbacks.SlowWritesOnRankZero,seconds:6}]"
    output = stop_and_resume(
        tmp_path, [*overrides, "performance.async_checkpoint=true", slow], "SIGTERM", group=True, ranks=2
    )
    assert output.count("error: stopped by SIGTERM at global step") == 2  # rank 0 said it too: it was not killed
    assert_same_weights(expected, final_weights(tmp_path / "run"))
    assert epoch_means(tmp_path / "run") == means


class _Trainer:
    """The surface of a one-process trainer that PreemptionCheckpoint sees; its save writes atomically."""

    def __init__(self, run_dir: Path, write):
        self.world_size, self.global_rank, self.accumulate_grad_batches = 1, 0, 1
        self.global_step, self.current_epoch, self.is_global_zero = 7, 0, True
        self.default_root_dir = str(run_dir)
        self.write = write
        self.fit_loop, self._logger_connector = fit_loop_inside_an_epoch(), step_logs()

    def save_checkpoint(self, path: Path, weights_only: bool | None = None) -> None:
        assert weights_only is False  # said, so Lightning does not warn that it was not
        atomic_write(path, self.write)


def test_a_second_signal_while_the_checkpoint_is_written_stops_at_once_and_keeps_the_previous_one(tmp_path):
    previous = tmp_path / "checkpoints" / "last.ckpt"
    previous.parent.mkdir()
    previous.write_bytes(b"the previous checkpoint")

    def write_interrupted(tmp: Path) -> None:
        tmp.write_bytes(b"half a checkpoint")
        os.kill(os.getpid(), signal.SIGTERM)  # the second signal, in the middle of the write
        tmp.write_bytes(b"half a checkpoint and the rest")

    callback = PreemptionCheckpoint(RunDir(tmp_path), ["SIGTERM"], requeue=False)
    trainer = _Trainer(tmp_path, write_interrupted)
    before = signal.getsignal(signal.SIGTERM)
    callback.setup(trainer, None, "fit")
    callback.on_train_start(trainer, None)
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # the first: save after this step
        with pytest.raises(StoppedWithoutSaving, match=r"second signal \(SIGTERM\).*holds the previous checkpoint"):
            callback.on_train_batch_end(trainer, None, None, None, 0)
    finally:
        callback.on_exception(trainer, None, None)
    assert signal.getsignal(signal.SIGTERM) is before
    assert previous.read_bytes() == b"the previous checkpoint"
    assert [p.name for p in previous.parent.iterdir()] == ["last.ckpt"]  # no temporary file left


def test_checkpoints_are_read_as_plain_data_only(tmp_path):
    """Lightning reads a resumed checkpoint (a file a user hands in) through AtomicCheckpointIO: weights_only=True."""
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": _Unpicklable()}, path)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        AtomicCheckpointIO().load_checkpoint(path)
    torch.save({"state_dict": {"w": torch.ones(2)}}, path)
    assert torch.equal(AtomicCheckpointIO().load_checkpoint(path)["state_dict"]["w"], torch.ones(2))


class _Unpicklable:
    """An arbitrary object: a pickle that holds one could run code when loaded."""


# real CIFAR-C files with robustness.max_images -------------------------------------------------------------------


def test_real_corruption_files_of_the_whole_test_split_are_scored_on_their_first_max_images(
    digits_run, tmp_path, monkeypatch, capsys
):
    """The archives' layout: every severity holds the whole test split (360 digits here, 10,000 for CIFAR) and
    labels.npy the test labels 5 times. robustness.max_images=50 scores the first 50 of each severity and says so;
    files that cannot be of this test split are still refused in one line."""
    from alternet.data import DigitsDataModule

    test = DigitsDataModule(image_size=16, batch_size=8)
    test.setup()
    images, labels = test.splits["test"].images, test.splits["test"].labels
    root = tmp_path / "DIGITS-C"
    root.mkdir()
    for name in ("gaussian_noise", "fog"):
        np.save(root / f"{name}.npy", np.concatenate([images] * 5))
    np.save(root / "labels.npy", np.tile(labels, 5))
    args = [f"ckpt={digits_run}", f"robustness.root={root}", "robustness.corruptions=[gaussian_noise,fog]"]
    code, stderr = run_main(
        "evaluate.py", [*args, "robustness.max_images=50", f"hydra.run.dir={tmp_path / 'eval'}"], monkeypatch, capsys
    )
    assert code == "0", stderr[-3000:]
    assert "real corruptions (the first 50 images of each, robustness.max_images=50)" in stderr
    robustness = json.loads((tmp_path / "eval" / "metrics.json").read_text())["robustness"]
    assert robustness["source"] == "real" and robustness["max_images"] == 50
    assert {row["n"] for row in robustness["table"]} == {50} and len(robustness["table"]) == 10

    np.save(root / "labels.npy", np.tile(np.roll(labels, 1), 5))  # not this test split's labels
    code, _ = run_main(
        "evaluate.py", [*args, "robustness.max_images=50", f"hydra.run.dir={tmp_path / 'refused'}"], monkeypatch, capsys
    )
    assert code == (
        f"error: robustness.root={root} does not corrupt this model's digits test split: their labels are not the "
        "digits test labels in order"
    )
    assert not (tmp_path / "refused" / "metrics.json").exists()


# the licence stays MIT -------------------------------------------------------------------------------------------


def installed(monkeypatch, versions: dict[str, str]) -> None:
    """Pretend that exactly these distributions are installed (importlib.metadata's answers)."""

    def version(name: str) -> str:
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(metadata, "version", version)


FIX = "Fix: pip uninstall -y albumentationsx albumentations && pip install albumentations==2.0.8"


@pytest.mark.parametrize(
    ("versions", "message"),
    [
        ({"albumentations": "2.0.8", "albumentationsx": "2.0.11"}, "albumentationsx 2.0.11 (AGPL-3.0) is installed"),
        ({"albumentationsx": "2.1.0"}, "albumentationsx 2.1.0 (AGPL-3.0) is installed and provides the"),
        ({"albumentations": "1.4.24"}, "albumentations 1.4.24 is installed; alternet needs the MIT-licensed 2.0.x"),
        ({"albumentations": "2.1.0"}, "albumentations 2.1.0 is installed; alternet needs the MIT-licensed 2.0.x"),
        ({}, "belongs to no installed distribution, so its licence is unknown"),
    ],
)
def test_an_albumentations_that_is_not_the_mit_2_0_series_is_refused_in_one_line(monkeypatch, versions, message):
    installed(monkeypatch, versions)
    with pytest.raises(LicenceError) as refused:
        licence.require_mit_albumentations()
    assert message in str(refused.value) and str(refused.value).endswith(FIX) and "\n" not in str(refused.value)
    assert isinstance(refused.value, ImportError)


def test_the_pinned_mit_albumentations_passes(monkeypatch):
    licence.require_mit_albumentations()  # this environment's own
    installed(monkeypatch, {"albumentations": "2.0.3"})
    licence.require_mit_albumentations()


def test_importing_the_augmentation_code_with_albumentationsx_installed_fails_with_the_fix(tmp_path):
    """A real interpreter that finds an albumentationsx distribution (its metadata, as pip leaves it)."""
    info = tmp_path / "site" / "albumentationsx-2.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: albumentationsx\nVersion: 2.1.0\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    command = [sys.executable, "train.py", "debug=fast", f"hydra.run.dir={tmp_path / 'run'}"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip() == (  # one line, no traceback through the import chain
        "error: albumentationsx 2.1.0 (AGPL-3.0) is installed and provides the "
        "'albumentations' module in place of the MIT-licensed albumentations 2.0.8 that alternet is built and "
        f"licensed with. {FIX}"
    )
    assert not (tmp_path / "run").exists()


# loader workers and stop signals -------------------------------------------------------------------------------


def _worker_that_leaves_stop_signals_to_its_parent(ready) -> None:
    leave_stop_signals_to_main_process()
    ready.set()
    time.sleep(60)


# A library thread that a forked child starts before anything of ours runs there, as W&B's OpenTelemetry exporters
# restart theirs (os.register_at_fork): it lives in the child from the fork on (only while the test sets the flag).
LIBRARY_THREAD_AFTER_FORK = threading.Event()


def _start_library_thread() -> None:
    if LIBRARY_THREAD_AFTER_FORK.is_set():
        threading.Thread(target=time.sleep, args=(60,), name="library", daemon=True).start()


os.register_at_fork(after_in_child=_start_library_thread)


def test_a_loader_worker_ignores_stop_signals_from_others_and_exits_on_its_parents_sigterm():
    """The group's signals (sent by another process: ``kill`` here) leave the worker alive, even with a library
    thread started in it at the fork; its own parent's SIGTERM (``Process.terminate``, as torch's shutdown and the
    interpreter's exit send it) still ends it, cleanly. Workers start as the package's loaders start them (SIGTERM
    blocked in the forking thread: ``StartsWorkersSafely``); without that the library thread took the
    group's SIGTERM and the worker died of it (seen with W&B's exporters running in the main process)."""
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    worker = context.Process(target=_worker_that_leaves_stop_signals_to_its_parent, args=(ready,), daemon=True)
    LIBRARY_THREAD_AFTER_FORK.set()
    try:
        with stop_signals_blocked():
            worker.start()
    finally:
        LIBRARY_THREAD_AFTER_FORK.clear()
    try:
        assert ready.wait(30)
        assert len(os.listdir(f"/proc/{worker.pid}/task")) >= 3  # main, the library's thread, the SIGTERM waiter
        for name in STOP_SIGNALS:
            subprocess.run(["kill", f"-{name.removeprefix('SIG')}", str(worker.pid)], check=True)
        worker.join(1.0)
        assert worker.is_alive()
        worker.terminate()
        worker.join(10)
        assert worker.exitcode == 0  # exited, not killed by the signal
    finally:
        if worker.is_alive():
            worker.kill()


def _signalled_before_init(worker_id: int) -> None:
    """A group's stop signals landing in a worker after the fork, before its ``worker_init_fn`` ignores them."""
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGUSR1)
    init_loader_worker(worker_id)


def test_stop_signals_that_reach_a_worker_before_its_init_wait_and_are_ignored():
    """Without the block a Ctrl-C there raised KeyboardInterrupt in the worker and SIGUSR1 (SLURM's pre-emption
    warning) killed it: the run failed on a dead worker instead of finishing its step and saving."""
    loader = PlainLoader(list(range(8)), batch_size=4, num_workers=2, worker_init_fn=_signalled_before_init)
    assert [batch.tolist() for batch in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_every_loader_of_the_package_starts_its_workers_with_the_stop_signals_blocked(monkeypatch):
    from torch.utils.data import DataLoader

    from alternet.data.base import EpochSampler, ResumableLoader
    from alternet.data.files.shards import StreamingLoader

    assert all(issubclass(c, StartsWorkersSafely) for c in (ResumableLoader, StreamingLoader, PlainLoader))
    masks = []
    start = DataLoader._get_iterator

    def spy(self):
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, set()))
        return start(self)

    monkeypatch.setattr(DataLoader, "_get_iterator", spy)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert list(ResumableLoader(list(range(4)), batch_size=2, sampler=EpochSampler(4, seed=0, shuffle=False))) != []
    stops = {getattr(signal, name) for name in STOP_SIGNALS}
    assert stops <= masks[0] and not stops & before
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before  # restored once the workers have started


# faults while writing: nothing lost, one line naming the file ----------------------------------------------------


def _failing(code: int):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize(
    ("code", "where", "says"),
    [
        (errno.ENOSPC, "write", "No space left on device (ENOSPC); its previous version is intact"),
        (errno.EROFS, "mkstemp", "Read-only file system (EROFS); its previous version is intact"),
        (errno.EDQUOT, "replace", "Disk quota exceeded (EDQUOT); its previous version is intact"),
    ],
)
def test_a_failed_write_keeps_the_previous_file_and_says_which_and_why(tmp_path, monkeypatch, code, where, says):
    path = tmp_path / "metrics.json"
    write_json(path, {"acc": 0.5})
    if where == "mkstemp":
        monkeypatch.setattr(files.tempfile, "mkstemp", _failing(code))
    elif where == "replace":
        monkeypatch.setattr(files.os, "replace", _failing(code))
    else:
        monkeypatch.setattr(files.json, "dumps", lambda *a, **k: "{}")  # the write itself fails below
        monkeypatch.setattr(Path, "write_text", _failing(code))
    with pytest.raises(WriteError) as failed:
        write_json(path, {"acc": 0.9})
    assert str(failed.value).startswith(f"could not write {path}: {says}") and "\n" not in str(failed.value)
    assert isinstance(failed.value, OSError)
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"acc": 0.5}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temporary file left


def test_predictions_are_written_atomically(tmp_path, monkeypatch):
    path = tmp_path / "predictions.npz"
    write_npz(path, {"probs": np.ones(3)})
    monkeypatch.setattr(np, "savez_compressed", _failing(errno.ENOSPC))
    with pytest.raises(WriteError, match=r"predictions\.npz: No space left on device"):
        write_npz(path, {"probs": np.zeros(3)})
    with np.load(path) as kept:
        assert kept["probs"].tolist() == [1.0, 1.0, 1.0]


def test_a_full_disk_while_the_corruption_cache_is_written_keeps_the_finished_files(tmp_path, monkeypatch):
    images = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    names, labels, out = ("gaussian_noise", "pixelate"), np.arange(4), tmp_path / "cache"
    run_task = cifar_c._run_task

    def disk_fills_up(task, images):
        if task.name == "pixelate":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        run_task(task, images)

    monkeypatch.setattr(cifar_c, "_run_task", disk_fills_up)
    with pytest.raises(WriteError) as failed:
        cifar_c.generate_cifar_c(images, labels, out, corruptions=names, severities=(1,), workers=1)
    assert str(failed.value) == (
        f"could not write the CIFAR-C cache {out}: No space left on device (ENOSPC); the files it completed before "
        "are kept and reused. Free space, or make the directory writable"
    )
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_LOCK, "gaussian_noise.npy", "labels.npy", "manifest.json"]
    monkeypatch.undo()
    finished = (out / "gaussian_noise.npy").stat().st_mtime_ns
    cifar_c.generate_cifar_c(images, labels, out, corruptions=names, severities=(1,), workers=1)
    assert (out / "gaussian_noise.npy").stat().st_mtime_ns == finished and (out / "pixelate.npy").is_file()


@pytest.mark.parametrize(
    ("failure", "reason"),
    [(errno.ENOSPC, "No space left on device (ENOSPC)"), (errno.EROFS, "Read-only file system (EROFS)")],
)
def test_a_full_disk_while_a_checkpoint_is_written_stops_in_one_line_and_keeps_the_last_one(
    tmp_path, monkeypatch, capsys, failure, reason
):
    """The 2nd checkpoint of a run fails with ENOSPC (or its directory turned read-only, EROFS): the run stops with
    one line naming last.ckpt, which still holds the 1st (complete, readable)."""
    saved = []
    save = TorchCheckpointIO.save_checkpoint

    def disk_fills_up(self, checkpoint, path, storage_options=None):
        if saved:
            raise OSError(failure, os.strerror(failure))
        saved.append(path)
        return save(self, checkpoint, path, storage_options)

    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", disk_fills_up)
    run_dir = tmp_path / "run"
    arguments = [*FAST, "callbacks.checkpoint.every_n_train_steps=1", f"hydra.run.dir={run_dir}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    last = run_dir / "checkpoints" / "last.ckpt"
    assert code == (
        f"error: could not write {last}: {reason}; its previous version is intact. Free space, or make the directory "
        "writable"
    )
    assert "Traceback" not in stderr
    assert read_checkpoint(last)["global_step"] == 1
    assert not list(last.parent.glob(".*.tmp")) and not (run_dir / "metrics.json").exists()


def small_folder(tmp_path: Path) -> Path:
    """3 classes of 8 training and 2 validation images, 20 px, no odd formats."""
    from helpers.imagefolders import make_image_folder

    return make_image_folder(tmp_path / "folder", size=20, splits={"train": 8, "val": 2}, odd_formats=False)


def delete_when_training_starts(images: list[Path], monkeypatch) -> None:
    """The next run deletes ``images`` once its folder is listed and training starts (a callback in every run)."""

    class DeleteImages(L.Callback):
        def on_train_start(self, trainer, pl_module):
            for image in images:
                image.unlink()

    build = builders.build_callbacks
    monkeypatch.setattr(builders, "build_callbacks", lambda *a, **k: [DeleteImages(), *build(*a, **k)])


def test_an_image_that_disappears_mid_run_is_named_in_one_line(tmp_path, monkeypatch, capsys):
    """Training images deleted after the folder was listed (a loader worker reads them): one line naming one."""
    folder = small_folder(tmp_path)
    delete_when_training_starts(sorted((folder / "train" / "bee").iterdir()), monkeypatch)
    run_dir = tmp_path / "run"
    arguments = ["data=imagefolder", f"data.root={folder}", "data.image_size=16", "data.num_workers=1"]
    arguments = [*FAST, *arguments, "recipe.batch_size=4", "recipe.epochs=1", "recipe.warmup_epochs=0"]
    arguments.append(f"hydra.run.dir={run_dir}")
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert re.fullmatch(
        rf"error: image {re.escape(str(folder))}/train/bee/bee_00\d\.JPEG is gone \(No such file or directory\): it "
        r"was moved or deleted after the run listed it; restore it, or start the run again to list the folder afresh",
        code,
    ), code
    assert "Traceback" not in stderr


def test_images_that_disappear_mid_run_are_skipped_and_counted_with_skip_corrupt(tmp_path, monkeypatch):
    """data.skip_corrupt=true: training images deleted after the folder was listed are skipped by the loader
    worker, the run finishes, and metrics.json counts what was skipped."""
    folder = small_folder(tmp_path)
    gone = sorted((folder / "train" / "bee").iterdir())
    delete_when_training_starts(gone, monkeypatch)
    arguments = ["data=imagefolder", f"data.root={folder}", "data.image_size=16", "data.num_workers=1"]
    arguments += ["data.skip_corrupt=true", "recipe.batch_size=4", "recipe.epochs=1", "recipe.warmup_epochs=0"]
    summary = train(compose_train(*FAST, *arguments, "trainer.limit_train_batches=null", output_dir=tmp_path / "run"))
    # a whole epoch reads every training image once (the clean-training pass may read some again)
    assert summary.global_step == 6 and summary.skipped_images >= len(gone)


def test_a_loader_worker_that_dies_mid_sample_is_reported_by_that_sample(tmp_path):
    """A worker killed while decoding one image (a decoder's segfault, the OOM killer: SIGKILL here) ends the run
    with one line naming that image, not torch's 'DataLoader worker (pid N) is killed by signal'."""
    folder = small_folder(tmp_path)
    fatal = sorted((folder / "train" / "bee").iterdir())[3]
    arguments = folder_run(folder, f"hydra.run.dir={tmp_path / 'run'}", "trainer.limit_train_batches=null")
    message = worker_death("alternet.data.files.images", str(fatal), "always", "train.py", arguments)
    assert message.endswith(
        "a decoder crash on that file, or the kernel's out-of-memory killer. Decode the file alone to tell; replace "
        "or delete it, or lower data.num_workers / the batch size if memory ran out"
    )
    assert read_from(message) == str(fatal)


@pytest.mark.slow  # 8 s; by default Ctrl-C in a training step and where Lightning handles it (below)
def test_ctrl_c_while_a_sweep_sets_up_a_job_stops_it_in_one_line_and_the_same_command_continues(tmp_path):
    """Outside training steps (Hydra composing a job, set-up, testing, between a sweep's jobs) SIGINT once raised a
    KeyboardInterrupt traceback from wherever it landed; the sweep now ends on one line, and the same command
    finishes it. The signal comes as Hydra launches the sweep: seconds before any job trains."""
    sweep = tmp_path / "sweep"
    command = [sys.executable, "train.py", "-m", "seed=0,1", *FAST, "evaluate.after_training=false"]
    command += ["trainer.enable_progress_bar=false", f"hydra.sweep.dir={sweep}", "ckpt_path=last"]
    run = TrainingProcess(sweep, [], command=command)
    run.wait_for("Launching 2 jobs locally")
    run.send("SIGINT", group=True)
    assert run.wait() == 1, run.output[-3000:]
    last_line = run.output.strip().splitlines()[-1]
    assert last_line.startswith("error: stopped by SIGINT outside the training steps"), run.output[-3000:]
    assert "Traceback" not in run.output
    assert not list(sweep.glob("*/metrics.json"))
    again = TrainingProcess(sweep, [], command=command, log=".again.log")
    assert again.wait() == 0, again.output[-3000:]
    assert (sweep / "0" / "metrics.json").is_file() and (sweep / "1" / "metrics.json").is_file()


# Hydra passes the callback's error on as this warning before raising it: the error this test stages
@pytest.mark.filterwarnings("ignore:Callback SweepPreflight.on_multirun_start raised AttributeError")
def test_ctrl_c_that_hydra_reports_as_another_error_still_ends_on_the_one_line(tmp_path, monkeypatch, capsys):
    """Ctrl-C inside Hydra's composition of a sweep's job: a clean-up in OmegaConf raised an AttributeError in the
    KeyboardInterrupt's place, which Hydra raises (the command asks it to, alternet.apps.hydra.composition) or printed
    as its own error (seen under load, the test above); the command ends on its stop line all the same."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    def interrupted_while_composing(self, *args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises here
        except KeyboardInterrupt:
            raise AttributeError("'NoneType' object has no attribute '_invalidate_flags_cache'") from None
        pytest.fail("SIGINT did not interrupt the composition")

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", interrupted_while_composing)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (not this test's worker)
    try:
        code, stderr = run_main(
            "train.py", ["-m", "seed=0,1", *FAST, f"hydra.sweep.dir={tmp_path}"], monkeypatch, capsys
        )
    finally:
        signal.signal(signal.SIGINT, handler)
    assert "Traceback" not in stderr
    assert code.startswith("error: stopped by SIGINT outside the training steps") and "ckpt_path=last" in code


def test_ctrl_c_in_a_training_step_saves_and_says_where_to_resume(tmp_path, monkeypatch, capsys):
    """Ctrl-C (in this process, as a terminal sends it) during training steps stops after the step with a resumable
    checkpoint, even where the command holds Python's Ctrl-C handler to note it (training.stopping.ctrl_c_noted):
    forwarding the signal to that handler raised KeyboardInterrupt and ended on the outside-the-steps line instead."""
    from alternet.training.module import ClassificationModule

    step = ClassificationModule.training_step

    def interrupted_at_step_2(self, batch, batch_idx):
        if batch_idx == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return step(self, batch, batch_idx)

    monkeypatch.setattr(ClassificationModule, "training_step", interrupted_at_step_2)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (not this test's worker)
    try:
        arguments = [*FAST, "evaluate.after_training=false", f"hydra.run.dir={tmp_path}"]
        code, _ = run_main("train.py", arguments, monkeypatch, capsys)
    finally:
        signal.signal(signal.SIGINT, handler)
    stopped = r"error: stopped by SIGINT at global step 2 \(in epoch 1\); saved .+ Resume with: .+"
    assert re.fullmatch(stopped, code), code
    assert read_checkpoint(tmp_path / "checkpoints" / "last.ckpt")["global_step"] == 2


def _ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


# fit's set-up (slow: 2 s, the same path as testing's) and testing
@pytest.mark.parametrize("hook", [pytest.param("configure_optimizers", marks=pytest.mark.slow), "test_step"])
def test_ctrl_c_where_lightning_handles_it_ends_on_the_one_line_and_the_run_continues(
    hook, tmp_path, monkeypatch, capsys
):
    """Inside fit or test but outside the pre-emption callback's hold on SIGINT, Lightning prints its own line and
    calls sys.exit(1): the command ended without its stop message or the way to continue."""
    run_dir = tmp_path / "run"
    arguments = [*FAST, "evaluate.after_training=false", f"hydra.run.dir={run_dir}"]
    handler = signal.getsignal(signal.SIGINT)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(f"alternet.training.module.ClassificationModule.{hook}", _ctrl_c)
            code, _ = run_main("train.py", arguments, monkeypatch, capsys)
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores SIGINT from the interrupt on
    assert code.startswith("error: stopped by SIGINT outside the training steps") and "ckpt_path=last" in code
    assert not (run_dir / "metrics.json").exists()
    code, _ = run_main("train.py", [*arguments, "ckpt_path=last"], monkeypatch, capsys)
    assert code == "0" and (run_dir / "metrics.json").is_file()


def test_a_stop_signal_ignored_when_the_run_started_stays_ignored_during_training(tmp_path, capfd):
    """A shell starts a script's background jobs with SIGINT ignored; the run honoured it mid-step only (and lost
    it between a sweep's jobs). It now stays ignored throughout, and the run says which signals do stop it."""
    trainer = SimpleNamespace(default_root_dir=str(tmp_path), global_rank=0, world_size=1, is_global_zero=True)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    before_term = signal.getsignal(signal.SIGTERM)
    try:
        callback = PreemptionCheckpoint(RunDir(tmp_path), ["SIGINT", "SIGTERM"])
        callback.setup(trainer, None, "fit")
        callback.on_train_start(trainer, None)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == callback._handle
        callback.on_train_end(trainer, None)
        assert signal.getsignal(signal.SIGTERM) == before_term
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capfd.readouterr().err
    assert "SIGINT was ignored when this process started" in err and "stop this run with SIGTERM" in err


DEAD_WORKER = (
    r"error: a data loader worker \(pid \d+\) died while reading (.+) "
    r"\((is killed by signal: Killed|exited unexpectedly)\)"
)


def worker_death(module: str, fatal: str, when: str, script: str, arguments: list[str]) -> str:
    """The last line ``python SCRIPT ARGUMENTS`` printed, run in a process of its own whose ``module.decode_rgb``
    kills the loader worker decoding an image named with ``fatal`` (``tests/scripts/crashing_decoder.py``): the run
    must end on that line, exit status 1, no traceback."""
    result = run_warm("tests/scripts/crashing_decoder.py", module, fatal, when, script, *arguments)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def read_from(message: str) -> str:
    """The sample a dead-worker message names."""
    found = re.fullmatch(DEAD_WORKER + r": .*", message)
    assert found, message
    return found.group(1)


def folder_run(folder: Path, *extra: str) -> list[str]:
    arguments = ["data=imagefolder", f"data.root={folder}", "data.image_size=16", "data.num_workers=1"]
    arguments = [*FAST, *arguments, "recipe.batch_size=4", "recipe.epochs=1", "recipe.warmup_epochs=0"]
    return [*arguments, "evaluate.after_training=false", *extra]


@pytest.mark.slow  # 18 s; by default the image-folder worker's death mid-sample (above) and evaluate's (below)
def test_a_shard_reader_that_dies_mid_sample_is_reported_by_that_record(tmp_path, image_folder, image_shards):
    # the fixture's write_shards (litdata's optimize sets spawn for the whole process) left the start method as it was
    assert multiprocessing.get_start_method(allow_none=True) in (None, "fork")
    fatal = sorted((image_folder / "train" / "bee").iterdir())[2].name
    arguments = folder_run(image_folder, f"data.train_shards={image_shards}", f"hydra.run.dir={tmp_path / 'run'}")
    arguments += ["trainer.limit_train_batches=null"]
    sample = read_from(worker_death("alternet.data.files.shards", fatal, "always", "train.py", arguments))
    assert fatal in sample and str(image_shards.resolve()) in sample


@pytest.mark.slow  # 17 s; the test loop's loader is the training one's class, whose death mid-sample runs by default
def test_a_loader_worker_that_dies_while_testing_is_reported_by_its_sample(tmp_path):
    folder = small_folder(tmp_path)
    fatal = sorted((folder / "val" / "bee").iterdir())[0]  # read unharmed by training's validation, then tested
    arguments = folder_run(folder, f"hydra.run.dir={tmp_path / 'run'}")
    assert read_from(worker_death("alternet.data.files.images", str(fatal), "testing", "train.py", arguments)) == str(
        fatal
    )


def test_a_loader_worker_that_dies_while_evaluate_scores_is_reported_by_its_sample(tmp_path):
    folder = small_folder(tmp_path)
    run_dir = tmp_path / "run"
    train(compose_train(*folder_run(folder), output_dir=run_dir))
    fatal = sorted((folder / "val" / "bee").iterdir())[1]
    arguments = [f"ckpt={run_dir}", f"hydra.run.dir={tmp_path / 'eval'}", "robustness.enabled=false"]
    assert read_from(worker_death("alternet.data.files.images", str(fatal), "always", "evaluate.py", arguments)) == str(
        fatal
    )


def test_sigterm_where_lightning_answers_it_names_sigterm_on_the_stop_line(tmp_path, monkeypatch, capsys):
    """A SIGTERM during testing ended on the line for SIGINT (Lightning's loops raise SIGTERMException there)."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    def terminated(self, *args, **kwargs):
        self.trainer._signal_connector.received_sigterm = True  # what Lightning's SIGTERM handler sets
        raise SIGTERMException

    run_dir = tmp_path / "run"
    arguments = [*FAST, "evaluate.after_training=false", f"hydra.run.dir={run_dir}"]
    with monkeypatch.context() as patch:
        patch.setattr("alternet.training.module.ClassificationModule.test_step", terminated)
        code, _ = run_main("train.py", arguments, monkeypatch, capsys)
    assert code.startswith("error: stopped by SIGTERM outside the training steps") and "ckpt_path=last" in code
