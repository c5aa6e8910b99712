"""``features_only``: timm's feature wrapper of a built classifier, one map per stage."""

from __future__ import annotations

from timm.models import ByobNet, FeatureListNet
from timm.models._builder import pretrained_cfg_for_features
from timm.models._features import FeatureGetterNet
from torch import nn

from .backbone import AlterNet


def feature_model(model: nn.Module, out_indices: int | tuple[int, ...] | None = None) -> nn.Module:
    """``model``'s stage maps (``out_indices``: their indices, or a count of the last ones; default every one):
    AlterNet's and ByobNet's taken by module name (timm's ``FeatureListNet``, as timm's builder wraps them), any
    other model's through its ``forward_intermediates`` (timm's ``FeatureGetterNet``)."""
    maps = len(model.feature_info)
    if out_indices is None:
        out_indices = maps
    if isinstance(out_indices, int):
        out_indices = tuple(range(maps - out_indices, maps))
    if isinstance(model, (AlterNet, ByobNet)):
        features = FeatureListNet(model, out_indices=tuple(out_indices), flatten_sequential=True)
    else:
        features = FeatureGetterNet(model, out_indices=tuple(out_indices))
    features.pretrained_cfg = features.default_cfg = pretrained_cfg_for_features(model.pretrained_cfg)
    return features
