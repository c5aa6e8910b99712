"""Analysis toolkit for trained classifiers: the instruments of "How Do Vision Transformers Work?" (Park & Kim, ICLR
2022), each modelled on the paper's figure and, by default, on HDVW's definition.

``run_analyses(["fourier", "hessian"], model, datamodule, recipe, configs, out_dir)`` writes
``<out_dir>/analysis/<name>.csv`` and ``<name>*.png`` per analysis and returns a JSON-safe summary per analysis
(numbers, plus ``"files"``). Budgets come from ``configs[name]`` (keys as in ``conf/analysis/<name>.yaml``, which
also hold the defaults). What each instrument measures, its definition, the alternatives and every remaining
difference from HDVW: docs/analysis.md.
"""

from __future__ import annotations

from ..lazy import exports

__getattr__, __dir__ = exports(  # the instruments import torch: this package's names load on first use
    __name__,
    {
        "ANALYSES": "config",
        "AnalysisConfigError": "errors",
        "AnalysisContext": "context",
        "AnalysisError": "errors",
        "Block": "blocks",
        "BlockSequence": "blocks",
        "block_sequence": "blocks",
        "check_applicable": "runner",
        "check_data": "runner",
        "check_inputs": "runner",
        "parse_configs": "config",
        "run_analyses": "runner",
    },
)
