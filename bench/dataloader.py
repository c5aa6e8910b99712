"""Data-loader throughput of the CIFAR-100 train pipelines that training uses, per worker.

Everything but the timm comparison is the library's own code path: ``CIFAR100DataModule`` with a recipe's
``augment.arrays`` section (``alternet.data.arrays.transforms``), its train split read with per-sample seeds exactly as
the training sampler yields them, and its ``train_dataloader()``.

* ``a``: recipe ``fast`` augmentation: pad-4 random crop + horizontal flip, normalise, to tensor;
* ``b``: recipe ``paper`` augmentation: ``a`` + RandAugment ``rand-m9-n2-mstd1.0``
  (``alternet.data.arrays.randaugment``);
* ``c``: ``a`` + timm's PIL RandAugment, same spec (for comparison; ``--skip-timm`` to leave out);
* ``a'``: ``a`` as the data module serves it since 2026-11-27, one ``BatchPipeline`` call per batch
  (``alternet.data.arrays.transforms``; its per-sample column reads the split a batch at a time).

``--step-model NAME`` adds what the loader costs a training step: NAME's fp32 step (bench/step.py's, channels_last,
SGD with nesterov momentum as the speedrun's) fed by a fixed batch, by ``a`` and by ``a'`` through the data module's
loader with 0 and 1 workers, interleaved in one run (``--step-layout`` sets ``model.layout``).

For each: the single-process per-sample rate (what one worker can sustain) and the data module's real
``DataLoader`` with 1 and 2 workers (end to end, worker start-up included), in total and per worker. Every pass
(each pipeline's per-sample and loader passes, RandAugment alone) is one case of ``bench/harness.py``'s
``interleave``: ``--rounds`` rounds (also spelt ``--repeats``), the median reported, no warm-up by default (a
loader pass includes its start-up on purpose).

    python -m bench.dataloader [--root ../shared/data] [--num-images 10000] [--rounds 3] [--no-record]
    python -m bench.dataloader --batch-size 256 --workers 1 --skip-timm --step-model alternet_laptop
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # before albumentations is imported

import albumentations as A
import cv2
import numpy as np
import torch
from albumentations.pytorch import ToTensorV2
from omegaconf import OmegaConf
from PIL import Image
from timm.data.auto_augment import rand_augment_transform

from alternet.data import ArrayDataset, CIFAR100DataModule, EpochSampler
from alternet.data.arrays.randaugment import RandAugment
from alternet.data.arrays.transforms import augmentation_ops
from alternet.data.augment import fill_from_mean
from alternet.seeds import derive_seed, derive_seeds

from .harness import add_harness_arguments, begin, finish, interleave, summarise, summary_row, timing_row
from .step import batch_step

SPEC = "rand-m9-n2-mstd1.0"
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"
CONF = Path(__file__).resolve().parents[1] / "conf"


def recipe(name: str) -> dict[str, Any]:
    """A packaged recipe, composed with its base file."""
    base = OmegaConf.load(CONF / "recipe" / "_base.yaml")
    return OmegaConf.to_container(OmegaConf.merge(base, OmegaConf.load(CONF / "recipe" / f"{name}.yaml")))


class TimmRandAugment:
    """timm's PIL RandAugment as an albumentations ``Lambda`` image function (numpy -> PIL -> numpy)."""

    def __init__(self, spec: str, fill: tuple[int, ...]):
        self.policy = rand_augment_transform(spec, {"translate_const": 100, "img_mean": fill})

    def __call__(self, image: np.ndarray, **_: Any) -> np.ndarray:
        return np.asarray(self.policy(Image.fromarray(image)))


def datamodule(
    root: Path, augment: dict[str, Any], batch_size: int, workers: int, count: int, batched: bool = False, **kwargs: Any
) -> CIFAR100DataModule:
    """The library's CIFAR-100 data module with ``augment``, its train split cut to ``count`` images and read one
    image at a time through albumentations (``batched``: a batch at a time, as the module serves crop and flip)."""
    settings = {"persistent_workers": False, **kwargs}
    module = CIFAR100DataModule(root=str(root), batch_size=batch_size, num_workers=workers, augment=augment, **settings)
    module.setup()
    train = module.splits["train"]
    batch = train.batch if batched else None
    module.splits["train"] = ArrayDataset(train.images[:count], train.labels[:count], train.transform, batch)
    return module


def with_timm_randaugment(module: CIFAR100DataModule, augment: dict[str, Any]) -> None:
    """Swap the train transform for ``augment``'s ops + timm's PIL RandAugment + the same normalisation."""
    fill = fill_from_mean(module.mean)
    ops = [*augmentation_ops(augment, module.image_size, module.mean), A.Lambda(image=TimmRandAugment(SPEC, fill))]
    ops += [A.Normalize(mean=module.mean, std=module.std, max_pixel_value=255.0), ToTensorV2()]
    train = module.splits["train"]
    module.splits["train"] = ArrayDataset(train.images, train.labels, A.Compose(ops))


