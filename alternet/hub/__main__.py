"""``python -m alternet.hub export RUN_DIR_OR_CKPT --out DIR [--ema]``,
``python -m alternet.hub push RUN_OR_EXPORT REPO_ID [--private]`` and
``python -m alternet.hub import-hdvw FILE --arch NAME --out DIR`` (the commands live in :mod:`alternet.apps.export`)."""

from ..apps.export import main

if __name__ == "__main__":
    main()
