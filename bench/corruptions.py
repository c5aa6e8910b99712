"""Benchmark generated CIFAR-C on the CIFAR-100 test set: per-corruption speed and the total for 75 sets.

    python -m bench.corruptions [--root /work/shared/data] [--images 1000] [--workers N] [--full OUT_DIR] [--no-record]

Times ``corrupt`` on ``--images`` test images per corruption and severity in this process (each of the 75 a case
of ``bench/harness.py``'s ``interleave``: ``--rounds`` rounds, 1 by default, median), prints ms per 1000 images and
projects the wall time of all 15 x 5 sets of the 10,000 test images on ``--workers`` processes. ``--full OUT_DIR``
also runs ``generate_cifar_c`` on all test images (the real thing, files included), then again to time the cache
hit: two different calls, each timed once by its own clock. Skips (exit 0) with a message when CIFAR-100 is not
under ``--root``.
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

from alternet.data.corrupted.cifar_c import generate_cifar_c
from alternet.data.corrupted.corruptions import corrupt
from alternet.data.corrupted.names import CORRUPTIONS, SEVERITIES

from .harness import add_harness_arguments, begin, finish, interleave, row, summarise, timing_row

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


def time_corruptions(images: np.ndarray, rounds: int = 1, warmup: int = 0) -> dict[tuple[str, int], list[float]]:
    """Seconds per round of each corruption and severity on ``images`` in this process on one core (one BLAS and
    cv2 thread, as in generate_cifar_c's workers)."""
    cv2.setNumThreads(1)
    threadpool_limits(1)
    cases = {
        (name, severity): lambda name=name, severity=severity: corrupt(images, name, severity, seed=severity)
        for name in CORRUPTIONS
        for severity in SEVERITIES
    }
    return interleave(cases, rounds, warmup)


def report_speed(times: dict[tuple[str, int], list[float]], timed: int, total: int, workers: int) -> list[dict]:
    """Print ms per 1000 images per corruption and the projected time of all sets of ``total`` images; the rows."""
    print(f"{'corruption':<20} {'ms/1000 img (mean sev)':>22} {'sev 5':>8} {'75-set share s':>15}")
    rows = []
    cpu_total = 0.0
    for name in CORRUPTIONS:
        per_severity = [summarise(times[name, severity]).median for severity in SEVERITIES]
        per_1000 = [1000 * s / timed * 1000 for s in per_severity]
        projected = sum(per_severity) * total / timed
        cpu_total += projected
        print(f"{name:<20} {np.mean(per_1000):>22.0f} {per_1000[-1]:>8.0f} {projected:>15.1f}")
        for severity in SEVERITIES:
            case = f"cifar100 {name} severity {severity}"
            per_image = [s / timed for s in times[name, severity]]
            rows.append(timing_row(case, "per image median", per_image, notes=f"{timed} images, one core"))
    sets = len(CORRUPTIONS) * len(SEVERITIES)
    print(
        f"projected for {sets} sets of {total} images: {cpu_total:.0f} s on one core, "
        f"~{cpu_total / workers:.0f} s ({cpu_total / workers / 60:.1f} min) on {workers} workers (ideal scaling)"
    )
    rows.append(row(f"cifar100 all {sets} sets of {total} images", "projected, one core", cpu_total, "s"))
    return rows


def run_full(images: np.ndarray, labels: np.ndarray, out_dir: Path, workers: int) -> list[dict]:
    """Generate all sets for real, then repeat the call to time the cache hit (not a repeated callable: the
    second call does not do the first one's work)."""
    start = time.perf_counter()
    generate_cifar_c(images, labels, out_dir, workers=workers)
    generated = time.perf_counter() - start
    size = sum(f.stat().st_size for f in out_dir.glob("*.npy"))
    print(f"generate_cifar_c: {generated:.1f} s ({generated / 60:.1f} min) on {workers} workers, {size / 1e9:.2f} GB")
    start = time.perf_counter()
    generate_cifar_c(images, labels, out_dir, workers=workers)
    cached = time.perf_counter() - start
    print(f"second call (cache hit): {cached:.2f} s")
    case = f"cifar100 generate_cifar_c {len(images)} images, {workers} workers"
    return [
        row(case, "wall", generated, "s", rounds=1, notes=f"{size / 1e9:.2f} GB written"),
        row(case, "wall, cache hit", cached, "s", rounds=1),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="folder holding cifar-100-python/")
    parser.add_argument("--images", type=int, default=1000, help="test images timed per corruption and severity")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--full", type=Path, metavar="OUT_DIR", help="also generate all 75 sets into OUT_DIR")
    add_harness_arguments(parser, rounds=1, warmup=0)
    args = parser.parse_args(argv)
    facts = begin(args, "corruptions", data_root=args.root)
    test_file = find_test_file(args.root)
    if test_file is None:
        print(f"SKIP: CIFAR-100 test set not found under {args.root} (expected cifar-100-python/test); use --root")
        return 0
    images, labels = load_test_set(test_file)
    timed = min(args.images, len(images))
    print(f"CIFAR-100 test set: {len(images)} images from {test_file}; timing {timed} per corruption and severity")
    rows = report_speed(time_corruptions(images[:timed], args.rounds, args.warmup), timed, len(images), args.workers)
    if args.full is not None:
        rows += run_full(images, labels, args.full, args.workers)
    finish(args, "corruptions", rows, facts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
