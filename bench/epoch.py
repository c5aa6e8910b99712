"""CPU time of one training epoch through the real Trainer, measured on a slice and extrapolated.

    python -m bench.epoch [--model alternet_r18] [--data cifar100] [--root ../shared/data] [--batches 20] [--no-record]

Runs `--batches` steps of the paper recipe (augmentation, mixup, AdamW) for each precision, times the steps after
the first ``--warmup`` (3), and extrapolates the mean step to a full epoch of the training set. The clock is a
Lightning callback, not ``bench/harness.py``'s ``interleave``: a step here is the Trainer's (data loading
included), not a callable the harness could call; ``--rounds`` repeats the list of precisions in turn (P1, P2, P1,
P2, ...), pooling each precision's steps. Header, summary and recorded rows are the harness's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

import lightning as L
from omegaconf import OmegaConf

from .harness import add_harness_arguments, begin, finish, row, summarise, timing_row


class StepTimer(L.Callback):
    """Wall time of each training step (data loading included) after the first ``warmup``."""

    def __init__(self, warmup: int) -> None:
        self.times: list[float] = []
        self.warmup = warmup
        self._last = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step >= self.warmup and self._last:
            self.times.append(time.perf_counter() - self._last)
        self._last = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="alternet_r18")
    parser.add_argument("--data", default="cifar100")
    parser.add_argument("--recipe", default="paper")
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--precisions", nargs="+", default=["32-true", "bf16-mixed"])
    add_harness_arguments(parser, rounds=1, warmup=3, round_help="passes over --precisions, in turn")
    args = parser.parse_args()
    facts = begin(args, "epoch", data_root=args.root)

    from alternet.apps.config import compose, train_config
    from alternet.apps.train import build_data
    from alternet.training import build_module

    overrides = [
        f"model={args.model}",
        f"data={args.data}",
        f"recipe={args.recipe}",
        f"data.root={args.root}",
        f"data.num_workers={args.workers}",
        "paths.output_dir=unused",
    ]
    config = train_config(OmegaConf.to_container(compose("train", overrides), resolve=True))
    recipe = config.recipe
    datamodule = build_data(replace(config, seed=0))
    datamodule.setup()
    steps_per_epoch = len(datamodule.splits["train"]) // recipe.batch_size
    print(
        f"{args.model} on {args.data}, recipe {args.recipe}: batch {recipe.batch_size}, "
        f"{steps_per_epoch} steps per epoch, {args.workers} loader worker(s)"
    )
    times: dict[str, list[float]] = {precision: [] for precision in args.precisions}
    for _ in range(args.rounds):
        for precision in args.precisions:
            timer = StepTimer(args.warmup)
            trainer = L.Trainer(
                accelerator="cpu",
                precision=precision,
                max_epochs=1,
                limit_train_batches=args.batches,
                limit_val_batches=0,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                callbacks=[timer],
                use_distributed_sampler=False,
                gradient_clip_val=recipe.grad_clip,
            )
            module = build_module(config.model, recipe, datamodule.facts(), config.performance, config.trainer)
            trainer.fit(module, datamodule=datamodule)
            times[precision] += timer.times
    batch = recipe.batch_size
    rows = []
    for precision, seconds in times.items():
        step = statistics.fmean(seconds)  # the epoch is a sum of steps: the mean extrapolates it
        print(
            f"  {precision:<11} {step * 1000:8.0f} ms/step  {batch / step:6.1f} img/s  "
            f"epoch ~ {step * steps_per_epoch / 60:6.1f} min"
        )
        case = f"{args.model} {args.data} recipe {args.recipe} batch {batch} {precision}"
        notes = f"{args.workers} loader worker(s), data loading included"
        rows += [
            row(
                case, "step mean", step * 1000, "ms", spread=summarise(seconds).spread, rounds=len(seconds), notes=notes
            ),
            timing_row(case, "step median", seconds, notes=notes),
            row(case, "epoch estimate", step * steps_per_epoch / 60, "min", notes=f"{steps_per_epoch} steps"),
        ]
    finish(args, "epoch", rows, facts)


if __name__ == "__main__":
    main()
