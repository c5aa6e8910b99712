"""Evaluate checkpoints: `python evaluate.py ckpt=PATH [data=cifar100] [robustness.root=...]`.

Scores calibration (accuracy, NLL, ECE, Brier, reliability diagram) on the test split and, for CIFAR,
robustness to the 15 CIFAR-C corruptions x 5 severities (real files, or generated and cached).
"""

import sys

import hydra
from omegaconf import DictConfig

from alternet.errors import AlternetError
from alternet.evaluation.cli import run_evaluate


@hydra.main(config_path="conf", config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        run_evaluate(cfg)
    except AlternetError as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
