"""Checkpoints for downstream work: export trained weights for timm, pull them back as models or features, fine-tune
from them, and move them through W&B artifacts. What each command writes, and every source :func:`load` reads:
docs/downstream.md.

- :func:`export` (``alternet export RUN_DIR_OR_CKPT --out DIR [--ema]``): ``model.safetensors`` (timm key names),
  ``config.json`` (with an ``alternet`` section) and a ``README.md`` model card; timm loads the directory with
  ``timm.create_model("local-dir:DIR", pretrained=True)`` once ``alternet`` is imported.
- :func:`push_to_hub` (``alternet push RUN_OR_EXPORT REPO_ID [--private]``): the same three files as one commit to a
  Hugging Face Hub model repository.
- :func:`import_hdvw` (``alternet import-hdvw FILE --arch NAME --out DIR``): a checkpoint of the paper's authors as
  the same export directory, converted to alternet's names (:mod:`alternet.hub.hdvw`).
- :func:`load`: a model (or a ``FeatureListNet``) from any source; a new ``num_classes`` gives a new head.
- :func:`load_pretrained`: the same weights into an existing model (``model.pretrained=SOURCE`` in training).
"""

from __future__ import annotations

from ..lazy import exports
from ..tracking import ArtifactError  # noqa: F401  (re-exported: what load raises for a W&B reference)

__getattr__, __dir__ = exports(
    __name__,
    {
        "LoadReport": "loading",
        "PushError": "references",
        "export": "exporting",
        "import_hdvw": "exporting",
        "load": "loading",
        "load_pretrained": "loading",
        "push_to_hub": "push",
    },
)
