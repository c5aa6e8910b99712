"""``python -m alternet.shards SRC OUT [options]``: the same as ``alternet shards`` (:mod:`alternet.shards.cli`)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m alternet.shards"))
