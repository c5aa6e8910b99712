"""The command lines: ``alternet-train``, ``alternet-evaluate`` and ``alternet-hub`` (console scripts of an installed
alternet, ``[project.scripts]`` in pyproject.toml), and ``python train.py`` / ``python evaluate.py`` in a checkout,
which call the same functions.

The configs are read from the package (Hydra ``pkg://alternet.conf``), so the commands work from any directory; run
directories go under the directory the command runs in (``outputs/`` by default, ``paths.log_dir``). ``--help``
lists the config groups and their options (template: ``hydra.help`` in ``alternet/conf/hydra/default.yaml``).
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from ..errors import AlternetError
from .evaluate import run_evaluate
from .export import main as export_main
from .train import train

CONFIG_PATH = "pkg://alternet.conf"


@hydra.main(config_path=CONFIG_PATH, config_name="train", version_base="1.3")
def train_main(cfg: DictConfig) -> float | None:
    """``alternet-train [group=option ...] [key=value ...]``: train one model (or, with ``-m``, a sweep)."""
    try:
        metrics = train(cfg)
    except AlternetError as error:
        sys.exit(f"error: {error}")
    optimized = metrics["optimized_metric"]  # the value a Hydra sweeper (e.g. Optuna) optimises, if configured
    return optimized["value"] if optimized else None


@hydra.main(config_path=CONFIG_PATH, config_name="evaluate", version_base="1.3")
def evaluate_main(cfg: DictConfig) -> None:
    """``alternet-evaluate ckpt=PATH [data=...] [key=value ...]``: score checkpoints."""
    try:
        run_evaluate(cfg)
    except AlternetError as error:
        sys.exit(f"error: {error}")


def hub_main(argv: list[str] | None = None) -> None:
    """``alternet-hub export RUN_DIR_OR_CKPT --out DIR [--ema]``, ``alternet-hub push ...`` and
    ``alternet-hub import-hdvw FILE --arch NAME --out DIR`` (the same as ``python -m alternet.hub``)."""
    export_main(argv)
