"""Train a model: `python train.py [model=alternet_r50] [data=cifar100] [recipe=paper] [key=value ...]`.

With no arguments it trains a small AlterNet on scikit-learn's bundled digits on the CPU.
"""

import sys

import hydra
from omegaconf import DictConfig

from alternet.apps.train import train
from alternet.errors import AlternetError


@hydra.main(config_path="pkg://alternet.conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    try:
        metrics = train(cfg)
    except AlternetError as error:
        sys.exit(f"error: {error}")
    optimized = metrics["optimized_metric"]  # the value a Hydra sweeper (e.g. Optuna) optimises, if configured
    return optimized["value"] if optimized else None


if __name__ == "__main__":
    main()
