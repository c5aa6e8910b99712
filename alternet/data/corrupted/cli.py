"""``alternet cifar-c --export DIR [--data cifar100] [--root data]``: a CIFAR-C-layout directory generated from a data
set's test split (the generator: :mod:`.cifar_c`)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from ...errors import AlternetError, DataError, check_option, exit_with_error


def main(argv: Sequence[str] | None = None, prog: str = "alternet cifar-c") -> int:
    """``PROG --export DIR [--data cifar100] [--root data] [--seed 0] [--workers N]``: write a complete
    CIFAR-C-layout directory generated from a data set's clean test split, for use by any CIFAR-C tool
    (alternet/apps/cli.py dispatches ``alternet cifar-c`` here; the library: :mod:`.cifar_c`)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write a complete CIFAR-C-layout directory (15 corruptions x 5 severities, labels.npy, "
        "manifest.json) generated from a data set's clean test split, for use by any CIFAR-C tool.",
    )
    parser.add_argument("--export", required=True, type=Path, help="output directory")
    parser.add_argument("--data", default="cifar100", help="cifar10 or cifar100 (default: cifar100)")
    parser.add_argument("--root", default="data", help="directory holding the data set (default: data)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None, help="processes (default: one per CPU core)")
    args = parser.parse_args(argv)
    from .. import DATAMODULES  # deferred: --help and bad options answer at once
    from .cifar_c import check_cifar_c_output, generate_cifar_c  # deferred: as above
    from .names import CORRUPTIONS, SEVERITIES  # deferred: as above

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        check_option("--data", args.data, args.data in ("cifar10", "cifar100"), "cifar10 or cifar100")
        check_option("--seed", args.seed, args.seed >= 0, "an integer >= 0")
        if args.workers is not None:
            check_option("--workers", args.workers, args.workers >= 1, "at least 1 (default: one per CPU core)")
        check_cifar_c_output(args.export, "--export")  # before the data set is read
        folder = DATAMODULES[args.data].folder
        if not (Path(args.root).expanduser() / folder).is_dir():  # the data module's message names train's keys
            raise DataError(
                f"--root {args.root} holds no {folder}/: point --root at the directory containing it (alternet "
                f"train data={args.data} data.download=true downloads it into data/)"
            )
        datamodule = DATAMODULES[args.data](root=args.root, batch_size=1)
        datamodule.setup()
        test = datamodule.splits["test"]
        out = generate_cifar_c(test.images, test.labels, args.export, seed=args.seed, workers=args.workers)
    except (AlternetError, ValueError) as error:
        exit_with_error(error)
    print(f"{args.data}-C ({len(CORRUPTIONS)} corruptions x {len(SEVERITIES)} severities, generated): {out}")
    return 0
