"""``features_only``: timm's feature wrapper of a built classifier, one map per stage."""

from __future__ import annotations

from typing import Any

from timm.models import ByobNet, FeatureListNet, MaxxVit
from timm.models._builder import pretrained_cfg_for_features
from timm.models._features import FeatureGetterNet
from torch import nn

from ..errors import ConfigValueError, is_integer
from .backbone import AlterNet
from .guards import InputSizeGuard, LayoutCheck, built_size_check

FEATURE_CLASSES = {"list": FeatureListNet, "getter": FeatureGetterNet}  # timm's feature_cls names these take


def feature_model(
    model: nn.Module, out_indices: int | tuple[int, ...] | None = None, feature_cls: str | None = None
) -> nn.Module:
    """``model``'s stage maps (``out_indices``: their indices, or a count of the last ones; default every one):
    AlterNet's, ByobNet's and MaxxVit's taken by module name (timm's ``FeatureListNet``, as timm's builder wraps
    them), any other model's through its ``forward_intermediates`` (timm's ``FeatureGetterNet``); ``feature_cls``
    (``list`` or ``getter``) chooses instead, with the same maps (an AlterNet's last after its final norm either
    way). The model's input-size check holds for the wrapper too."""
    if feature_cls is not None and feature_cls not in FEATURE_CLASSES:
        raise ConfigValueError(f"feature_cls={feature_cls!r} is not one this model takes: {', '.join(FEATURE_CLASSES)}")
    maps = len(model.feature_info)
    indices = maps if out_indices is None else out_indices
    listed = isinstance(indices, list | tuple) and indices and all(is_integer(i, -maps) and i < maps for i in indices)
    if not (is_integer(indices, 1) and indices <= maps) and not listed:
        raise ConfigValueError(
            f"out_indices={out_indices!r} must be feature-map indices in [{-maps}, {maps - 1}] (this model has "
            f"{maps}), e.g. out_indices=({maps - 2}, {maps - 1}), or a count of the last ones up to {maps}"
        )
    out_indices = tuple(range(maps - indices, maps)) if isinstance(indices, int) else tuple(indices)
    by_name = feature_cls == "list" or (feature_cls is None and isinstance(model, (AlterNet, ByobNet, MaxxVit)))
    if by_name:
        features = FeatureListNet(model, out_indices=tuple(out_indices), flatten_sequential=True)
    else:
        norm = isinstance(model, AlterNet)  # its last map after the final norm, as its feature_info names it
        features = FeatureGetterNet(model, out_indices=tuple(out_indices), norm=norm)
    for hook in list(model._forward_pre_hooks.values()):  # the wrapper never calls the model's forward
        if hook is built_size_check:
            features.input_size_built = model.input_size_built
        if isinstance(hook, InputSizeGuard | LayoutCheck) or hook is built_size_check:
            features.register_forward_pre_hook(hook)
    features.pretrained_cfg = features.default_cfg = pretrained_cfg_for_features(model.pretrained_cfg)
    return features


def feature_arguments(kwargs: dict[str, Any]) -> tuple[bool, Any, Any]:
    """``features_only``, ``out_indices`` and ``feature_cls`` taken out of a builder's keywords; the last two
    without the first are refused (they were ignored: a whole classifier came back)."""
    features = bool(kwargs.pop("features_only", False))
    out_indices, feature_cls = kwargs.pop("out_indices", None), kwargs.pop("feature_cls", None)
    check_feature_arguments(features, out_indices=out_indices, feature_cls=feature_cls)
    return features, out_indices, feature_cls


def check_feature_arguments(features_only: bool, **chosen: Any) -> None:
    """``out_indices=`` or ``feature_cls=`` choose among feature maps: refused in one line without
    ``features_only=True``."""
    given = [f"{key}={value!r}" for key, value in chosen.items() if value is not None]
    if given and not features_only:
        verb = "select" if len(given) > 1 else "selects"
        raise ConfigValueError(f"{' and '.join(given)} {verb} feature maps: add features_only=True")