def per_sample_pass(dataset: ArrayDataset) -> Callable[[], int]:
    """Read the train split one sample at a time, with the per-sample augmentation seeds the training sampler
    yields (their derivation and the reseeding are part of the cost); the first sample is read once up front."""
    dataset[(0, 0)]

    def run() -> int:
        for index in range(len(dataset)):
            dataset[(index, derive_seed(0, "augment", 0, index))]
        return len(dataset)

    return run


def per_batch_pass(dataset: ArrayDataset, batch_size: int) -> Callable[[], int]:
    """Read the train split a batch at a time through its ``BatchPipeline``, the sampler's seeds included."""

    def run() -> int:
        for start in range(0, len(dataset), batch_size):
            end = min(start + batch_size, len(dataset))
            dataset.__getitems__([(index, derive_seed(0, "augment", 0, index)) for index in range(start, end)])
        return len(dataset)

    return run


def step_cases(args: argparse.Namespace, augment: dict[str, Any]) -> dict[str, Callable[[], object]]:
    """``--step-model``'s training step fed by a fixed batch and by the loaders (a step per call)."""
    import alternet

    layout = {"layout": args.step_layout} if args.step_layout else {}
    net = alternet.create_model(args.step_model, num_classes=100, img_size=32, **layout)
    net = net.train().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    fp32_step = batch_step(net, optimizer, None)

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        fp32_step(images.contiguous(memory_format=torch.channels_last), labels)  # as the training module's forward

    fixed = None
    cases: dict[str, Callable[[], object]] = {}
    feeds = [(False, 0, True), (False, 1, True), (False, 1, False), (True, 0, True), (True, 1, True)]
    for batched, workers, pinned in feeds:  # pinned: the workers off the main process's core (the default)
        module = datamodule(args.root, augment, args.batch_size, workers, 50_000, batched, persistent_workers=True)
        with contextlib.nullcontext() if pinned else mock.patch("alternet.data.workers.worker_cores", lambda *_: None):
            batches = iter(module.train_dataloader())  # starts the persistent workers, pinned or not
        fixed = fixed or next(batches)
        name = f"{'a' + chr(39) if batched else 'a'} loader, {workers} worker(s){'' if pinned else ', not pinned'}"
        cases[name] = lambda batches=batches: step(*next(batches))
    return {"fixed batch (no loading)": lambda: step(*fixed), **cases}


def loader_pass(module: CIFAR100DataModule, counts: dict[str, int], key: str) -> Callable[[], None]:
    """One epoch through the data module's train DataLoader, worker start-up included; its image count goes to
    ``counts[key]``."""

    def run() -> None:
        counts[key] = sum(len(images) for images, _ in module.train_dataloader())

    return run


