"""MaxxVit hybrids from a layout string: CoAtNet and MaxViT as timm builds them (the family's keys and named models:
docs/training.md, "Hybrid families and any timm model").

A layout becomes timm's own :class:`~timm.models.maxxvit.MaxxVitCfg` with a per-block ``block_type`` in every stage:
``C`` is timm's MBConv (or ConvNeXt, ``conv_block``) block, ``M`` the ``msa_block``: ``T``, CoAtNet's transformer
block (attention over the whole map with a relative position bias, then an MLP; opening a stage, it downsamples
itself by pooled queries and shortcut); ``M``, MaxViT's block (MBConv, then window and grid attention, each with its
MLP); or ``PM``, timm's parallel MaxViT block (window and grid attention side by side). timm's ``MaxxVit(cfg=...)``
builds it, so modules and state-dict keys are timm's. Every stage halves the map (timm's rule).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from timm.layers import to_2tuple
from timm.models import build_model_with_cfg
from timm.models.maxxvit import MaxxVit, MaxxVitCfg, MaxxVitConvCfg, MaxxVitTransformerCfg, checkpoint_filter_fn

from ..architectures.layout import CONV, MSA, per_stage
from ..architectures.rules import TIMM_STEMS, choose_stem
from ..architectures.specs import MaxxVitSpec
from .features import feature_arguments, feature_model
from .guards import InputSizeGuard, LayoutCheck, unstride_stem_conv


def maxxvit_cfg(spec: MaxxVitSpec, build_size: tuple[int, int]) -> MaxxVitCfg:
    """timm's ``MaxxVitCfg`` of a spec: the layout as per-block ``block_type`` letters, stage by stage."""
    stages = spec.stages()
    window = spec.partition(build_size) if any(MSA in s for s in stages) and spec.msa_block != "T" else None
    return MaxxVitCfg(
        embed_dim=tuple(per_stage("widths", spec.widths, len(stages))),
        depths=tuple(len(sequence) for sequence in stages),
        block_type=tuple(tuple("C" if token == CONV else spec.msa_block for token in s) for s in stages),
        stem_width=spec.stem_width,
        head_hidden_size=spec.head_hidden_size,
        conv_cfg=MaxxVitConvCfg(block_type=spec.conv_block),
        transformer_cfg=MaxxVitTransformerCfg(
            dim_head=spec.dim_head, rel_pos_type=spec.rel_pos_type, window_size=window, grid_size=window
        ),
    )


def build_maxxvit(
    variant: str, pretrained: bool, spec: MaxxVitSpec, img_size: int | tuple[int, int] = 224, **kwargs: Any
) -> MaxxVit:
    """timm's ``MaxxVit`` of ``spec`` through timm's builder (pretrained weights, features_only and all).

    The CIFAR stem is timm's stem with its first conv at stride 1: the network is configured for an input twice as
    large, whose stage maps are exactly this one's, so relative position biases and parameters are the same."""
    stem = choose_stem(spec.stem, img_size, TIMM_STEMS)
    spec.check(img_size, stem)
    size = to_2tuple(img_size)
    build_size = tuple(2 * s for s in size) if stem == "cifar" else size
    features, out_indices, feature_cls = feature_arguments(kwargs)
    model = build_model_with_cfg(
        MaxxVit,
        variant,
        pretrained,
        model_cfg=maxxvit_cfg(spec, build_size),
        img_size=build_size,
        pretrained_filter_fn=checkpoint_filter_fn,
        **kwargs,
    )
    if stem == "cifar":
        unstride_stem_conv(model, model.stem.conv1)
        model.img_size = size
    if spec.msa_block == "T" and any(MSA in sequence for sequence in spec.stages()):
        reason = "its attention's relative position biases are sized for the feature maps"
        model.register_forward_pre_hook(InputSizeGuard(size, reason))
    elif any(MSA in sequence for sequence in spec.stages()):  # the window and grid it was built with, at any size
        built = replace(spec, window=spec.window or spec.partition(build_size)[0])
        model.register_forward_pre_hook(LayoutCheck(built, stem))
    # wrapped here, not by timm's builder, so that the maps' reductions are the unstrided stem's
    return feature_model(model, out_indices, feature_cls) if features else model
