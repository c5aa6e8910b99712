"""The framework's host time per training step, on any machine (issue 49 item 7): what a step costs around its
compute, and how many host syncs a step that logs nothing makes.

    python -m bench.overhead [--size 16] [--batch 2] [--steps 100] [--rounds 5]

One model whose compute is negligible (a linear classifier on the flattened pixels: ~0.1 ms a step, where the
smallest convolutional models take 15-25 ms on 2 CPU cores, mostly oneDNN's per-call cost), trained three ways,
alternated round by round in one process (A, B, C, A, B, C, ...: the machine's drift hits all three alike), each
round one epoch of ``--steps`` steps over the same in-memory batches:
  * ``bare``: a PyTorch loop (forward, cross-entropy, backward, AdamW step);
  * ``lightning``: a plain LightningModule doing the same under ``lightning.Trainer``'s defaults (its progress bar,
    model summary, checkpoint at the epoch's end, no logger), logging its loss per step;
  * ``alternet``: alternet's ``ClassificationModule`` (its backbone and EMA swapped for the linear model) with the
    paper recipe (mixup/cutmix, label smoothing, clipping, fused AdamW with the non-finite guard, EMA) and a
    training run's callbacks, progress display and CSV logger, logging every 50 steps (``trainer=gpu``), eagerly;
  * ``backbone``: the same with the backbone alone compiled (``torch.compile``, inductor's default mode): what a run
    that cannot compile the whole step gets (alternet/training/step.py, ``whole_step_refusal``);
  * ``whole``: the same with the whole step compiled (``performance.compile=true``: forward with the mixing,
    compiled autograd, the update with the guard's flag, clipping, AdamW and the EMA).
A step's time is the interval between consecutive batch starts, so an epoch's start and end (the checkpoint) are not
in it; the first ``--skip`` intervals of each round are left out (warm-up; the first, untimed round compiles), the
rest pooled over the rounds and the median reported. Per alternet arm, one more untimed epoch that logs nothing counts
per step (between batch starts) the host syncs (``bench.syncs.HostSyncs``) and the operators dispatched
outside compiled code (``bench.syncs.EagerOperators``: on a GPU, a launch each). Ends on the line
``whole step over plain Lightning: X ms/step, Y operators and Z syncs per non-logging step``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

from alternet.apps.config import TrainConfig, compose, train_config
from alternet.dataset_facts import DataFacts
from alternet.runs.directories import RunDir
from alternet.training.builders import build_module, build_trainer

from .harness import add_harness_arguments, begin, finish, row, summarise, timing_row
from .syncs import EagerOperators, HostSyncs, per_step

CLASSES = 10


class Clock(L.Callback):
    """The time at each training batch's start."""

    def __init__(self, marks: list[float]):
        self.marks = marks

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.marks.append(time.perf_counter())


