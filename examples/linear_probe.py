"""Linear probe: frozen pooled features from a trained model, a scikit-learn logistic regression on top.

    python examples/linear_probe.py SOURCE [--data digits|cifar10|cifar100] [--root DIR] [--limit N]

SOURCE is anything ``alternet.hub.load`` reads: an export directory, a run directory, a Lightning checkpoint or
a W&B artifact reference. Images are resized to the model's input size and normalised with its mean/std.
On digits it runs on a CPU in seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

import alternet.hub
from alternet.data import DATAMODULES
from alternet.errors import AlternetError, DataError, exit_with_error


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="export directory, run directory, checkpoint or W&B artifact reference")
    parser.add_argument("--data", default="digits", choices=sorted(DATAMODULES), help="data set to probe on")
    parser.add_argument("--root", default="data", help="directory holding the CIFAR folders (not needed for digits)")
    parser.add_argument("--limit", type=int, default=None, help="use at most N training and N test images")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    for option, value in (("--limit", args.limit), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            parser.error(f"{option} {value}: must be at least 1")
    return args


@torch.no_grad()
def extract(model: nn.Module, dataset: Dataset, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pooled features (the classifier's input) and labels of every image."""
    features, labels = [], []
    for images, targets in DataLoader(dataset, batch_size=batch_size):
        features.append(model(images).numpy())
        labels.append(targets.numpy())
    return np.concatenate(features), np.concatenate(labels)


def limited(dataset: Dataset, limit: int | None) -> Dataset:
    return dataset if limit is None else Subset(dataset, range(min(limit, len(dataset))))


def main() -> None:
    args = parse_args()
    start = time.perf_counter()
    model = alternet.hub.load(args.source, num_classes=0)  # no head: forward returns pooled features
    cfg = model.pretrained_cfg
    datamodule = DATAMODULES[args.data](
        root=args.root,
        image_size=cfg["input_size"][-1],
        mean=cfg["mean"],
        std=cfg["std"],
        val_size=0,
        batch_size=args.batch_size,
    )
    datamodule.setup()
    train_x, train_y = extract(model, limited(datamodule.splits["train"], args.limit), args.batch_size)
    test_x, test_y = extract(model, limited(datamodule.splits["test"], args.limit), args.batch_size)
    seen = len(np.unique(train_y))
    if seen < datamodule.num_classes or len(train_y) < 2 * seen:  # sklearn's own warning, said as a line of ours
        print(
            f"warning: --limit {args.limit} keeps {len(train_y)} training images of {seen} of the "
            f"{datamodule.num_classes} classes: too few to fit a probe per class, so its accuracy says little; "
            f"raise --limit (at least a few per class, e.g. --limit {10 * datamodule.num_classes})",
            file=sys.stderr,
        )
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%")
        probe.fit(train_x, train_y)
    accuracy = probe.score(test_x, test_y)
    print(
        f"linear probe of {cfg.get('architecture')} ({train_x.shape[1]}-d pooled features) on {args.data}: "
        f"train {len(train_y)}, test {len(test_y)} images, test accuracy {accuracy:.4f} "
        f"(chance {1 / datamodule.num_classes:.2f}; {time.perf_counter() - start:.1f}s)"
    )


if __name__ == "__main__":
    try:
        main()
    except DataError as error:  # its advice names the training keys: this script takes the directory as --root
        exit_with_error(f"{error} (here: --root DIR)")
    except AlternetError as error:
        exit_with_error(error)
