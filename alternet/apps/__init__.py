"""The apps floor: the only code that wires alternet's libraries together.

``cli`` (the ``alternet`` command and its subcommands; the older spellings call the same functions), ``train``
(``alternet train``), ``evaluate`` (``alternet evaluate``), ``after_training`` (evaluation, export and W&B artifacts
at the end of a run), ``sweep`` (the multirun summary), ``console`` (what a command prints), ``corruptions`` (the
``python -m alternet.apps.corruptions`` alias of ``alternet cifar-c``) and ``checks`` (config checks before any
work). A command that drives one library lives in it (``hub/cli.py``, ``report/cli.py``, ``shards/cli.py``,
``data.corrupted.cifar_c.main``), so its ``python -m`` spelling imports nothing from here. Below this floor, the
libraries never import each other's internals; see docs/architecture.md.
"""
