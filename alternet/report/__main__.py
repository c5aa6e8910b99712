"""``python -m alternet.report SWEEP_DIR [options]``: the same as ``alternet report`` (:mod:`alternet.report.cli`)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="python -m alternet.report"))
