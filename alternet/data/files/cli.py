"""The shard-writing command line: ``alternet shards SRC OUT [--seed 0] [--chunk-bytes 64MB] [--workers N]
[--skip-corrupt]`` converts an image folder's training split into LitData chunks that ``data.train_shards=OUT``
streams from (alternet/apps/cli.py dispatches to :func:`main`)."""

from __future__ import annotations

import argparse
import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from ...errors import AlternetError, check_option, exit_with_error
from ...runs.records import override

SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)
UNITS = {"": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}  # litdata's own (decimal) units


def chunk_bytes(text: str) -> int:
    """``--chunk-bytes`` as a byte count (``64MB``, ``512kb``, ``1000000``); 0 when it is no size."""
    found = SIZE.match(text)
    return int(float(found[1]) * UNITS[found[2].upper()]) if found else 0


def main(argv: Sequence[str] | None = None, prog: str = "alternet shards") -> int:
    """Run ``PROG SRC OUT [options]`` (``argv``: the arguments; default: the process's)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write the class folders of SRC/train (or of SRC itself) as LitData shards in OUT, file order "
        "shuffled with --seed, each image's bytes stored as they are. Train from them with "
        "data.root=SRC data.train_shards=OUT.",
    )
    parser.add_argument("src", type=Path, help="image folder: a data set root holding train/<class>/*, or a split")
    parser.add_argument("out", type=Path, help="output directory (a local or network file system path)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the file order (default 0)")
    parser.add_argument("--chunk-bytes", default="64MB", help="target chunk size (default 64MB)")
    parser.add_argument("--workers", type=int, default=None, help="writer processes (default: CPUs, at most 8)")
    parser.add_argument(
        "--skip-corrupt", action="store_true", help="leave out images that do not decode (counted) instead of failing"
    )
    args = parser.parse_args(argv)
    from .shards import source_split, write_shards  # deferred: --help and bad options answer at once

    start = time.perf_counter()
    try:
        check_option("--seed", args.seed, args.seed >= 0, "an integer >= 0")
        if args.workers is not None:
            check_option("--workers", args.workers, args.workers >= 1, "at least 1 (default: the CPUs, at most 8)")
        chunk = chunk_bytes(args.chunk_bytes)
        check_option("--chunk-bytes", args.chunk_bytes, chunk > 0, "a size such as 64MB, 512KB or 1GB")
        written = write_shards(
            args.src,
            args.out,
            seed=args.seed,
            chunk_bytes=chunk,
            num_workers=args.workers,
            skip_corrupt=args.skip_corrupt,
        )
    except AlternetError as error:
        exit_with_error(error)
    except KeyboardInterrupt:
        exit_with_error(
            f"stopped: the shards in {args.out} are incomplete (no index.json, which LitData writes last, so nothing "
            "reads them); run the same command again to write them"
        )
    split = source_split(args.src)
    root = split.parent if split.name == "train" else None  # data.root holds train/ (a split elsewhere: unknown)
    extra = " data.skip_corrupt=true" if written["skipped"] else ""  # validation and test read the folder's files
    train_with = "train from them with"
    if root is not None and not (root / "val").is_dir():  # the shards hold all of train/: no hold-out from it
        extra += " data.val_size=0"
        if not (root / "test").is_dir():
            train_with = "once it has one, train from them with"
            print(
                f"note: {root} holds no val/ or test/ to evaluate on, and a hold-out of train/ would be trained on "
                "from the shards: add a val/ or test/ folder beside train/",
                flush=True,
            )
    print(
        f"wrote {written['images']} images of {written['classes']} classes from {split} to "
        f"{written['out']} in {time.perf_counter() - start:.1f}s"
        + (f"; skipped {written['skipped']} unreadable images" if written["skipped"] else "")
        + f"\n{train_with}: alternet train data=imagefolder "
        + (_override("data.root", root) if root else "data.root=DIR (the folder holding train/ and val/ or test/)")
        + f" {_override('data.train_shards', args.out)}{extra}"
    )
    return 0


def _override(key: str, value: object) -> str:
    """``key=value`` as a shell passes it to Hydra (:func:`alternet.runs.records.override`, quoted for the shell)."""
    return shlex.quote(override(key, value))
