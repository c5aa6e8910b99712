"""Benchmark generated CIFAR-C on the CIFAR-100 test set: per-corruption speed and the total for 75 sets.

    python bench/corruptions.py [--root /work/shared/data] [--images 1000] [--workers N] [--full OUT_DIR]

Times ``corrupt`` on ``--images`` test images per corruption and severity in this process, prints ms per 1000
images and projects the wall time of all 15 x 5 sets of the 10,000 test images on ``--workers`` processes.
``--full OUT_DIR`` also runs ``generate_cifar_c`` on all test images (the real thing, files included), then again
to time the cache hit. Skips (exit 0) with a message when CIFAR-100 is not under ``--root``.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path

import cv2
import numpy as np
from threadpoolctl import threadpool_limits

from alternet.data.cifar_c import generate_cifar_c
from alternet.data.corruptions import CORRUPTIONS, SEVERITIES, corrupt

DEFAULT_ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def find_test_file(root: Path) -> Path | None:
    """CIFAR-100's python-pickle test file under ``root`` (or ``root`` being its folder), if present."""
    for candidate in (root / "cifar-100-python" / "test", root / "test"):
        if candidate.is_file():
            return candidate
    return None


def load_test_set(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-100 test images (N, 32, 32, 3) uint8 and fine labels."""
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    images = batch[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), np.asarray(batch[b"fine_labels"], dtype=np.int64)


def time_corruptions(images: np.ndarray) -> dict[str, list[float]]:
    """Seconds per corruption and severity to corrupt ``images`` in this process on one core (one BLAS and cv2
    thread, as in generate_cifar_c's workers)."""
    cv2.setNumThreads(1)
    threadpool_limits(1)
    seconds: dict[str, list[float]] = {}
    for name in CORRUPTIONS:
        seconds[name] = []
        for severity in SEVERITIES:
            start = time.perf_counter()
            corrupt(images, name, severity, seed=severity)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def report_speed(seconds: dict[str, list[float]], timed: int, total: int, workers: int) -> None:
    """Print ms per 1000 images per corruption and the projected time of all sets of ``total`` images."""
    print(f"{'corruption':<20} {'ms/1000 img (mean sev)':>22} {'sev 5':>8} {'75-set share s':>15}")
    cpu_total = 0.0
    for name, per_severity in seconds.items():
        per_1000 = [1000 * s / timed * 1000 for s in per_severity]
        projected = sum(per_severity) * total / timed
        cpu_total += projected
        print(f"{name:<20} {np.mean(per_1000):>22.0f} {per_1000[-1]:>8.0f} {projected:>15.1f}")
    print(
        f"projected for {len(seconds) * len(SEVERITIES)} sets of {total} images: {cpu_total:.0f} s on one core, "
        f"~{cpu_total / workers:.0f} s ({cpu_total / workers / 60:.1f} min) on {workers} workers (ideal scaling)"
    )


def run_full(images: np.ndarray, labels: np.ndarray, out_dir: Path, workers: int) -> None:
    """Generate all sets for real, then repeat the call to time the cache hit."""
    start = time.perf_counter()
    generate_cifar_c(images, labels, out_dir, workers=workers)
    generated = time.perf_counter() - start
    size = sum(f.stat().st_size for f in out_dir.glob("*.npy"))
    print(f"generate_cifar_c: {generated:.1f} s ({generated / 60:.1f} min) on {workers} workers, {size / 1e9:.2f} GB")
    start = time.perf_counter()
    generate_cifar_c(images, labels, out_dir, workers=workers)
    print(f"second call (cache hit): {time.perf_counter() - start:.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="folder holding cifar-100-python/")
    parser.add_argument("--images", type=int, default=1000, help="test images timed per corruption and severity")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--full", type=Path, metavar="OUT_DIR", help="also generate all 75 sets into OUT_DIR")
    args = parser.parse_args(argv)
    test_file = find_test_file(args.root)
    if test_file is None:
        print(f"SKIP: CIFAR-100 test set not found under {args.root} (expected cifar-100-python/test); use --root")
        return 0
    images, labels = load_test_set(test_file)
    timed = min(args.images, len(images))
    print(f"CIFAR-100 test set: {len(images)} images from {test_file}; timing {timed} per corruption and severity")
    report_speed(time_corruptions(images[:timed]), timed, len(images), args.workers)
    if args.full is not None:
        run_full(images, labels, args.full, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
