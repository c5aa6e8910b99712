"""A real training run of the paper's headline experiment on a GPU: ``train.py experiment=alternet_r50_cifar100``
for a few whole epochs, eager and compiled (``performance.compile_mode``; the whole step, or ``backbone-MODE`` the
backbone alone), through the package's own ``train`` (the real Trainer, data module, augmentation, guard,
checkpoints, validation). Reports, per configuration:

  * steady img/s: the training loop's own images/s over the epochs after the first (from each batch's start to the
    next one's: validation, checkpoints and the first epoch's warm-up, compilation and autotuning left out);
  * epoch img/s: the same epochs' training images per second of wall time (each epoch from its start to the next
    one's: its checkpoint, validation and clean-training pass included), and its ratio to the steady rate;
  * loader share: the time the loop waited for the next batch (Lightning's ``train_dataloader_next``, the fetch
    alone) over the loop's wall time;
  * syncs per step that logs nothing: on a GPU the syncs ``torch.cuda.set_sync_debug_mode("warn")`` reports, on a
    CPU the calls ``bench.syncs.HostSyncs`` counts, between consecutive batch starts;
  * peak GPU memory and the whole run's wall time.

    python -m bench.gpu_train --data-root DIR [--epochs 3] [--workers 4 8]
                              [--modes eager reduce-overhead backbone-reduce-overhead]
                              [--synthesize] [--no-record] [-- more overrides]

``--imagenet N`` runs the ImageNet feed instead (issue 75): ``N`` synthesized ImageNet-like JPEGs (500x375, a
quarter at 1200x900: ``bench.imagenet_data.synthesize``) in 100 class folders, trained by AlterNet-50 at 224 px with
the paper's ImageNet recipe (``model=alternet_r50 recipe=imagenet data=imagefolder``) for ``--epochs`` epochs, once
per ``--feeds`` value (``exact``, today's pipeline; ``fast``, ``data.decode=fast``, the reduced-size JPEG decode;
``dali``, ``data.loader=dali``, decoding and augmenting on the GPU): the same img/s and loader share, so the loader's
part of a 224 px step shows per feed.

``--synthesize`` writes CIFAR-100-format files (the original pickles' layout: 50,000 + 10,000 uint8 images, fine and
coarse labels, the meta file) of random images into DATA_ROOT/cifar-100-python and accepts their md5 digests in
place of the real files' (the one difference from a run on CIFAR-100: the images are noise, which costs the
augmentation and the model the same). For machines the real files cannot reach (a lent GPU machine has no network).
A CPU smoke test: ``--synthesize --images 512 --epochs 2 --modes eager -- model=alternet_tiny trainer=cpu ...``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import pickle
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
import numpy as np
from lightning.pytorch.profilers import Profiler

from alternet.files import file_digest

from .harness import add_harness_arguments, begin, finish, row

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class Experiment(NamedTuple):
    case: str
    overrides: tuple[str, ...]


CIFAR = Experiment("alternet_r50 cifar100 32px paper recipe", ("experiment=alternet_r50_cifar100",))
FEEDS = {"exact": "data.decode=exact", "fast": "data.decode=fast", "dali": "data.loader=dali"}  # --imagenet's feeds
IMAGENET = Experiment(  # the paper's ImageNet recipe on one device, from an image folder at 224 px
    "alternet_r50 imagenet-like jpegs 224px paper recipe",
    (
        "model=alternet_r50",
        "recipe=imagenet",
        "data=imagefolder",
        "data.image_size=224",
        "data.val_size=0",
        "trainer.precision=auto",
        "performance.channels_last=true",
    ),
)


def synthesize_cifar100(root: Path, train: int = 50_000, test: int = 10_000, seed: int = 0) -> dict[str, str]:
    """CIFAR-100-format pickles of random images under ``root/cifar-100-python``; their md5 digests by file."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, count in (("train", train), ("test", test)):
        fine = rng.permutation(np.arange(count) % 100)  # every class alike, as CIFAR-100 (small smoke sets too)
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


def synthesized_cifar100(root: Path, train: int, test: int) -> dict[str, str]:
    """The digests of the synthesized files under ``root``, written first unless a run before wrote them (the phases
    of bench/gpu_perf.sh share one data root; a CIFAR-100 download's real files are never overwritten)."""
    folder = root / "cifar-100-python"
    if not all((folder / name).is_file() for name in ("train", "test", "meta")):
        return synthesize_cifar100(root, train, test)
    with open(folder / "train", "rb") as file:
        if b"synthetic" not in file.read(4096):
            raise SystemExit(f"{folder} holds CIFAR-100 files that are not synthesized: drop --synthesize to use them")
    return {name: file_digest(folder / name, "md5") for name in ("train", "test", "meta")}


def synthesized_jpegs(root: Path, images: int, unique: int = 2000) -> None:
    """``images`` ImageNet-like JPEGs under ``root/train`` (100 classes): ``unique`` of them synthesized
    (:func:`bench.imagenet_data.synthesize`, a quarter at 1200x900), the rest hard links to them under other names
    (decoding costs the same; synthesizing costs a core ~10 ms an image)."""
    from .imagenet_data import synthesize

    synthesize(root, min(images, unique), classes=100, large_share=0.25)
    originals = sorted(p for p in (root / "train").rglob("*.JPEG") if "_copy" not in p.name)
    for index in range(images - len(originals)):
        source = originals[index % len(originals)]
        link = source.with_name(f"{source.stem}_copy{index // len(originals)}.JPEG")
        if not link.exists():
            os.link(source, link)


