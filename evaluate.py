"""Evaluate models: `python evaluate.py ckpt=SOURCE [data=cifar100] [robustness.root=...]`, the same as
`alternet evaluate ...` (alternet/apps/cli.py), kept in a checkout beside train.py.

Scores calibration (accuracy, NLL, ECE, Brier, reliability diagram) on the test split and, for CIFAR,
robustness to the 15 CIFAR-C corruptions x 5 severities (real files, or generated and cached); `--help` lists the
config groups.
"""

from alternet.apps.cli import evaluate_main as main

if __name__ == "__main__":
    main()
