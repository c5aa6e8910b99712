"""Checks of the code itself, run from the repository root: ``python tools/layers.py`` (the import rule) and
``python -m tools.parity`` (the analysis instruments against the reference code's)."""