def accept_digests(digests: dict[str, str]) -> None:
    from alternet.data.arrays.cifar import CIFAR100DataModule as arrays

    arrays.train_files = {name: digests[name] for name in arrays.train_files}
    arrays.test_files = {name: digests[name] for name in arrays.test_files}
    arrays.meta_file = (arrays.meta_file[0], digests[arrays.meta_file[0]])


class LoaderWait(Profiler):
    """Lightning's profiler slot, recording only the training loop's waits for its next batch
    (``train_dataloader_next``: the fetch, which returns once the workers have the batch ready)."""

    ACTION = "train_dataloader_next"

    def __init__(self) -> None:
        super().__init__()
        self.waited = 0.0
        self._started: float | None = None

    def start(self, action_name: str) -> None:
        if action_name.endswith(self.ACTION):
            self._started = time.perf_counter()

    def stop(self, action_name: str) -> None:
        if action_name.endswith(self.ACTION) and self._started is not None:
            self.waited += time.perf_counter() - self._started
            self._started = None

    def summary(self) -> str:
        return ""


class Measure(L.Callback):
    """Epoch start times, the training loop's wall time, and the syncs between consecutive batch starts of steps
    that log nothing (``syncs``: a list per window)."""

    def __init__(self) -> None:
        self.loader = LoaderWait()
        self.epoch_starts: list[float] = []  # and, last, the training's end (after the last epoch's checkpoint)
        self.epoch_images: list[int] = []
        self.loop_seconds: list[float] = []  # per epoch
        self.windows: list[int] = []
        self.workers: list[int] = []  # the training loader's workers in each epoch (data.num_workers=auto grows them)
        self._batch_start: float | None = None
        self._count_at_start: int | None = None
        self.count = lambda: 0  # the running sync count (set by the caller)

    def setup(self, trainer, module, stage) -> None:
        trainer.profiler = self.loader  # the data fetcher reads trainer.profiler at each fetch

    def on_train_epoch_start(self, trainer, module) -> None:
        self.epoch_starts.append(time.perf_counter())
        self.epoch_images.append(0)
        self.loop_seconds.append(0.0)
        self._count_at_start = None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.epoch_images[-1] += int(batch[0].shape[0]) * trainer.world_size
        if batch_idx == 0:  # the epoch's loader has started its workers
            self.workers.append(getattr(trainer.train_dataloader, "num_workers", 0))  # DALI's: threads

    def on_train_end(self, trainer, module) -> None:
        self.epoch_starts.append(time.perf_counter())

    @property
    def steady_rate(self) -> float:
        """Training images per second of the training loop alone, over the epochs after the first."""
        return sum(self.epoch_images[1:]) / sum(self.loop_seconds[1:]) if sum(self.loop_seconds[1:]) else float("nan")

    @property
    def epoch_rate(self) -> float:
        """Training images per second of whole epochs after the first (validation and checkpoints included)."""
        if len(self.epoch_starts) < 3:
            return float("nan")
        return sum(self.epoch_images[1:]) / (self.epoch_starts[-1] - self.epoch_starts[1])

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        now, count = time.perf_counter(), self.count()
        if self._batch_start is not None:
            self.loop_seconds[-1] += now - self._batch_start
        self._batch_start = now
        logging = (trainer.fit_loop.epoch_loop._batches_that_stepped + 1) % trainer.log_every_n_steps in (0, 1)
        if self._count_at_start is not None and not logging and batch_idx > 1:
            self.windows.append(count - self._count_at_start)
        self._count_at_start = count

    def on_validation_start(self, trainer, module) -> None:
        self.on_train_epoch_end(trainer, module)  # the last batch's interval ends where validation starts

    def on_train_epoch_end(self, trainer, module) -> None:
        if self._batch_start is not None:
            self.loop_seconds[-1] += time.perf_counter() - self._batch_start
        self._batch_start = None


class SyncCount:
    """The syncs of a run: CUDA's own report (``set_sync_debug_mode("warn")``, one warning each) on a GPU, the host
    reads ``HostSyncs`` counts on a CPU."""

    def __init__(self, on_gpu: bool):
        self.on_gpu = on_gpu
        self.warned = 0

    def __enter__(self):
        import torch

        if self.on_gpu:
            self._catch = warnings.catch_warnings(record=True)
            self._caught = self._catch.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            self.count = lambda: sum("synchroniz" in str(w.message) for w in self._caught)
        else:
            from .syncs import HostSyncs

            self._host = HostSyncs().__enter__()
            self.count = lambda: self._host.count
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if self.on_gpu:
            torch.cuda.set_sync_debug_mode(0)
            self._catch.__exit__(*exc)
        else:
            self._host.__exit__(*exc)


