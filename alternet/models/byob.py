"""ByobNet hybrids from a layout string: BoTNet, HaloNet and LambdaNet as timm builds them.

A layout (``C``/``M`` per block, ``|`` per stage) becomes timm's own :class:`~timm.models.byobnet.ByoModelCfg`:
``C`` is a ResNet bottleneck (``ByoBlockCfg(type='bottle')``), ``M`` a ``ByoBlockCfg(type='self_attn')``, the
same bottleneck with its 3x3 conv replaced by the attention layer ``self_attn_layer``:

* ``bottleneck``: BoTNet's global multi-head attention with relative position logits, over a fixed feature map;
* ``halo``: HaloNet's attention within ``block_size`` blocks and a ``halo_size`` border around them;
* ``lambda``: LambdaNet's lambda layer (a linear content summary plus a local ``lambda_r`` position context).

timm's ``ByobNet(cfg=...)`` builds it, so its module tree and state-dict keys are timm's: the specs of timm's named
models (``zoo.TIMM_TWINS``) rebuild them exactly, and timm's weights for them load unchanged. An ``M`` may open a
stage: the attention block handles the stride itself (strided queries, or pooling after the attention).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from timm.layers import make_divisible, to_2tuple
from timm.models import build_model_with_cfg
from timm.models.byobnet import ByoBlockCfg, ByobNet, ByoModelCfg, create_byob_stem
from torch import nn

from ..errors import one_of
from .backbone import choose_stem
from .guards import InputSizeGuard, unstride_stem_conv
from .layout import CONV, MSA, LayoutError, parse_layout, per_stage, stage_sizes
from .spec import ModelSpec

SELF_ATTN_LAYERS = ("bottleneck", "halo", "lambda")
FIXED_SIZE_REASON = {
    "bottleneck": "BoTNet's relative position logits span the whole feature map",
    "lambda": "lambda_r=0 gives relative position embeddings over the whole feature map",
}


@dataclass(frozen=True)
class ByobSpec(ModelSpec):
    """A ByobNet hybrid: the layout and the family's knobs (timm's names where timm has one)."""

    model_class: ClassVar[type[nn.Module]] = ByobNet
    first_conv: ClassVar[str] = "stem.conv"  # the CIFAR stem's conv (timm's tiered stem: stem.conv1.conv)
    classifier: ClassVar[str] = "head.fc"

    layout: str  # C = ResNet bottleneck, M = the same with self_attn_layer in place of its 3x3 conv
    widths: tuple[int, ...] = (256, 512, 1024, 2048)  # output channels per stage (timm's ByoBlockCfg.c)
    bottle_ratio: float = 0.25  # a block's inner (attention) width: bottle_ratio * its output width
    self_attn_layer: str = "bottleneck"  # bottleneck (BoTNet) | halo (HaloNet) | lambda (LambdaNet)
    heads: int | tuple[int, ...] = 4  # attention heads, per stage
    dim_head: int | None = None  # query/key channels per head; None: the layer's own default
    block_size: int | tuple[int, ...] = 8  # halo: query block size, per stage (must divide the block's map)
    halo_size: int | tuple[int, ...] = 3  # halo: the border around a block that its keys also cover, per stage
    lambda_r: int = 9  # lambda: local position context (odd); 0: relative position embeddings (fixed size)
    act_layer: str = "relu"
    stem: str = "auto"  # auto | cifar (one 3x3 stride-1 conv) | imagenet (stem_type, stem_pool); auto: from 128 px
    stem_chs: int = 64
    stem_type: str = "tiered"  # the ImageNet stem (timm's ByoModelCfg.stem_type)
    stem_pool: str = "maxpool"

    def stages(self) -> list[str]:
        return parse_layout(self.layout)

    def msa_heads(self) -> list[int]:
        """Heads per stage, for the build-up rules."""
        return per_stage("heads", self.heads, len(self.stages()))

    def check(self, img_size: int | tuple[int, int], stem: str | None = None) -> None:
        """The family's hard constraints at ``img_size``, each in one line (:class:`LayoutError`), before anything is
        built; ``stem``: the stem chosen for it (``self.stem`` resolved)."""
        stem = stem or choose_stem(self.stem, img_size)
        one_of("model.self_attn_layer", self.self_attn_layer, SELF_ATTN_LAYERS)  # its one check (the config's too)
        stages = self.stages()
        n = len(stages)
        widths = per_stage("widths", self.widths, n)
        heads = per_stage("heads", self.heads, n)
        if self.self_attn_layer == "lambda" and self.lambda_r and (self.lambda_r < 0 or self.lambda_r % 2 == 0):
            raise LayoutError(
                f"lambda_r={self.lambda_r}: the lambda layer's position context is a convolution that keeps the map's "
                "size only with an odd radius; use an odd lambda_r (timm's: 9), or 0 for relative position embeddings"
            )
        sizes = stage_sizes(n, img_size, stem_reduction(self, stem), _strides(n))
        for index, sequence in enumerate(stages):
            label = f"stage {index + 1} ({sequence})"
            if MSA not in sequence:
                continue
            inner = make_divisible(widths[index] * self.bottle_ratio)
            if heads[index] is None or heads[index] < 1 or inner % heads[index]:
                raise LayoutError(
                    f"{label}: the attention width {inner} (bottle_ratio {self.bottle_ratio} x width {widths[index]}) "
                    f"is not divisible by heads={heads[index]}; change heads or widths"
                )
            if self.self_attn_layer == "halo":
                _check_halo(label, self, index, sequence, sizes[index])


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


def _strides(num_stages: int) -> list[int]:
    return [1] + [2] * (num_stages - 1)


def byob_cfg(spec: ByobSpec, stem: str) -> ByoModelCfg:
    """timm's ``ByoModelCfg`` of a spec: one ``ByoBlockCfg`` per block, stage by stage."""
    stages = spec.stages()
    widths = per_stage("widths", spec.widths, len(stages))
    blocks = []
    for index, (sequence, stride) in enumerate(zip(stages, _strides(len(stages)))):
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


