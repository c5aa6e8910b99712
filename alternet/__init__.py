"""alternet: train, evaluate and analyse hybrid Conv + MSA image classifiers (AlterNet and friends)."""

import os

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # albumentations checks for updates on import otherwise

from .launch import register_resolvers
from .models import create_model, list_models

register_resolvers()  # ${alternet.run_stamp:} in hydra.run.dir: one run directory for every rank of a job

__version__ = "0.1.0"
__all__ = ["__version__", "create_model", "list_models"]
