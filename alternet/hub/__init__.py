"""Checkpoints for downstream work: export trained weights for timm, pull them back as models or features,
fine-tune from them, and move them through W&B artifacts.

- ``python -m alternet.hub export RUN_DIR_OR_CKPT --out DIR [--ema]``: ``model.safetensors`` (timm key
  names), ``config.json`` (timm hub format: ``architecture``, ``num_classes``, ``label_names``, ``model_args``,
  ``pretrained_cfg``; plus an ``alternet`` section) and a ``README.md`` model card. timm loads the directory
  with ``timm.create_model("local-dir:DIR", pretrained=True)`` once ``alternet`` is imported.
- :func:`load`: a model (or a ``FeatureListNet``) from an export, a run directory, a Lightning checkpoint or a
  W&B artifact reference ``entity/project/name:version``; a new ``num_classes`` gives a new head.
- :func:`load_pretrained`: the same weights into an existing model (``model.pretrained=SOURCE`` in training).
"""

from ..tracking import ArtifactError
from .export import export
from .loading import LoadReport, load, load_pretrained

__all__ = ["ArtifactError", "LoadReport", "export", "load", "load_pretrained"]
