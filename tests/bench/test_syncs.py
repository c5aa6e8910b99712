"""No host sync on a training step that logs nothing (issue 49 item 1), counted on a CPU with
``bench.syncs.HostSyncs``: reads of tensor values, copies to the host, tensors from Python numbers."""

import csv
from types import SimpleNamespace

import pytest
import torch

from alternet.apps.config import train_config
from alternet.apps.train import train
from alternet.training.display import ProgressLines, RunningLoss, TerminalBar
from alternet.training.module import ClassificationModule
from bench.syncs import HostSyncs, per_step

from helpers import FAST, compose_train, datamodule_of, resolved

BATCHES = 7


def syncs_per_step(tmp_path, *overrides: str) -> list[list[tuple[str, str]]]:
    """The counted calls between the starts of consecutive training batches (a step, its callbacks and logging,
    and the next batch's fetch), for the batches of one epoch but the last (its end reads the guard and logs)."""
    config = compose_train(
        *FAST,
        "data.val_size=0",
        f"trainer.limit_train_batches={BATCHES}",
        "trainer.max_epochs=1",
        "callbacks.progress.interval=3600",
        *overrides,
        output_dir=tmp_path,
    )
    with HostSyncs() as syncs, per_step(syncs) as steps:
        train(config)
    assert len(steps) == BATCHES - 1
    return steps


NO_MIXUP = ["recipe.mixup.mixup_alpha=0", "recipe.mixup.cutmix_alpha=0"]


@pytest.mark.parametrize("recipe", ["paper", "paper_without_mixup"])
def test_a_step_that_logs_nothing_does_not_sync(recipe, tmp_path):
    mixup = ["recipe=paper", "model=alternet_tiny"] + (NO_MIXUP if recipe.endswith("mixup") else [])
    steps = syncs_per_step(tmp_path, *mixup, "trainer.log_every_n_steps=1000")
    assert steps == [[]] * (BATCHES - 1), steps


def test_the_counter_sees_the_syncs_of_logging_steps(tmp_path):
    steps = syncs_per_step(tmp_path, "trainer.log_every_n_steps=3")
    logged = [i for i, calls in enumerate(steps) if calls]
    # A logging step's reads straddle two of these windows (the learning-rate monitor reads at the batch's start,
    # before this window's mark; the loggers after the step): two windows of every three, never all.
    assert logged and len(logged) < len(steps), steps


def test_the_counter_counts_each_kind_of_call():
    value = torch.ones(2)
    with HostSyncs() as syncs:
        value.sum().item()
        bool(value.all())
        value.cpu()
        value.to("cpu")
        value.to(torch.float64)  # not a copy to the host
        torch.tensor(0.5, device="cpu")
        torch.tensor([1, 2])  # built on the host, where it stays
        torch.ones(())  # built on the device itself
    assert list(syncs.by_kind().elements()) == [
        "Tensor.item",
        "Tensor.__bool__",
        "Tensor.cpu",
        "Tensor.to(cpu)",
        "torch.tensor",
    ]
    assert torch.Tensor.item is not None and syncs.count == 5
    with HostSyncs() as again:
        pass
    assert again.count == 0 and value.sum().item() == 2.0  # the patches are gone


def test_the_progress_loss_is_read_from_the_device_at_most_once_per_interval():
    running = RunningLoss(max_age=3600)
    assert running.read() is None
    for loss in (1.0, 3.0):
        running.add(torch.tensor(loss))
    with HostSyncs() as syncs:
        assert running.read() == 2.0
        running.add(torch.ones(()) * 5)
        assert running.read() == 2.0  # within max_age: the value read before, no second read
    assert syncs.count == 1


@pytest.mark.parametrize("bar", [TerminalBar, ProgressLines])
def test_both_bars_show_the_loss_read_from_the_device(bar):
    """The terminal's tqdm bar and a log file's lines alike (the loss is not a ``prog_bar`` value: that syncs)."""
    module = SimpleNamespace(running_loss=RunningLoss(max_age=0))
    module.running_loss.add(torch.tensor(0.25))
    logger = SimpleNamespace(version=3)  # Lightning's bar shows it as v_num
    trainer = SimpleNamespace(loggers=[logger], progress_bar_metrics={"val/acc": 0.5})
    shown = bar().get_metrics(trainer, module)
    assert shown == {"train/loss": 0.25, "val/acc": 0.5}


def test_training_accuracy_is_a_device_sum_read_once():
    """The training accuracy is the batches' correct predictions summed on the device (torchmetrics' argument checks
    call torch.unique on the labels: a sync inside torch the counter above cannot see), read once, then restarted;
    evaluation keeps torchmetrics' checks."""
    from alternet.training.display import Hits

    hits = Hits()
    assert hits.read() is None
    hits.add(torch.tensor(3), 4)
    hits.add(torch.tensor(1), 4)
    assert hits.read() == 0.5 and hits.read() is None
    config = resolved("model=alternet_tiny")
    sections = train_config(config)
    module = ClassificationModule(model=sections.model, recipe=sections.recipe, data=datamodule_of(config).facts())
    assert module.val_metrics["val/acc"].validate_args is True


def test_training_accuracy_is_logged_once_per_epoch(tmp_path):
    """Accumulated over the epoch's steps (no per-step logging), logged at its end: one value per epoch."""
    train(compose_train(*FAST, *NO_MIXUP, "trainer.max_epochs=2", output_dir=tmp_path))
    with open(tmp_path / "logs" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/acc")]
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    assert all(0.0 <= float(r["train/acc"]) <= 1.0 for r in rows)
