"""``python -m alternet COMMAND [ARGS]``: the ``alternet`` command (:func:`alternet.apps.cli.main`)."""

from .apps.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
