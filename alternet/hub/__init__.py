"""Checkpoints for downstream work: export trained weights for timm, pull them back as models or features,
fine-tune from them, and move them through W&B artifacts.

- ``alternet export RUN_DIR_OR_CKPT --out DIR [--ema]`` (:func:`export`): ``model.safetensors`` (timm key names),
  ``config.json`` (every key timm's ``save_for_hf`` writes, plus an ``alternet`` section) and a ``README.md`` model
  card whose YAML front matter is the Hub's metadata (timm, license, data set, test results as a ``model-index``).
  timm loads the directory with ``timm.create_model("local-dir:DIR", pretrained=True)`` once ``alternet`` is imported.
- ``alternet push RUN_OR_EXPORT REPO_ID [--private]`` (:func:`push_to_hub`): the same three files
  as one commit to a Hugging Face Hub model repository, staged and verified before anything remote happens; then
  ``timm.create_model("hf-hub:REPO_ID", pretrained=True)`` loads it (after ``import alternet``).
- ``alternet import-hdvw FILE --arch NAME --out DIR`` (:func:`import_hdvw`): a checkpoint of the
  paper's authors (HDVW: ``resnet_dnn_50``, ``vit_ti``, ``pit_ti``, ``swin_ti``, ``alternet_50``...) as the same
  export directory, converted to alternet's names (:mod:`alternet.hub.hdvw`).
- :func:`load`: a model (or a ``FeatureListNet``) from an export, a run directory, a Lightning checkpoint, a
  W&B artifact reference ``entity/project/name:version``, ``hdvw:[ARCH:]FILE``, or timm's ``timm:NAME``,
  ``hf-hub:REPO`` and ``local-dir:DIR``; a new ``num_classes`` gives a new head. ``alternet evaluate`` scores
  any of them.
- :func:`load_pretrained`: the same weights into an existing model (``model.pretrained=SOURCE`` in training).
"""

from __future__ import annotations

from ..lazy import exports
from ..tracking import ArtifactError  # noqa: F401  (re-exported: what load raises for a W&B reference)

__getattr__, __dir__ = exports(
    __name__,
    {
        "LoadReport": "loading",
        "PushError": "push",
        "export": "exporting",
        "import_hdvw": "exporting",
        "load": "loading",
        "load_pretrained": "loading",
        "push_to_hub": "push",
    },
)
