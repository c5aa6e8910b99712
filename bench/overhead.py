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
    training run's callbacks, progress display and CSV logger, logging every 50 steps (``trainer=gpu``).
A step's time is the interval between consecutive batch starts, so an epoch's start and end (the checkpoint) are not
in it; the first ``--skip`` intervals of each round are left out (warm-up), the rest pooled over the rounds and the
median reported. The syncs are counted in one more, untimed alternet epoch that logs nothing
(``alternet.training.syncs.HostSyncs``, between batch starts). Ends on the line
``alternet over plain Lightning: X ms/step, Y syncs per non-logging step``.
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
from alternet.runs.layout import RunDir
from alternet.training.builders import build_module, build_trainer
from alternet.training.syncs import HostSyncs, per_step

from .harness import add_harness_arguments, begin, finish, row, summarise, timing_row

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


def alternet_config(args: argparse.Namespace, log_every: int) -> TrainConfig:
    config = compose(
        "train",
        [
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


def data_facts(args: argparse.Namespace) -> dict:
    return {"name": "synthetic", "num_classes": CLASSES, "image_size": args.size, "mean": [0.5] * 3, "std": [0.25] * 3}


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


def alternet_trainer(args: argparse.Namespace, root: Path, log_every: int, marks: list[float]):
    config = alternet_config(args, log_every)
    module = build_module(config.model, config.recipe, data_facts(args), config.performance, config.trainer)
    module.model = Linear(args.size)
    if module.ema is not None:
        module.ema = copy.deepcopy(module.model).eval().requires_grad_(False)
    loggers = [CSVLogger(str(root), name="logs", version="")]
    trainer = build_trainer(
        config.trainer, config.callbacks, config.performance, 0, RunDir(root), False, loggers=loggers
    )
    trainer.callbacks.insert(0, Clock(marks))
    return module, trainer


def alternet_round(args: argparse.Namespace, data: DataLoader, root: Path) -> list[float]:
    marks: list[float] = []
    module, trainer = alternet_trainer(args, root, 50, marks)
    trainer.fit(module, train_dataloaders=data)
    return intervals(marks, args.skip)


def alternet_syncs(args: argparse.Namespace, data: DataLoader, root: Path) -> tuple[float, list]:
    """Syncs between consecutive batch starts of an alternet epoch that logs nothing, the epoch's last window out."""
    module, trainer = alternet_trainer(args, root, 10**6, [])
    with HostSyncs() as syncs, per_step(syncs) as steps:
        trainer.fit(module, train_dataloaders=data)
    windows = steps[1:]  # the first holds one-time setup
    return sum(map(len, windows)) / max(len(windows), 1), [call for window in windows for call in window]


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
    seconds: dict[str, list[float]] = {"bare": [], "lightning": [], "alternet": []}
    with tempfile.TemporaryDirectory() as tmp:
        quiet = silenced
        for index in range(args.rounds + args.warmup):
            with quiet():
                measured = {
                    "bare": bare_round(args, data),
                    "lightning": lightning_round(args, data, Path(tmp) / f"lightning{index}"),
                    "alternet": alternet_round(args, data, Path(tmp) / f"alternet{index}"),
                }
            if index >= args.warmup:
                for name, values in measured.items():
                    seconds[name] += values
        with quiet():
            per_step, calls = alternet_syncs(args, data, Path(tmp) / "syncs")
    case = f"linear {args.size}px batch {args.batch} cpu fp32"
    median = {name: summarise(values).median * 1000 for name, values in seconds.items()}
    print(f"{case}, {args.rounds} rounds of {args.steps} steps (median ms per step):")
    for name, value in median.items():
        over = f"  +{value - median['bare']:.2f} ms over bare" if name != "bare" else ""
        print(f"  {name:10s} {value:7.2f} ms/step{over}")
    for what, where in calls[:10]:
        print(f"  sync: {what} at {where}")
    gap = median["alternet"] - median["lightning"]
    rows = [timing_row(f"{case} {name}", "step median", values) for name, values in seconds.items()]
    rows.append(row(f"{case} alternet - lightning", "ms per step", gap, "ms"))
    rows.append(row(f"{case} alternet", "syncs per non-logging step", per_step, "1"))
    finish(args, "overhead", rows, facts)
    print(f"alternet over plain Lightning: {gap:.2f} ms/step, {per_step:g} syncs per non-logging step")


if __name__ == "__main__":
    main()