def stem_reduction(spec: ByobSpec, stem: str) -> int:
    """How much the stem downsamples: 1 for the CIFAR stem, else what timm's stem builder makes of the spec."""
    if stem == "cifar":
        return 1
    with torch.device("meta"):
        _, info = create_byob_stem(3, spec.stem_chs, spec.stem_type, spec.stem_pool)
    return int(info[-1]["reduction"])


def _check_halo(
    label: str, spec: ByobSpec, index: int, sequence: str, sizes: tuple[tuple[int, int], tuple[int, int]]
) -> None:
    """Halo attention cuts the map each M block sees (a stage's first block: the stage's input) into blocks."""
    block = per_stage("block_size", spec.block_size, len(spec.stages()))[index]
    seen = {sizes[0] if position == 0 else sizes[1] for position, token in enumerate(sequence) if token == MSA}
    for height, width in sorted(seen):
        if block < 1 or height % block or width % block:
            divisors = [d for d in range(1, min(height, width) + 1) if height % d == 0 and width % d == 0]
            raise LayoutError(
                f"{label}: halo block_size {block} does not divide the {height}x{width} feature map its attention "
                f"sees; set model.block_size to one of {divisors} (per stage: a list)"
            )


def build_byob(
    variant: str, pretrained: bool, spec: ByobSpec, img_size: int | tuple[int, int] = 224, **kwargs: Any
) -> ByobNet:
    """timm's ``ByobNet`` of ``spec`` through timm's builder (pretrained weights, features_only and all).

    The CIFAR stem is timm's 3x3 conv stem with its stride set to 1: the network is configured for an input twice
    as large, whose stage maps are exactly this one's, so relative positions and parameters are the same."""
    stem = choose_stem(spec.stem, img_size)
    spec.check(img_size, stem)
    size = to_2tuple(img_size)
    build_size = tuple(2 * s for s in size) if stem == "cifar" else size
    model = build_model_with_cfg(
        ByobNet,
        variant,
        pretrained,
        model_cfg=byob_cfg(spec, stem),
        img_size=build_size,
        feature_cfg=dict(flatten_sequential=True),
        **kwargs,
    )
    if stem == "cifar":
        unstride_stem_conv(model, model.stem.conv)
    reason = fixed_size_reason(spec)
    if reason is not None:
        model.register_forward_pre_hook(InputSizeGuard(size, reason))
    return model
