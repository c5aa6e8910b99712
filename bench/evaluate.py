"""Evaluation speed on CIFAR-100: generating the 75 CIFAR-100-C sets, then scoring a checkpoint on them.

    python bench/evaluate.py --root ../shared/data [--ckpt RUN_OR_CKPT] [--cache DIR] [--workers N]

Without --ckpt, a randomly initialised alternet_tiny is scored (inference cost is what is measured). The
generation is timed on a fresh cache directory; scoring is timed twice: the first run after generation, and a
rescoring that reuses the cache (target: dominated by model inference).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--ckpt", default=None, help="checkpoint or run directory (default: random alternet_tiny)")
    parser.add_argument("--cache", default=None, help="generation directory (default: a temporary one, removed)")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=512)
    args = parser.parse_args()

    from alternet.data import CIFAR100DataModule
    from alternet.data.cifar_c import generate_cifar_c, load_cifar_c
    from alternet.evaluation import predict
    from alternet.models import create_model
    from alternet.runs import find_checkpoint, load_model

    if not (Path(args.root) / "cifar-100-python" / "test").is_file():
        raise SystemExit(
            f"CIFAR-100 not found under {args.root}; pass --root DIR (the directory holding cifar-100-python/)"
        )
    data = CIFAR100DataModule(root=args.root, batch_size=args.batch_size)
    data.setup()
    test = data.splits["test"]
    cache = Path(args.cache or tempfile.mkdtemp(prefix="cifar100c-"))

    start = time.perf_counter()
    generate_cifar_c(test.images, test.labels, cache, workers=args.workers)
    generation = time.perf_counter() - start
    print(f"generate 75 CIFAR-100-C sets (10,000 images each): {generation:7.1f} s  -> {cache}")

    if args.ckpt:
        model = load_model(find_checkpoint(Path(args.ckpt))[0])[0]
    else:
        model = create_model("alternet_tiny", num_classes=100, img_size=32)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    start = time.perf_counter()
    sets = load_cifar_c(cache, num_classes=100)
    inference = 0.0
    correct = []
    for corruption, severity in sets.sets():
        images, labels = sets.get(corruption, severity)
        dataset = type(test)(np.asarray(images), np.asarray(labels), test.transform)
        tick = time.perf_counter()
        logits, labels = predict(model, dataset, device=device, batch_size=args.batch_size)
        inference += time.perf_counter() - tick
        correct.append((logits.argmax(1) == labels).mean())
    total = time.perf_counter() - start
    print(
        f"score from the cache, 750,000 images: {total:7.1f} s total, {inference:7.1f} s inference "
        f"({inference / total:.0%}), {750_000 / total:,.0f} img/s on {device.type}; mean acc {np.mean(correct):.4f}"
    )
    if not args.cache:
        shutil.rmtree(cache)


if __name__ == "__main__":
    main()
