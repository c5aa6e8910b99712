"""MaxxVit hybrids from a layout string: CoAtNet and MaxViT as timm builds them.

A layout (``C``/``M`` per block, ``|`` per stage) becomes timm's own :class:`~timm.models.maxxvit.MaxxVitCfg` with
a per-block ``block_type`` in every stage: ``C`` is timm's MBConv (or ConvNeXt, ``conv_block``) block, ``M`` the
``msa_block``:

* ``T``: CoAtNet's transformer block (attention over the whole map with a relative position bias, then an MLP);
  opening a stage it downsamples itself (pooled queries and shortcut);
* ``M``: MaxViT's block (MBConv, then window and grid attention, each with its MLP);
* ``PM``: timm's parallel MaxViT block (window and grid attention side by side).

timm's ``MaxxVit(cfg=...)`` builds it, so modules and state-dict keys are timm's: ``zoo.TIMM_TWINS`` rebuilds
``coatnet_0_224`` exactly. Every stage halves the map (timm's rule), so each stage's input size must be even.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from timm.layers import to_2tuple
from timm.models import build_model_with_cfg
from timm.models.maxxvit import MaxxVit, MaxxVitCfg, MaxxVitConvCfg, MaxxVitTransformerCfg, checkpoint_filter_fn
from torch import nn

from ..errors import one_of
from .backbone import choose_stem
from .guards import InputSizeGuard, unstride_stem_conv
from .layout import CONV, MSA, LayoutError, parse_layout, per_stage, stage_sizes
from .spec import ModelSpec

MSA_BLOCKS = ("T", "M", "PM")  # timm's block_type letters: CoAtNet transformer, MaxViT, parallel MaxViT
CONV_BLOCKS = ("mbconv", "convnext")
PARTITION_RATIO = 32  # timm's default: window = input size / 32 (the last stage's map with timm's stem)
STAGE_STRIDE = 2


@dataclass(frozen=True)
class MaxxVitSpec(ModelSpec):
    """A MaxxVit hybrid: the layout and the family's knobs (timm's names where timm has one)."""

    model_class: ClassVar[type[nn.Module]] = MaxxVit
    first_conv: ClassVar[str] = "stem.conv1"
    classifier: ClassVar[str] = "head.fc"

    layout: str  # C = conv_block, M = msa_block
    widths: tuple[int, ...] = (96, 192, 384, 768)  # channels per stage (timm's embed_dim)
    msa_block: str = "T"  # T (CoAtNet transformer) | M (MaxViT) | PM (parallel MaxViT)
    conv_block: str = "mbconv"  # mbconv | convnext
    dim_head: int = 32  # channels per head: a stage's heads are its width / dim_head
    window: int | None = None  # MaxViT window and grid partition; None: timm's, the input size / 32
    stem: str = "auto"  # auto | cifar (the first conv at stride 1) | imagenet (timm's stride-2 stem); auto: 128 px
    stem_width: int | tuple[int, int] = 64
    head_hidden_size: int | None = None  # a pre-logits MLP head of this width (timm's CoAtNet-0: 768)
    rel_pos_type: str = "bias"  # bias | bias_tf | mlp (timm's relative position kinds)

    def stages(self) -> list[str]:
        return parse_layout(self.layout)

    def msa_heads(self) -> list[int]:
        """Heads per stage (width / dim_head), for the build-up rules."""
        return [width // self.dim_head for width in per_stage("widths", self.widths, len(self.stages()))]

    def check(self, img_size: int | tuple[int, int], stem: str | None = None) -> None:
        """The family's hard constraints at ``img_size``, each in one line (:class:`LayoutError`), before anything is
        built; ``stem``: the stem chosen for it (``self.stem`` resolved)."""
        stem = stem or choose_stem(self.stem, img_size)
        one_of("model.msa_block", self.msa_block, MSA_BLOCKS)  # their one check (the config's too)
        one_of("model.conv_block", self.conv_block, CONV_BLOCKS)
        stages = self.stages()
        widths = per_stage("widths", self.widths, len(stages))
        reduction = 1 if stem == "cifar" else 2
        sizes = stage_sizes(len(stages), img_size, reduction, [STAGE_STRIDE] * len(stages))
        build_size = tuple(s * (2 if stem == "cifar" else 1) for s in to_2tuple(img_size))
        for index, sequence in enumerate(stages):
            label = f"stage {index + 1} ({sequence})"
            if MSA not in sequence:
                continue
            if self.dim_head < 1 or widths[index] % self.dim_head:
                raise LayoutError(
                    f"{label}: width {widths[index]} is not divisible by dim_head={self.dim_head} (heads = width / "
                    "dim_head); change widths or dim_head"
                )
            if self.msa_block != "T":
                _check_partition(label, _window(self, build_size), sizes[index][1], self.window is None)


def _window(spec: MaxxVitSpec, build_size: tuple[int, int]) -> tuple[int, int]:
    if spec.window is not None:
        return spec.window, spec.window
    return build_size[0] // PARTITION_RATIO, build_size[1] // PARTITION_RATIO


def maxxvit_cfg(spec: MaxxVitSpec, build_size: tuple[int, int]) -> MaxxVitCfg:
    """timm's ``MaxxVitCfg`` of a spec: the layout as per-block ``block_type`` letters, stage by stage."""
    stages = spec.stages()
    window = _window(spec, build_size) if any(MSA in s for s in stages) and spec.msa_block != "T" else None
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


def _check_partition(label: str, window: tuple[int, int], size: tuple[int, int], automatic: bool) -> None:
    height, width = size
    if window[0] < 1 or height % window[0] or width % window[1]:
        divisors = [d for d in range(1, min(height, width) + 1) if height % d == 0 and width % d == 0]
        source = f"timm's automatic window (input size / {PARTITION_RATIO})" if automatic else "model.window"
        raise LayoutError(
            f"{label}: the MaxViT window and grid {window[0]} ({source}) must divide the stage's {height}x{width} "
            f"feature map; set model.window to one of {divisors}"
        )


def build_maxxvit(
    variant: str, pretrained: bool, spec: MaxxVitSpec, img_size: int | tuple[int, int] = 224, **kwargs: Any
) -> MaxxVit:
    """timm's ``MaxxVit`` of ``spec`` through timm's builder (pretrained weights, features_only and all).

    The CIFAR stem is timm's stem with its first conv at stride 1: the network is configured for an input twice as
    large, whose stage maps are exactly this one's, so relative position biases and parameters are the same."""
    stem = choose_stem(spec.stem, img_size)
    spec.check(img_size, stem)
    size = to_2tuple(img_size)
    build_size = tuple(2 * s for s in size) if stem == "cifar" else size
    model = build_model_with_cfg(
        MaxxVit,
        variant,
        pretrained,
        model_cfg=maxxvit_cfg(spec, build_size),
        img_size=build_size,
        feature_cfg=dict(flatten_sequential=True),
        pretrained_filter_fn=checkpoint_filter_fn,
        **kwargs,
    )
    if stem == "cifar":
        unstride_stem_conv(model, model.stem.conv1)
        if isinstance(model, MaxxVit):
            model.img_size = size
    if spec.msa_block == "T" and any(MSA in sequence for sequence in spec.stages()):
        reason = "its attention's relative position biases are sized for the feature maps"
        model.register_forward_pre_hook(InputSizeGuard(size, reason))
    return model
