"""alternet: train, evaluate and analyse hybrid Conv + MSA image classifiers (AlterNet and friends)."""

import os

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # albumentations checks for updates on import otherwise

from .models import create_model, list_models

__version__ = "0.1.0"
__all__ = ["__version__", "create_model", "list_models"]