def alone_pass(fn: Callable[[np.ndarray], Any], images: np.ndarray) -> Callable[[], None]:
    fn(images[0])

    def run() -> None:
        for image in images:
            fn(image)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="directory holding cifar-100-python/")
    parser.add_argument("--num-images", type=int, default=10000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-timm", action="store_true", help="leave out timm's PIL RandAugment")
    parser.add_argument("--step-model", default=None, help="also time this model's training step fed by the loaders")
    parser.add_argument("--step-layout", default=None, help="model.layout of --step-model (e.g. C|C|CM)")
    parser.add_argument("--step-batches", type=int, default=6, help="steps per round of each --step-model case")
    add_harness_arguments(
        parser, rounds=3, warmup=0, threads=1, round_aliases=["--repeats"], round_help="runs per measurement (median)"
    )
    args = parser.parse_args()
    facts = begin(args, "dataloader", data_root=args.root)

    if not (args.root / "cifar-100-python" / "train").is_file():
        print(f"SKIP: CIFAR-100 not found under {args.root} (expected cifar-100-python/train); pass --root")
        return
    cv2.setNumThreads(1)
    fast, paper = recipe("fast")["augment"]["arrays"], recipe("paper")["augment"]["arrays"]
    variants: dict[str, tuple[dict[str, Any], bool, bool]] = {
        "a  recipe=fast: crop+flip+normalise+tensor": (fast, False, False),
        "a' a, one BatchPipeline call per batch": (fast, False, True),
        f"b  recipe=paper: a + RandAugment {SPEC} (ours)": (paper, False, False),
    }
    if not args.skip_timm:
        variants[f"c  a + RandAugment {SPEC} (timm, PIL)"] = (fast, True, False)

    print(
        f"CIFAR-100 train (first {args.num_images} images, 32x32), batch {args.batch_size}; torch {torch.__version__}, "
        f"albumentations {A.__version__}, opencv {cv2.__version__}, {os.cpu_count()} CPUs"
    )
    print(
        "per-sample = one process, one image at a time (= one worker's ceiling); DataLoader = the data module's "
        f"train_dataloader(), end to end; median of {args.rounds} interleaved runs\n"
    )
    cases: dict[str, Callable[[], object]] = {}
    counts: dict[str, int] = {}
    for name, (augment, timm_ra, batched) in variants.items():
        modules = {
            w: datamodule(args.root, augment, args.batch_size, w, args.num_images, batched) for w in [0, *args.workers]
        }
        if timm_ra:
            for module in modules.values():
                with_timm_randaugment(module, augment)
        train = modules[0].splits["train"]
        counts[f"{name}|per-sample"] = len(train)
        cases[f"{name}|per-sample"] = per_batch_pass(train, args.batch_size) if batched else per_sample_pass(train)
        for workers in args.workers:
            cases[f"{name}|{workers}"] = loader_pass(modules[workers], counts, f"{name}|{workers}")
    images = modules[0].splits["train"].images
    fill = fill_from_mean(modules[0].mean)
    ours = RandAugment.from_config(SPEC, fill=fill)
    alone = {"RandAugment alone (ours, OpenCV)": lambda image: ours(image=image)}
    if not args.skip_timm:
        alone["RandAugment alone (timm, PIL incl. conversion)"] = TimmRandAugment(SPEC, fill)
    for name, fn in alone.items():
        counts[f"{name}|per-sample"] = len(images)
        cases[f"{name}|per-sample"] = alone_pass(fn, images)
    seeds = {  # what the training process pays per sample for the order and augmentation seeds of a 50,000 epoch
        "seeds: derive_seed, one sample at a time": lambda: [derive_seed(0, "augment", 1, i) for i in range(50_000)],
        "seeds: derive_seeds, the epoch at once": lambda: derive_seeds(0, "augment", 1, np.arange(50_000)),
        "seeds: the EpochSampler's keys (order + seeds)": lambda: list(EpochSampler(50_000, 0, shuffle=True)),
    }
    for name, fn in seeds.items():
        counts[f"{name}|per-sample"] = 50_000
        cases[f"{name}|per-sample"] = fn
    times = interleave(cases, args.rounds, args.warmup)

    rates = {key: [counts[key] / seconds for seconds in timed] for key, timed in times.items()}

    def rate(key: str) -> float:
        return summarise(rates[key]).median

    rows = []
    loader_cols = "".join(f"  {f'{w} worker(s): total / per worker':>34}" for w in args.workers)
    print(f"{'pipeline':<52} {'per-sample img/s':>16} {'us/img':>8}{loader_cols}")
    for name in [*variants, *alone, *seeds]:
        per_sample = rate(f"{name}|per-sample")
        cells = ""
        case = "cifar100 32px " + " ".join(name.split())
        rows.append(summary_row(f"{case}, one process", "throughput median", rates[f"{name}|per-sample"], "img/s"))
        for workers in args.workers if name in variants else []:
            total = rate(f"{name}|{workers}")
            cells += f"  {f'{total:,.0f} / {total / workers:,.0f}':>34}"
            notes = f"{counts[f'{name}|{workers}']} images, batch {args.batch_size}, start-up included"
            rows.append(
                summary_row(
                    f"{case}, DataLoader {workers} worker(s)",
                    "throughput median",
                    rates[f"{name}|{workers}"],
                    "img/s",
                    notes=notes,
                )
            )
        print(f"{name:<52} {per_sample:>16,.0f} {1e6 / per_sample:>8.1f}{cells}")
    if args.step_model:
        rows += step_table(args, fast)
    finish(args, "dataloader", rows, facts)


def step_table(args: argparse.Namespace, augment: dict[str, Any]) -> list[dict[str, Any]]:
    """Time ``--step-model``'s step per feeding (``--step-batches`` steps a round, interleaved) and print it."""
    torch.set_num_threads(max(1, os.cpu_count() or 1))  # the step trains on every core, as a run does
    cases = step_cases(args, augment)
    repeated = {name: (lambda case=case: [case() for _ in range(args.step_batches)]) for name, case in cases.items()}
    times = interleave(repeated, args.rounds, 1)
    model = f"{args.step_model}{' ' + args.step_layout if args.step_layout else ''}"
    print(f"\n{model} fp32 training step, batch {args.batch_size}, fed by (ms/step, median of {args.rounds} rounds):")
    fixed = summarise(times["fixed batch (no loading)"]).median
    rows = []
    for name, seconds in times.items():
        per_step = [value / args.step_batches for value in seconds]
        median = summarise(per_step).median
        print(f"  {name:<32} {1000 * median:8.1f} ms/step  {median / (fixed / args.step_batches):5.2f}x fixed")
        rows.append(timing_row(f"{model} step, batch {args.batch_size}, {name}", "step median", per_step))
    return rows


if __name__ == "__main__":
    main()
