"""Progress of a long loop: a tqdm bar on a terminal, else one-line updates (a log file stays readable)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(
    items: Iterable[T], total: int, label: str, *, every: float = 60.0, stream: TextIO | None = None
) -> Iterator[T]:
    """Yield ``items`` (``total`` of them) while showing progress on ``stream`` (default stderr): a bar when it is a
    terminal; otherwise a line every ``every`` seconds and one at the end."""
    stream = stream or sys.stderr
    if stream.isatty():
        yield from tqdm(items, total=total, desc=label, leave=False, file=stream, dynamic_ncols=True)
        return
    start = last = time.monotonic()
    done = 0
    for item in items:
        yield item
        done += 1
        if (now := time.monotonic()) - last >= every and done < total:
            print(f"{label}: {done}/{total} batches, {now - start:.0f} s", file=stream, flush=True)
            last = now
    print(f"{label}: {done}/{total} batches in {time.monotonic() - start:.1f} s", file=stream, flush=True)
