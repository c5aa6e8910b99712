"""``python -m alternet.apps.corruptions --export DIR [--data cifar100]``: the same as ``alternet cifar-c`` (the
command line is :func:`alternet.data.corrupted.cifar_c.main`)."""

from __future__ import annotations

from ..data.corrupted.cifar_c import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m alternet.apps.corruptions"))
