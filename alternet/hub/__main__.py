"""``python -m alternet.hub export RUN_DIR_OR_CKPT --out DIR [--ema]`` (the command lives in
:mod:`alternet.apps.export`)."""

from ..apps.export import main

if __name__ == "__main__":
    main()
