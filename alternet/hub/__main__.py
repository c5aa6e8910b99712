"""``python -m alternet.hub export|push|import-hdvw ...``: the same as ``alternet export|push|import-hdvw ...``
(:mod:`alternet.hub.cli`)."""

from .cli import main

if __name__ == "__main__":
    main(prog="python -m alternet.hub")
