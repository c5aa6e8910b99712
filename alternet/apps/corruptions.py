"""The corruption-export command line: ``python -m alternet.apps.corruptions --export DIR [--data cifar100]``
(also ``python -m alternet.data.cifar_c --export DIR``) writes a complete CIFAR-C-layout directory generated from a
data set's clean test split, for use by any CIFAR-C tool."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from ..data import build_datamodule
from ..data.cifar_c import generate_cifar_c
from ..data.corruptions import CORRUPTIONS, SEVERITIES
from ..errors import DataError


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m alternet.data.cifar_c --export DIR [--data cifar100] [--root data]``: write a complete
    CIFAR-C-layout directory generated from a data set's clean test split, for use by any CIFAR-C tool."""
    parser = argparse.ArgumentParser(description=main.__doc__.split("\n")[0].strip("`: "))
    parser.add_argument("--export", required=True, type=Path, help="output directory")
    parser.add_argument("--data", default="cifar100", help="cifar10 or cifar100 (default: cifar100)")
    parser.add_argument("--root", default="data", help="directory holding the data set (default: data)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None, help="processes (default: one per CPU core)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        datamodule = build_datamodule({"name": args.data, "root": args.root}, {"batch_size": 1}, seed=0)
        datamodule.setup()
    except (DataError, ValueError) as error:
        raise SystemExit(f"error: {error}") from error
    test = datamodule.splits["test"]
    out = generate_cifar_c(test.images, test.labels, args.export, seed=args.seed, workers=args.workers)
    print(f"{args.data}-C ({len(CORRUPTIONS)} corruptions x {len(SEVERITIES)} severities, generated): {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
