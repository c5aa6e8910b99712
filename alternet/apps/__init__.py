"""The apps floor: the only code that wires alternet's libraries together.

``cli`` (the ``alternet`` command and its subcommands), ``train`` (``alternet train``), ``evaluate`` (``alternet
evaluate``), ``after_training`` (evaluation, export and W&B artifacts at the end of a run), ``sweep`` (the multirun
summary), ``console`` (what a command prints) and ``checks`` (config checks before any work). A command that drives
one library lives in it (``hub/cli.py``, ``report/cli.py``, ``data/files/cli.py``, ``data/corrupted/cli.py``) and
``cli`` dispatches to it. Below this floor, the libraries never import each other's internals; see
docs/architecture.md.
"""
