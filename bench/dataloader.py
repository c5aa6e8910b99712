"""Data-loader throughput of the paper's CIFAR-100 train pipeline, per worker.

Pipelines (albumentations on uint8 HWC numpy, ending in a normalised CHW float tensor):

* ``a``: pad-4 random crop + horizontal flip + normalise + to-tensor;
* ``b``: ``a`` + RandAugment ``rand-m9-n2-mstd1.0`` (``alternet.data.randaugment``, numpy/OpenCV);
* ``c``: ``a`` + timm's PIL RandAugment, same spec (for comparison; ``--skip-timm`` to leave out).

For each: the single-process per-sample rate (what one worker can sustain) and a real ``torch.utils.data.DataLoader``
run with 1 and 2 workers (end to end, worker start-up included), reported in total and per worker.

    python bench/dataloader.py [--root /work/shared/data] [--num-images 10000] [--batch-size 128]
"""

from __future__ import annotations

import argparse
import os
import pickle
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
from PIL import Image
from timm.data.auto_augment import rand_augment_transform
from torch.utils.data import DataLoader, Dataset

from alternet.data.randaugment import RandAugment, fill_from_mean

CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
SPEC = "rand-m9-n2-mstd1.0"
DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"


def find_train_file(root: Path) -> Path | None:
    """``train`` under ``root/cifar-100-python/`` or directly under ``root``."""
    for candidate in (root / "cifar-100-python" / "train", root / "train"):
        if candidate.is_file():
            return candidate
    return None


def load_images(train_file: Path, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` CIFAR-100 train images as (N, 32, 32, 3) uint8, with their fine labels."""
    with open(train_file, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    images = batch[b"data"][:count].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), np.asarray(batch[b"fine_labels"][:count], dtype=np.int64)


class TimmRandAugment:
    """timm's PIL RandAugment as an albumentations ``Lambda`` image function (numpy -> PIL -> numpy)."""

    def __init__(self, spec: str, fill: tuple[int, ...]):
        self.policy = rand_augment_transform(spec, {"translate_const": 100, "img_mean": fill})

    def __call__(self, image: np.ndarray, **_: Any) -> np.ndarray:
        return np.asarray(self.policy(Image.fromarray(image)))


def train_pipeline(randaugment: A.BasicTransform | None = None) -> A.Compose:
    """Pad-4 random crop, horizontal flip, [RandAugment,] normalise, to CHW tensor."""
    ops: list[A.BasicTransform] = [
        A.PadIfNeeded(40, 40, border_mode=cv2.BORDER_CONSTANT, fill=0),
        A.RandomCrop(32, 32),
        A.HorizontalFlip(p=0.5),
    ]
    if randaugment is not None:
        ops.append(randaugment)
    ops += [A.Normalize(mean=CIFAR100_MEAN, std=CIFAR100_STD), ToTensorV2()]
    return A.Compose(ops, seed=0)


class ArrayDataset(Dataset):
    """In-memory uint8 images through an albumentations pipeline."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform: A.Compose):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(image=self.images[index])["image"], int(self.labels[index])


def seed_worker(_worker_id: int) -> None:
    """Give each worker its own augmentation stream (forked workers would otherwise share the parent's)."""
    info = torch.utils.data.get_worker_info()
    info.dataset.transform.set_random_seed(torch.initial_seed() % 2**32)


def per_sample_rate(fn: Callable[[np.ndarray], Any], images: np.ndarray) -> float:
    """Images per second for ``fn`` applied one image at a time in this process."""
    fn(images[0])
    start = time.perf_counter()
    for image in images:
        fn(image)
    return len(images) / (time.perf_counter() - start)


def loader_rate(dataset: ArrayDataset, workers: int, batch_size: int) -> float:
    """Images per second through a DataLoader with ``workers`` processes, start-up included."""
    start = time.perf_counter()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers, worker_init_fn=seed_worker)
    count = sum(len(images) for images, _ in loader)
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="directory holding cifar-100-python/")
    parser.add_argument("--num-images", type=int, default=10000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is reported")
    parser.add_argument("--skip-timm", action="store_true", help="leave out timm's PIL RandAugment")
    args = parser.parse_args()

    train_file = find_train_file(args.root)
    if train_file is None:
        print(f"SKIP: CIFAR-100 not found under {args.root} (expected cifar-100-python/train); pass --root")
        return
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    images, labels = load_images(train_file, args.num_images)

    fill = fill_from_mean(CIFAR100_MEAN)
    ours = RandAugment.from_config(SPEC, fill=fill)
    pipelines = {
        "a  crop+flip+normalise+tensor": train_pipeline(),
        f"b  a + RandAugment {SPEC} (ours, OpenCV)": train_pipeline(ours),
    }
    alone = {"RandAugment alone (ours, OpenCV)": lambda image: ours(image=image)}
    if not args.skip_timm:
        timm_ra = TimmRandAugment(SPEC, fill)
        pipelines[f"c  a + RandAugment {SPEC} (timm, PIL)"] = train_pipeline(A.Lambda(image=timm_ra))
        alone["RandAugment alone (timm, PIL incl. conversion)"] = timm_ra

    print(
        f"CIFAR-100 train, {len(images)} images 32x32, batch {args.batch_size}; torch {torch.__version__}, "
        f"albumentations {A.__version__}, opencv {cv2.__version__}, {os.cpu_count()} CPUs"
    )
    print(
        "per-sample = one process, one image at a time (= one worker's ceiling); DataLoader = end to end; "
        f"median of {args.repeats} runs\n"
    )
    loader_cols = "".join(f"  {f'{w} worker(s): total / per worker':>34}" for w in args.workers)
    print(f"{'pipeline':<52} {'per-sample img/s':>16} {'us/img':>8}{loader_cols}")
    for name, pipeline in pipelines.items():
        rate = median(per_sample_rate(lambda image, p=pipeline: p(image=image), images) for _ in range(args.repeats))
        cells = ""
        for workers in args.workers:
            dataset = ArrayDataset(images, labels, pipeline)
            total = median(loader_rate(dataset, workers, args.batch_size) for _ in range(args.repeats))
            cells += f"  {f'{total:,.0f} / {total / workers:,.0f}':>34}"
        print(f"{name:<52} {rate:>16,.0f} {1e6 / rate:>8.1f}{cells}")
    for name, fn in alone.items():
        rate = median(per_sample_rate(fn, images) for _ in range(args.repeats))
        print(f"{name:<52} {rate:>16,.0f} {1e6 / rate:>8.1f}")


if __name__ == "__main__":
    main()
