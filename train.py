"""Train a model: `python train.py [model=alternet_r50] [data=cifar100] [recipe=paper] [key=value ...]`.

With no arguments it trains a small AlterNet on scikit-learn's bundled digits on the CPU.
"""

import sys

import hydra
from omegaconf import DictConfig

from alternet.errors import AlternetError
from alternet.training.run import train


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    try:
        metrics = train(cfg)
    except AlternetError as error:
        sys.exit(f"error: {error}")
    # The value a Hydra sweeper (e.g. Optuna) optimises: the monitored validation metric, else test accuracy.
    best = metrics.get("best_val_score")
    return best if best is not None else metrics["test"].get("test/acc")


if __name__ == "__main__":
    main()
