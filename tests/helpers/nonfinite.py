"""Non-finite steps made on purpose, and the state a guard's checkpoint must hold: shared by the CPU guard tests
(tests/training/test_resume.py) and their CUDA versions (tests/gpu/)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from alternet.apps.train import train
from alternet.training import NonFiniteLossError

from helpers.configs import compose_train


def poison_inputs_at(monkeypatch, step: int) -> None:
    """The forward pass of optimizer step ``step`` sees inf inputs: its loss is NaN *and* BatchNorm's running
    statistics are already NaN when the loss is computed (as with a real overflow). The batch is poisoned as the
    step begins, after the guard's own start of step and outside any compiled code (so a compiled step is traced
    once, not again for each step number)."""
    from alternet.training.module import ClassificationModule

    start = ClassificationModule.on_train_batch_start

    def poisoned(self, batch, batch_idx):
        start(self, batch, batch_idx)
        if self.global_step == step:
            batch[0].mul_(float("inf"))

    monkeypatch.setattr(ClassificationModule, "on_train_batch_start", poisoned)


def record_batches(monkeypatch) -> dict[tuple[int, int], list[int]]:
    """The labels of each training batch as its step begins, by (epoch, batch index), filled as runs train."""
    from alternet.training.module import ClassificationModule

    seen: dict[tuple[int, int], list[int]] = {}
    start = ClassificationModule.on_train_batch_start

    def recorded(self, batch, batch_idx):
        seen[self.current_epoch, batch_idx] = batch[1].tolist()
        start(self, batch, batch_idx)

    monkeypatch.setattr(ClassificationModule, "on_train_batch_start", recorded)
    return seen


def state_before_step(monkeypatch, step: int, overrides: list[str], output_dir: Path) -> dict:
    """A clean run's weights, BatchNorm statistics and optimizer state as optimizer step ``step`` found them."""
    from alternet.training.guard import NonFiniteGuard

    found: dict = {}
    take = NonFiniteGuard.on_train_batch_start

    def capture(self):
        if self.module.global_step == step and not found:
            found["state_dict"] = {k: v.clone() for k, v in self.module.state_dict().items()}
            optimizer = self.module.trainer.optimizers[0]
            found["optimizer"] = copy.deepcopy(optimizer.state_dict()["state"])
        take(self)

    with monkeypatch.context() as patch:
        patch.setattr(NonFiniteGuard, "on_train_batch_start", capture)
        train(compose_train(*overrides, output_dir=output_dir))
    return found


def assert_same_state(saved: dict, before: dict) -> None:
    assert saved["state_dict"].keys() == before["state_dict"].keys()
    for key, value in before["state_dict"].items():  # weights and BatchNorm statistics exactly as found
        assert torch.equal(saved["state_dict"][key], value.to(saved["state_dict"][key].device)), key
    state = saved["optimizer_states"][0]["state"]
    assert state.keys() == before["optimizer"].keys()
    for index, entries in before["optimizer"].items():  # moments and step counts untouched
        for name, value in entries.items():
            assert torch.equal(state[index][name], value.to(state[index][name].device)), (index, name)


def fail_at(monkeypatch, step: int, overrides: list[str], run_dir: Path, message: str) -> tuple[dict, Path, str]:
    """Train with inf inputs at ``step``; the guard's error must match ``message``. Returns the checkpoint it saved
    (``nonfinite-step<step>.ckpt``, loaded), its path and the error's text."""
    with monkeypatch.context() as patch:
        poison_inputs_at(patch, step)
        with pytest.raises(NonFiniteLossError, match=message) as raised:
            train(compose_train(*overrides, output_dir=run_dir))
    path = run_dir / "checkpoints" / f"nonfinite-step{step}.ckpt"
    return torch.load(path), path, str(raised.value)
