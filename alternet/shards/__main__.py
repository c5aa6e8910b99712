"""``python -m alternet.shards SRC OUT [--seed 0] [--chunk-bytes 64MB] [--workers N] [--skip-corrupt]``."""

from ..apps.shards import main

if __name__ == "__main__":
    raise SystemExit(main())
