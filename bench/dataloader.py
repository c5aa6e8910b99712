"""Data-loader throughput of the CIFAR-100 train pipelines that training uses, per worker.

Everything but the timm comparison is the library's own code path: ``CIFAR100DataModule`` with a recipe's
``augment`` section (``alternet.data.transforms``), its train split read with per-sample seeds exactly as the
training sampler yields them, and its ``train_dataloader()``.

* ``a``: recipe ``fast`` augmentation: pad-4 random crop + horizontal flip, normalise, to tensor;
* ``b``: recipe ``paper`` augmentation: ``a`` + RandAugment ``rand-m9-n2-mstd1.0`` (``alternet.data.randaugment``);
* ``c``: ``a`` + timm's PIL RandAugment, same spec (for comparison; ``--skip-timm`` to leave out).

For each: the single-process per-sample rate (what one worker can sustain) and the data module's real
``DataLoader`` with 1 and 2 workers (end to end, worker start-up included), in total and per worker.

    python bench/dataloader.py [--root ../shared/data] [--num-images 10000]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # before albumentations is imported

import albumentations as A
import cv2
import numpy as np
import torch
from albumentations.pytorch import ToTensorV2
from omegaconf import OmegaConf
from PIL import Image
from timm.data.auto_augment import rand_augment_transform

from alternet.data import ArrayDataset, CIFAR100DataModule
from alternet.data.randaugment import RandAugment, fill_from_mean
from alternet.data.transforms import augmentation_ops
from alternet.seeds import derive_seed

SPEC = "rand-m9-n2-mstd1.0"
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"
CONF = Path(__file__).resolve().parents[1] / "alternet" / "conf"


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


def datamodule(root: Path, augment: dict[str, Any], batch_size: int, workers: int, count: int) -> CIFAR100DataModule:
    """The library's CIFAR-100 data module with ``augment``, its train split cut to ``count`` images."""
    module = CIFAR100DataModule(
        root=str(root), batch_size=batch_size, num_workers=workers, augment=augment, persistent_workers=False
    )
    module.setup()
    train = module.splits["train"]
    module.splits["train"] = ArrayDataset(train.images[:count], train.labels[:count], train.transform)
    return module


def with_timm_randaugment(module: CIFAR100DataModule, augment: dict[str, Any]) -> None:
    """Swap the train transform for ``augment``'s ops + timm's PIL RandAugment + the same normalisation."""
    fill = fill_from_mean(module.mean)
    ops = [*augmentation_ops(augment, module.image_size, module.mean), A.Lambda(image=TimmRandAugment(SPEC, fill))]
    ops += [A.Normalize(mean=module.mean, std=module.std, max_pixel_value=255.0), ToTensorV2()]
    train = module.splits["train"]
    module.splits["train"] = ArrayDataset(train.images, train.labels, A.Compose(ops))


def per_sample_rate(dataset: ArrayDataset) -> float:
    """Images per second reading the train split one sample at a time, with the per-sample augmentation seeds
    the training sampler yields (their derivation and the reseeding are part of the cost)."""
    dataset[(0, 0)]
    start = time.perf_counter()
    for index in range(len(dataset)):
        dataset[(index, derive_seed(0, "augment", 0, index))]
    return len(dataset) / (time.perf_counter() - start)


def loader_rate(module: CIFAR100DataModule) -> float:
    """Images per second through the data module's train DataLoader, worker start-up included."""
    start = time.perf_counter()
    count = sum(len(images) for images, _ in module.train_dataloader())
    return count / (time.perf_counter() - start)


def rate_alone(fn: Callable[[np.ndarray], Any], images: np.ndarray) -> float:
    fn(images[0])
    start = time.perf_counter()
    for image in images:
        fn(image)
    return len(images) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="directory holding cifar-100-python/")
    parser.add_argument("--num-images", type=int, default=10000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--skip-timm", action="store_true", help="leave out timm's PIL RandAugment")
    args = parser.parse_args()

    if not (args.root / "cifar-100-python" / "train").is_file():
        print(f"SKIP: CIFAR-100 not found under {args.root} (expected cifar-100-python/train); pass --root")
        return
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    fast, paper = recipe("fast")["augment"], recipe("paper")["augment"]
    variants: dict[str, tuple[dict[str, Any], bool]] = {
        "a  recipe=fast: crop+flip+normalise+tensor": (fast, False),
        f"b  recipe=paper: a + RandAugment {SPEC} (ours)": (paper, False),
    }
    if not args.skip_timm:
        variants[f"c  a + RandAugment {SPEC} (timm, PIL)"] = (fast, True)

    print(
        f"CIFAR-100 train (first {args.num_images} images, 32x32), batch {args.batch_size}; torch {torch.__version__}, "
        f"albumentations {A.__version__}, opencv {cv2.__version__}, {os.cpu_count()} CPUs"
    )
    print(
        "per-sample = one process, one image at a time (= one worker's ceiling); DataLoader = the data module's "
        f"train_dataloader(), end to end; median of {args.repeats} runs\n"
    )
    loader_cols = "".join(f"  {f'{w} worker(s): total / per worker':>34}" for w in args.workers)
    print(f"{'pipeline':<52} {'per-sample img/s':>16} {'us/img':>8}{loader_cols}")
    for name, (augment, timm_ra) in variants.items():
        modules = {w: datamodule(args.root, augment, args.batch_size, w, args.num_images) for w in [0, *args.workers]}
        if timm_ra:
            for module in modules.values():
                with_timm_randaugment(module, augment)
        rate = median(per_sample_rate(modules[0].splits["train"]) for _ in range(args.repeats))
        cells = ""
        for workers in args.workers:
            total = median(loader_rate(modules[workers]) for _ in range(args.repeats))
            cells += f"  {f'{total:,.0f} / {total / workers:,.0f}':>34}"
        print(f"{name:<52} {rate:>16,.0f} {1e6 / rate:>8.1f}{cells}")
    images = modules[0].splits["train"].images
    fill = fill_from_mean(modules[0].mean)
    ours = RandAugment.from_config(SPEC, fill=fill)
    alone = {"RandAugment alone (ours, OpenCV)": lambda image: ours(image=image)}
    if not args.skip_timm:
        alone["RandAugment alone (timm, PIL incl. conversion)"] = TimmRandAugment(SPEC, fill)
    for name, fn in alone.items():
        rate = median(rate_alone(fn, images) for _ in range(args.repeats))
        print(f"{name:<52} {rate:>16,.0f} {1e6 / rate:>8.1f}")


if __name__ == "__main__":
    main()
