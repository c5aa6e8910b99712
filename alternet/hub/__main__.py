"""``python -m alternet.hub export RUN_DIR_OR_CKPT --out DIR [--ema]`` and
``python -m alternet.hub push RUN_OR_EXPORT REPO_ID [--private]`` (the commands live in :mod:`alternet.apps.export`)."""

from ..apps.export import main

if __name__ == "__main__":
    main()
