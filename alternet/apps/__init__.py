"""The top floor: the only code that wires alternet's libraries together.

``train`` (train.py), ``evaluate`` (evaluate.py), ``after_training`` (evaluation, export and W&B artifacts at the
end of a run), ``sweep`` (the multirun summary), ``export`` (``python -m alternet.hub``), ``corruptions``
(``python -m alternet.data.cifar_c``) and ``checks`` (config checks before any work). Below this floor, the
libraries never import each other's internals; see docs/architecture.md.
"""
