"""ByobNet hybrids from a layout string: BoTNet, HaloNet and LambdaNet as timm builds them (the family's keys and
named models: docs/training.md, "Hybrid families and any timm model").

A layout becomes timm's own :class:`~timm.models.byobnet.ByoModelCfg`: ``C`` is ``ByoBlockCfg(type='bottle')``, ``M``
a ``ByoBlockCfg(type='self_attn')``, the same bottleneck with its 3x3 conv replaced by the ``self_attn_layer``:
BoTNet's ``bottleneck``, HaloNet's ``halo`` (attention within ``block_size`` blocks and a ``halo_size`` border around
them) or LambdaNet's ``lambda`` (a linear content summary plus a local ``lambda_r`` position context). timm's
``ByobNet(cfg=...)`` builds it, so its module tree and state-dict keys are timm's. An ``M`` may open a stage: the
attention block handles the stride itself (strided queries, or pooling after the attention).
"""

from __future__ import annotations

from typing import Any

from timm.layers import to_2tuple
from timm.models import build_model_with_cfg
from timm.models.byobnet import ByoBlockCfg, ByobNet, ByoModelCfg

from ..architectures.layout import CONV, per_stage
from ..architectures.rules import TIMM_STEMS, choose_stem
from ..architectures.specs import ByobSpec
from .features import feature_arguments, feature_model
from .guards import InputSizeGuard, LayoutCheck, unstride_stem_conv

FIXED_SIZE_REASON = {
    "bottleneck": "BoTNet's relative position logits span the whole feature map",
    "lambda": "lambda_r=0 gives relative position embeddings over the whole feature map",
}


def _attn_kwargs(spec: ByobSpec, stage: int) -> dict[str, Any]:
    """The attention layer's keywords in one stage (a ``None`` dim_head leaves the layer's default)."""
    n = len(spec.stages())
    kwargs: dict[str, Any] = dict(num_heads=per_stage("heads", spec.heads, n)[stage])
    if spec.dim_head is not None:
        kwargs["dim_head"] = spec.dim_head
    if spec.self_attn_layer == "halo":
        kwargs["block_size"] = per_stage("block_size", spec.block_size, n)[stage]
        kwargs["halo_size"] = per_stage("halo_size", spec.halo_size, n)[stage]
    elif spec.self_attn_layer == "lambda":
        kwargs["r"] = spec.lambda_r or None
    return kwargs


def byob_cfg(spec: ByobSpec, stem: str) -> ByoModelCfg:
    """timm's ``ByoModelCfg`` of a spec: one ``ByoBlockCfg`` per block, stage by stage."""
    stages = spec.stages()
    widths = per_stage("widths", spec.widths, len(stages))
    blocks = []
    for index, (sequence, stride) in enumerate(zip(stages, spec.strides())):
        common = dict(d=1, c=widths[index], s=stride, gs=0, br=spec.bottle_ratio)
        blocks.append(
            tuple(
                ByoBlockCfg(type="bottle", **common)
                if token == CONV
                else ByoBlockCfg(
                    type="self_attn",
                    self_attn_layer=spec.self_attn_layer,
                    self_attn_kwargs=_attn_kwargs(spec, index),
                    **common,
                )
                for token in sequence
            )
        )
    cifar = stem == "cifar"
    return ByoModelCfg(
        blocks=tuple(blocks),
        stem_chs=spec.stem_chs,
        stem_type="3x3" if cifar else spec.stem_type,
        stem_pool="" if cifar else spec.stem_pool,
        act_layer=spec.act_layer,
        fixed_input_size=fixed_size_reason(spec) is not None,
        self_attn_layer=spec.self_attn_layer,
    )


def fixed_size_reason(spec: ByobSpec) -> str | None:
    """Why the model only runs at the input size it was built for (``None``: it runs at any suitable size)."""
    if spec.self_attn_layer == "lambda" and spec.lambda_r:
        return None
    return FIXED_SIZE_REASON.get(spec.self_attn_layer)


def build_byob(
    variant: str, pretrained: bool, spec: ByobSpec, img_size: int | tuple[int, int] = 224, **kwargs: Any
) -> ByobNet:
    """timm's ``ByobNet`` of ``spec`` through timm's builder (pretrained weights, features_only and all).

    The CIFAR stem is timm's 3x3 conv stem with its stride set to 1: the network is configured for an input twice
    as large, whose stage maps are exactly this one's, so relative positions and parameters are the same."""
    stem = choose_stem(spec.stem, img_size, TIMM_STEMS)
    spec.check(img_size, stem)
    size = to_2tuple(img_size)
    build_size = tuple(2 * s for s in size) if stem == "cifar" else size
    features, out_indices, feature_cls = feature_arguments(kwargs)
    model = build_model_with_cfg(
        ByobNet, variant, pretrained, model_cfg=byob_cfg(spec, stem), img_size=build_size, **kwargs
    )
    if stem == "cifar":
        unstride_stem_conv(model, model.stem.conv)
    reason = fixed_size_reason(spec)
    if reason is not None:
        model.register_forward_pre_hook(InputSizeGuard(size, reason))
    elif spec.self_attn_layer == "halo":
        model.register_forward_pre_hook(LayoutCheck(spec, stem))
    # wrapped here, not by timm's builder, which counts the maps of four stages
    return feature_model(model, out_indices, feature_cls) if features else model
