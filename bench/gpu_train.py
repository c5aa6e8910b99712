"""A real short training run of the paper's headline experiment on a GPU: ``train.py experiment=alternet_r50_cifar100
trainer.max_steps=N``, eager and with ``performance.compile=true``, through the package's own ``train`` (the real
Trainer, data module, augmentation, guard and checkpoints). Reports training images/s, the data loader's share of
the training loop's wall time (is the loader the bottleneck?) and peak GPU memory.

    python bench/gpu_train.py --data-root DIR [--steps 300] [--workers auto 16] [--synthesize] [--no-record]

``--synthesize`` writes CIFAR-100-format files (the original pickles' layout: 50,000 + 10,000 uint8 images, fine and
coarse labels, the meta file) of random images into DATA_ROOT/cifar-100-python and accepts their md5 digests in
place of the real files' (the one difference from a run on CIFAR-100: the images are noise, which costs the
augmentation and the model the same). For machines the real files cannot reach (a lent GPU machine has no network).

The loader's share: the time between one training batch's end and the next one's start (Lightning fetches the next
batch there: ``next(dataloader)`` waiting on the workers, plus the hooks around it) over the training loop's wall
time from the first batch's start to the last one's end. Kernels run asynchronously; the host waits for them at the
loss's logging sync, so a loader that keeps up shows a small share and one that does not shows its wait there.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path

import lightning as L
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import add_harness_arguments, begin, finish, row

from alternet.files import file_digest

ROOT = Path(__file__).resolve().parents[1]


def synthesize_cifar100(root: Path, train: int = 50_000, test: int = 10_000, seed: int = 0) -> dict[str, str]:
    """CIFAR-100-format pickles of random images under ``root/cifar-100-python``; their md5 digests by file."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, count in (("train", train), ("test", test)):
        fine = rng.integers(0, 100, count)
        batch = {
            "filenames": [f"synthetic_{i}.png" for i in range(count)],
            "batch_label": f"synthetic {name}",
            "fine_labels": fine.tolist(),
            "coarse_labels": (fine // 5).tolist(),
            "data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    meta = {
        "fine_label_names": [f"class_{i}" for i in range(100)],
        "coarse_label_names": [f"super_{i}" for i in range(20)],
    }
    (folder / "meta").write_bytes(pickle.dumps(meta, protocol=2))
    return {name: file_digest(folder / name, "md5") for name in ("train", "test", "meta")}


def accept_digests(digests: dict[str, str]) -> None:
    from alternet.data.arrays.cifar import CIFAR100DataModule as arrays

    arrays.train_files = {name: digests[name] for name in arrays.train_files}
    arrays.test_files = {name: digests[name] for name in arrays.test_files}
    arrays.meta_file = (arrays.meta_file[0], digests[arrays.meta_file[0]])


class LoaderWait(L.Callback):
    """Host seconds between a training batch's end and the next one's start, and the loop's wall time."""

    def __init__(self) -> None:
        self.first = self.last_end = None
        self.waited = 0.0
        self.batches = 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        elif self.last_end is not None:
            self.waited += now - self.last_end

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.last_end = time.perf_counter()
        self.batches += 1

    @property
    def share(self) -> float:
        return self.waited / (self.last_end - self.first)


def train_once(overrides: list[str], timer: LoaderWait) -> tuple[dict, float]:
    import torch
    from hydra import compose, initialize_config_dir

    from alternet.apps.train import train
    from alternet.training import builders

    build = builders.build_callbacks

    def with_timer(*args, **kwargs):
        return [*build(*args, **kwargs), timer]

    builders.build_callbacks = with_timer
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    try:
        with initialize_config_dir(str(ROOT / "alternet" / "conf"), version_base="1.3"):
            cfg = compose("train", overrides=overrides)
        summary = train(cfg)
    finally:
        builders.build_callbacks = build
    return summary, torch.cuda.max_memory_allocated() / 2**30 if on_gpu else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", nargs="+", default=["auto"], help="data.num_workers values to run")
    parser.add_argument("--synthesize", action="store_true", help="write random CIFAR-100-format files first")
    parser.add_argument("--images", type=int, default=50_000, help="--synthesize: training images (test: a fifth)")
    parser.add_argument(
        "overrides", nargs="*", help="more train.py overrides (a CPU smoke test: model=alternet_tiny ...)"
    )
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/gpu_train"))
    add_harness_arguments(parser, rounds=1, round_help="unused: each configuration trains once")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    import torch

    facts = begin(args, "gpu_train", device="cuda" if torch.cuda.is_available() else "cpu")
    if args.synthesize:
        accept_digests(synthesize_cifar100(args.data_root, args.images, args.images // 5))
    rows = []
    print(f"{'compile':<8} {'workers':>7} {'steps':>5} {'img/s':>8} {'loader share':>12} {'peak GiB':>8} {'wall s':>7}")
    for workers in args.workers:
        for compiled in (False,) if args.no_compile else (False, True):
            timer = LoaderWait()
            name = f"{'compile' if compiled else 'eager'}-w{workers}"
            overrides = [
                "experiment=alternet_r50_cifar100",
                f"data.root={args.data_root}",
                f"data.num_workers={workers}",
                f"trainer.max_steps={args.steps}",
                "trainer.enable_progress_bar=false",
                f"performance.compile={str(compiled).lower()}",
                f"paths.output_dir={args.out / name}",
                *args.overrides,
            ]
            start = time.perf_counter()
            summary, peak = train_once(overrides, timer)
            wall = time.perf_counter() - start
            rate = summary.train_images_per_sec or float("nan")
            print(
                f"{'on' if compiled else 'off':<8} {workers:>7} {timer.batches:>5} {rate:>8.0f} {timer.share:>12.1%} "
                f"{peak:>8.2f} {wall:>7.0f}",
                flush=True,
            )
            case = f"alternet_r50 cifar100 32px paper recipe bf16 {name} {args.steps} steps"
            rows += [
                row(case, "training throughput", rate, "img/s", notes="the run's own (first batch left out)"),
                row(case, "loader share", 100 * timer.share, "%", notes="host wait between batches / loop wall"),
                row(case, "peak GPU memory", peak, "GiB"),
                row(case, "whole run", wall, "s", notes="build, compile, train, test"),
            ]
    finish(args, "gpu_train", rows, facts)


if __name__ == "__main__":
    main()
