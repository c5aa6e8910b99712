"""``python -m alternet.data.cifar_c --export DIR [--data cifar100]``: the older spelling of ``alternet cifar-c``,
kept because it is documented (docs/getting-started.md). The command line and the code it runs are in
:mod:`alternet.data.corrupted.cifar_c`; it is imported under that name, so its worker functions pickle by it."""

from __future__ import annotations

from .corrupted.cifar_c import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m alternet.data.cifar_c"))
