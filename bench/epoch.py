"""CPU time of one training epoch through the real Trainer, measured on a slice and extrapolated.

    python bench/epoch.py [--model alternet_r18] [--data cifar100] [--root ../shared/data] [--batches 20]

Runs `--batches` steps of the paper recipe (augmentation, mixup, AdamW) for each precision, times the steps after
the first few, and extrapolates to a full epoch of the training set.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import lightning as L
from omegaconf import OmegaConf

WARMUP = 3


class StepTimer(L.Callback):
    """Wall time of each training step (data loading included) after the first few."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._last = 0.0

    def on_train_batch_start(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step >= WARMUP and self._last:
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
    args = parser.parse_args()

    from hydra import compose, initialize_config_dir

    from alternet.data import build_datamodule
    from alternet.training import build_module

    conf = Path(__file__).resolve().parents[1] / "alternet" / "conf"
    overrides = [
        f"model={args.model}",
        f"data={args.data}",
        f"recipe={args.recipe}",
        f"data.root={args.root}",
        f"data.num_workers={args.workers}",
        "paths.output_dir=unused",
    ]
    with initialize_config_dir(str(conf), version_base="1.3"):
        config = OmegaConf.to_container(compose("train", overrides=overrides), resolve=True)
    datamodule = build_datamodule(config["data"], config["recipe"], seed=0)
    datamodule.setup()
    steps_per_epoch = len(datamodule.splits["train"]) // config["recipe"]["batch_size"]
    print(
        f"{args.model} on {args.data}, recipe {args.recipe}: batch {config['recipe']['batch_size']}, "
        f"{steps_per_epoch} steps per epoch, {args.workers} loader worker(s)"
    )
    for precision in args.precisions:
        timer = StepTimer()
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
            gradient_clip_val=config["recipe"]["grad_clip"],
        )
        trainer.fit(build_module(config, datamodule.facts()), datamodule=datamodule)
        step = sum(timer.times) / len(timer.times)
        print(
            f"  {precision:<11} {step * 1000:8.0f} ms/step  {config['recipe']['batch_size'] / step:6.1f} img/s  "
            f"epoch ~ {step * steps_per_epoch / 60:6.1f} min"
        )


if __name__ == "__main__":
    main()
