"""Evaluate checkpoints: `python evaluate.py ckpt=PATH [data=cifar100] [robustness.root=...]`.

Scores calibration (accuracy, NLL, ECE, Brier, reliability diagram) on the test split and, for CIFAR,
robustness to the 15 CIFAR-C corruptions x 5 severities (real files, or generated and cached).
"""

import sys

import hydra
from omegaconf import DictConfig

from alternet.apps.evaluate import run_evaluate
from alternet.errors import AlternetError


@hydra.main(config_path="pkg://alternet.conf", config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        run_evaluate(cfg)
    except AlternetError as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
