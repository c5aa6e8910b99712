"""Reproducibility and fault tolerance: determinism, SIGKILL-and-resume, atomic checkpoints, the NaN guard."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from alternet.apps.train import train
from alternet.training.callbacks import AtomicCheckpointIO
from alternet.training.module import NonFiniteLossError

from conftest import FAST, ROOT, compose_train, run_script

# Small batches make an epoch long enough (~80 steps) to be killed in its middle.
RESUMABLE = [
    "trainer.max_epochs=2",
    "recipe.batch_size=16",
    "trainer.enable_progress_bar=false",
    "data.val_size=180",
]


def test_identical_seeded_runs_give_identical_metrics(tmp_path):
    first = train(compose_train(*FAST, "seed=7", output_dir=tmp_path / "a"))
    second = train(compose_train(*FAST, "seed=7", output_dir=tmp_path / "b"))
    other = train(compose_train(*FAST, "seed=8", output_dir=tmp_path / "c"))
    assert first["test"] == second["test"]
    assert first["test"] != other["test"]


def _checkpoint_epoch(path: Path) -> int:
    return torch.load(path)["epoch"]


@pytest.mark.slow  # the default suite has the stricter mid-epoch version (tests/test_resume_mid_epoch.py)
def test_sigkill_mid_epoch_then_resume_matches_an_uninterrupted_run(tmp_path):
    reference = run_script("train.py", *RESUMABLE, f"hydra.run.dir={tmp_path / 'reference'}")
    assert reference.returncode == 0, reference.stderr[-2000:]

    killed_dir = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *RESUMABLE, f"hydra.run.dir={killed_dir}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    last = killed_dir / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 120
    while not last.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # well into the second epoch
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (killed_dir / "metrics.json").exists(), "the run finished before it could be killed"
    assert _checkpoint_epoch(last) == 0  # only the first epoch was completed
    assert not list(last.parent.glob(".*.tmp")), "a temporary checkpoint file was left behind"

    resumed = run_script("train.py", *RESUMABLE, f"ckpt_path={last}", f"hydra.run.dir={tmp_path / 'resumed'}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = json.loads((tmp_path / "reference" / "metrics.json").read_text())
    actual = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert actual["global_step"] == expected["global_step"]
    assert actual["test"] == expected["test"]


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    target.write_bytes(b"previous good checkpoint")

    def interrupted_save(self, checkpoint, path, storage_options=None):
        Path(path).write_bytes(b"half a checkp")
        raise KeyboardInterrupt

    monkeypatch.setattr("lightning.pytorch.plugins.io.TorchCheckpointIO.save_checkpoint", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        AtomicCheckpointIO().save_checkpoint({"state_dict": {}}, target)
    assert target.read_bytes() == b"previous good checkpoint"
    assert list(tmp_path.iterdir()) == [target]


def test_non_finite_loss_stops_with_step_and_batch_and_saves_a_checkpoint(tmp_path, monkeypatch):
    from alternet.training.module import ClassificationModule

    forward = ClassificationModule.forward

    def poisoned(self, x):
        logits = forward(self, x)
        return logits * float("nan") if self.training and self.global_step == 2 else logits

    monkeypatch.setattr(ClassificationModule, "forward", poisoned)
    message = r"non-finite training loss \(nan\) at global step 2, epoch 0, batch 2"
    with pytest.raises(NonFiniteLossError, match=message):
        train(compose_train(*FAST, output_dir=tmp_path))
    saved = tmp_path / "checkpoints" / "nonfinite-step2.ckpt"
    assert saved.is_file()
    assert torch.load(saved)["global_step"] == 2