class Linear(torch.nn.Module):
    """The classifier every arm trains, with the one method alternet's module asks of a backbone."""

    def __init__(self, size: int):
        super().__init__()
        self.head = torch.nn.Linear(3 * size * size, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(images.flatten(1))

    def get_classifier(self) -> torch.nn.Module:
        return self.head


class Plain(L.LightningModule):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self.model(images), labels)
        self.log("train/loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def batches(args: argparse.Namespace) -> DataLoader:
    """Prebuilt batches in the main process (``batch_size=None``: each item is a batch), so no arm pays for loading."""
    generator = torch.Generator().manual_seed(0)
    return DataLoader(
        [
            (
                torch.randn(args.batch, 3, args.size, args.size, generator=generator),
                torch.randint(0, CLASSES, (args.batch,), generator=generator),
            )
            for _ in range(args.steps)
        ],
        batch_size=None,
    )


ARMS = ("alternet", "backbone", "whole")  # ClassificationModule eager, its backbone compiled, its whole step compiled


def alternet_config(args: argparse.Namespace, log_every: int, arm: str) -> TrainConfig:
    config = compose(
        "train",
        [
            f"performance.compile={arm == 'whole'}",
            "model=alternet_tiny",  # built, then replaced by the linear model
            "recipe=paper",
            "recipe.ema={decay: 0.9999}",
            f"recipe.batch_size={args.batch}",
            "recipe.warmup_epochs=0",
            "trainer.accelerator=cpu",
            "trainer.precision=32-true",
            "trainer.max_epochs=1",
            f"trainer.log_every_n_steps={log_every}",
            "callbacks.checkpoint.save_top_k=0",
            "callbacks.checkpoint.monitor=null",
            "paths.output_dir=unused",
        ],
    )
    return train_config(OmegaConf.to_container(config, resolve=True))


def data_facts(args: argparse.Namespace) -> DataFacts:
    return DataFacts("synthetic", CLASSES, args.size, (0.5,) * 3, (0.25,) * 3)


def intervals(marks: list[float], skip: int) -> list[float]:
    return [b - a for a, b in itertools.pairwise(marks)][skip:]


def bare_round(args: argparse.Namespace, data: DataLoader) -> list[float]:
    model = Linear(args.size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    marks = []
    for images, labels in data:
        marks.append(time.perf_counter())
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    marks.append(time.perf_counter())
    return intervals(marks, args.skip)


def lightning_round(args: argparse.Namespace, data: DataLoader, root: Path) -> list[float]:
    model = Linear(args.size)
    marks: list[float] = []
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, logger=False, default_root_dir=str(root), callbacks=[Clock(marks)]
    )
    trainer.fit(Plain(model), train_dataloaders=data)
    return intervals(marks, args.skip)


def alternet_trainer(args: argparse.Namespace, root: Path, log_every: int, marks: list[float], arm: str):
    config = alternet_config(args, log_every, arm)
    module = build_module(config.model, config.recipe, data_facts(args), config.performance, config.trainer)
    module.model = Linear(args.size)
    if module.ema is not None:
        module.ema = copy.deepcopy(module.model).eval().requires_grad_(False)
    if arm == "backbone":
        module.compile_model(mode="default")
    loggers = [CSVLogger(str(root), name="logs", version="")]
    trainer = build_trainer(
        config.trainer, config.callbacks, config.performance, 0, RunDir(root), False, loggers=loggers
    )
    trainer.callbacks.insert(0, Clock(marks))
    return module, trainer


def alternet_round(args: argparse.Namespace, data: DataLoader, root: Path, arm: str) -> list[float]:
    marks: list[float] = []
    module, trainer = alternet_trainer(args, root, 50, marks, arm)
    trainer.fit(module, train_dataloaders=data)
    return intervals(marks, args.skip)


def alternet_counts(args: argparse.Namespace, data: DataLoader, root: Path, arm: str) -> tuple[float, float, list]:
    """Syncs and eager operators between consecutive batch starts of an epoch that logs nothing (the first window,
    one-time setup, left out): their means per step, and the syncs' calls."""
    module, trainer = alternet_trainer(args, root, 10**6, [], arm)
    with HostSyncs() as syncs, per_step(syncs) as sync_steps, EagerOperators() as ops, per_step(ops) as op_steps:
        trainer.fit(module, train_dataloaders=data)
    syncs_, operators = sync_steps[1:], op_steps[1:]
    per_step_syncs = sum(map(len, syncs_)) / max(len(syncs_), 1)
    return per_step_syncs, sum(map(len, operators)) / max(len(operators), 1), [c for w in syncs_ for c in w]


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """Lightning's, tqdm's and the progress display's output during the rounds goes nowhere (file descriptors 1 and
    2, whoever holds them: Lightning's bar writes to stdout)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy_ in zip((1, 2), saved, strict=True):
            os.dup2(copy_, fd)
            os.close(copy_)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100, help="steps per round (one epoch)")
    parser.add_argument("--skip", type=int, default=5, help="warm-up intervals left out of each round")
    add_harness_arguments(parser, rounds=5)
    args = parser.parse_args()
    facts = begin(args, "overhead")
    torch.manual_seed(0)
    data = batches(args)
    seconds: dict[str, list[float]] = {name: [] for name in ("bare", "lightning", *ARMS)}
    counts: dict[str, tuple[float, float, list]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        quiet = silenced
        for index in range(args.rounds + args.warmup):
            with quiet():
                measured = {
                    "bare": bare_round(args, data),
                    "lightning": lightning_round(args, data, Path(tmp) / f"lightning{index}"),
                    **{arm: alternet_round(args, data, Path(tmp) / f"{arm}{index}", arm) for arm in ARMS},
                }
            if index >= args.warmup:
                for name, values in measured.items():
                    seconds[name] += values
        with quiet():
            for arm in ARMS:
                counts[arm] = alternet_counts(args, data, Path(tmp) / f"counts-{arm}", arm)
    case = f"linear {args.size}px batch {args.batch} cpu fp32"
    median = {name: summarise(values).median * 1000 for name, values in seconds.items()}
    print(f"{case}, {args.rounds} rounds of {args.steps} steps (median ms per step):")
    for name, value in median.items():
        over = f"  +{value - median['bare']:.2f} ms over bare" if name != "bare" else ""
        counted = ""
        if name in counts:
            counted = f"; {counts[name][1]:.1f} eager operators, {counts[name][0]:g} syncs per step"
        print(f"  {name:10s} {value:7.2f} ms/step{over}{counted}")
    for what, where in counts["whole"][2][:10]:
        print(f"  sync (whole step): {what} at {where}")
    gap = median["whole"] - median["lightning"]
    rows = [timing_row(f"{case} {name}", "step median", values) for name, values in seconds.items()]
    for arm in ARMS:
        rows.append(row(f"{case} {arm} - lightning", "ms per step", median[arm] - median["lightning"], "ms"))
        rows.append(row(f"{case} {arm}", "syncs per non-logging step", counts[arm][0], "1"))
        rows.append(row(f"{case} {arm}", "eager operators per non-logging step", counts[arm][1], "1"))
    finish(args, "overhead", rows, facts)
    print(
        f"whole step over plain Lightning: {gap:.2f} ms/step, {counts['whole'][1]:.1f} operators and "
        f"{counts['whole'][0]:g} syncs per non-logging step"
    )


if __name__ == "__main__":
    main()
