"""Progress of long work that is not a training loop (evaluation passes, corruption sets, analyses): a tqdm bar on
a terminal; elsewhere (CI logs, SLURM ``.out`` files) a line every so often and one at the end, so a log stays
readable instead of filling with carriage-return frames."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def duration(seconds: float) -> str:
    """``m:ss`` or ``h:mm:ss``."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """``total`` units of work under ``label``. :meth:`update` after each unit, with an optional note (the condition
    just scored, a running mean). Off a terminal a line is printed when ``every`` seconds have passed since the
    last one (``every=0``: after every unit), and at :meth:`close` unless ``final`` is false."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        unit: str = "batches",
        every: float = 60.0,
        stream: TextIO | None = None,
        final: bool = True,
    ):
        self.total, self.label, self.unit, self.every, self.final = total, label, unit, every, final
        self.stream = stream or sys.stderr
        self.done = 0
        self.start = self._last = time.monotonic()
        self._bar: tqdm | None = None
        if self.stream.isatty():
            self._bar = tqdm(
                total=total, desc=label, unit=unit.removesuffix("s"), leave=False, file=self.stream, dynamic_ncols=True
            )

    def _line(self, note: str) -> str:
        elapsed = time.monotonic() - self.start
        line = f"{self.label}: {self.done}/{self.total} {self.unit}, {duration(elapsed)} elapsed"
        if 0 < self.done < self.total:
            line += f", ETA {duration(elapsed / self.done * (self.total - self.done))}"
        return line + (f"  {note}" if note else "")

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            if note:
                self._bar.set_postfix_str(note, refresh=False)
            return
        now = time.monotonic()
        if now - self._last >= self.every and self.done < self.total:
            self._last = now
            print(self._line(note), file=self.stream, flush=True)

    def close(self, note: str = "") -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.final:
            print(self._line(note), file=self.stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(
    items: Iterable[T], total: int, label: str, *, every: float = 60.0, stream: TextIO | None = None, final: bool = True
) -> Iterator[T]:
    """Yield ``items`` (``total`` batches of them) while showing progress (see :class:`Progress`)."""
    with Progress(total, label, every=every, stream=stream, final=final) as shown:
        for item in items:
            yield item
            shown.update()