def train_once(overrides: list[str], measure: Measure) -> tuple[Any, float]:
    import torch

    from alternet.apps.config import compose
    from alternet.apps.train import train
    from alternet.training import builders

    build = builders.build_callbacks

    def with_measure(*args, **kwargs):
        return [*build(*args, **kwargs), measure]

    builders.build_callbacks = with_measure
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    try:
        cfg = compose("train", overrides)
        with SyncCount(on_gpu) as syncs:
            measure.count = syncs.count
            summary = train(cfg)
    finally:
        builders.build_callbacks = build
    return summary, torch.cuda.max_memory_allocated() / 2**30 if on_gpu else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-root", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=3, help="whole epochs per configuration (>= 2: epoch img/s)")
    parser.add_argument("--workers", nargs="+", default=["auto"], help="data.num_workers values to run")
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["eager", "reduce-overhead"],
        choices=["eager", *COMPILE_MODES, *(f"backbone-{mode}" for mode in COMPILE_MODES)],
        help="eager, a performance.compile_mode to compile the whole step with, or backbone-MODE for the backbone "
        "alone",
    )
    parser.add_argument(
        "--synthesize", action="store_true", help="random CIFAR-100-format files (written first unless already there)"
    )
    parser.add_argument("--images", type=int, default=50_000, help="--synthesize: training images (test: a fifth)")
    parser.add_argument("--tag", default="", help="added to each case's name (e.g. concurrent-1 of two runs)")
    parser.add_argument("--imagenet", type=int, help="the ImageNet feed: this many synthesized JPEGs at 224 px")
    parser.add_argument("--feeds", nargs="+", default=["exact"], choices=list(FEEDS), help="--imagenet's")
    parser.add_argument(
        "overrides", nargs="*", help="more train.py overrides (a CPU smoke test: model=alternet_tiny trainer=cpu ...)"
    )
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/gpu_train"))
    add_harness_arguments(parser, rounds=1, round_help="unused: each configuration trains once")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2: the epoch rate is measured on the epochs after the first")
    os.environ.setdefault("WANDB_MODE", "offline")
    import torch

    facts = begin(args, "gpu_train", device="cuda" if torch.cuda.is_available() else "cpu")
    if args.synthesize and not args.imagenet:
        accept_digests(synthesized_cifar100(args.data_root, args.images, args.images // 5))
    if args.imagenet:
        synthesized_jpegs(args.data_root, args.imagenet)
    experiment, feeds = (IMAGENET, args.feeds) if args.imagenet else (CIFAR, [None])
    rows = []
    print(
        f"{'case':<24} {'workers':>7} {'steady img/s':>12} {'epoch img/s':>11} {'epoch/steady':>12} "
        f"{'loader':>7} {'syncs/step':>10} {'peak GiB':>8} {'wall s':>7}"
    )
    for workers, mode, feed in itertools.product(args.workers, args.modes, feeds):
        measure = Measure()
        name = f"{mode}-w{workers}{'-' + feed if feed else ''}{'-' + args.tag if args.tag else ''}"
        backbone = mode.startswith("backbone-")
        compiled = (
            ["performance.compile=false"]
            if mode == "eager"
            else [
                f"performance.compile={'backbone' if backbone else 'true'}",
                f"performance.compile_mode={mode.removeprefix('backbone-')}",
            ]
        )
        overrides = [
            *experiment.overrides,
            *([FEEDS[feed]] if feed else []),
            f"data.root={args.data_root}",
            f"data.num_workers={workers}",
            f"trainer.max_epochs={args.epochs}",
            "trainer.enable_progress_bar=false",
            *compiled,
            f"paths.output_dir={args.out / name}",
            *args.overrides,
        ]
        start = time.perf_counter()
        _, peak = train_once(overrides, measure)
        wall = time.perf_counter() - start
        steady = measure.steady_rate
        epoch_rate = measure.epoch_rate
        share = measure.loader.waited / sum(measure.loop_seconds) if sum(measure.loop_seconds) else float("nan")
        syncs = sum(measure.windows) / len(measure.windows) if measure.windows else float("nan")
        print(
            f"{name:<24} {workers:>7} {steady:>12.0f} {epoch_rate:>11.0f} {epoch_rate / steady:>12.0%} "
            f"{share:>7.1%} {syncs:>10.2f} {peak:>8.2f} {wall:>7.0f}",
            flush=True,
        )
        case = f"{experiment.case} {name} {args.epochs} epochs"
        rows += [
            row(case, "steady training throughput", steady, "img/s", notes="the loop's own, epochs 2+"),
            row(case, "whole-epoch throughput", epoch_rate, "img/s", notes="epochs 2+: with checkpoint, val"),
            row(case, "loader share", 100 * share, "%", notes="train_dataloader_next wait / training loop"),
            row(case, "syncs per non-logging step", syncs, "1"),
            row(case, "peak GPU memory", peak, "GiB"),
            row(case, "loader workers", measure.workers[-1], "1", notes=f"by epoch: {measure.workers}"),
            row(case, "whole run", wall, "s", notes="build, compile, train, test"),
        ]
    finish(args, "gpu_train", rows, facts)


if __name__ == "__main__":
    main()
