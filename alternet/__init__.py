"""alternet: train, evaluate and analyse hybrid Conv + MSA image classifiers (AlterNet and friends).

``import alternet`` is cheap (no torch, no timm) and does nothing else, so that ``alternet --help`` answers at once:
``create_model`` and ``list_models`` load :mod:`alternet.models` on first use. The zoo is registered with timm when
:mod:`alternet.models` is imported (as a timm plugin registers its models): ``import alternet.models`` before
``timm.create_model("alternet_r50")``; ``alternet.create_model``, and a run's ``imports=``, do it themselves.
"""

from .lazy import exports

__version__ = "0.1.0"
__all__ = ["__version__", "create_model", "list_models"]

__getattr__, __dir__ = exports(__name__, {"create_model": "models", "list_models": "models"})
