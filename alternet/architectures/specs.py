"""Each model family's spec: a frozen dataclass of its constructor's keywords, with the family's hard constraints:
``check_config`` holds the rules of the keys a config may set, which the section runs as it is made; a hybrid
family's ``check`` holds the rules that need the input size, which the run's checks call before anything is built.
How a family is declared once and what is derived from its spec: docs/development.md, "Adding a model family".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, TypeVar

from ..errors import one_of
from ..typed import integer
from .layout import (
    MSA,
    LayoutError,
    alternate_layout,
    common_divisors,
    parse_layout,
    per_stage,
    resolve_stages,
    stage_sizes,
)
from .rules import (
    CONV_BLOCKS,
    DEFAULT_WINDOW,
    MSA_BLOCKS,
    SELF_ATTN_LAYERS,
    STEM_REDUCTION,
    TIMM_STEMS,
    check_attention,
    check_block,
    check_stem,
    check_timm_stem,
    choose_stem,
)


class ModelSpec:
    """A frozen dataclass of constructor keywords for one named model."""

    first_conv: ClassVar[str]  # timm's pretrained_cfg: the input layer and the classifier
    classifier: ClassVar[str]
    config_only: ClassVar[tuple[str, ...]] = ("img_size",)  # fields a config does not set (the data's image size)

    def kwargs(self) -> dict[str, Any]:
        """The spec as constructor keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def check_config(cls, values: Any) -> None:
        """The rules of the keys a config sets (``values``: the section; a null key is the spec's value)."""

    def check(self, img_size: int | tuple[int, int]) -> None:
        """The family's hard constraints at ``img_size``, each in one line (:class:`LayoutError`), before anything is
        built (none here: a family without any)."""


def _checked(values: Any, **checks: Any) -> None:
    """Each set key through its one check (``check_block(value, key)``)."""
    for key, check in checks.items():
        if getattr(values, key) is not None:
            check(getattr(values, key), key)


@dataclass(frozen=True)
class AlterNetSpec(ModelSpec):
    """An AlterNet or pre-activation ResNet (an AlterNet without MSAs): the :class:`~alternet.models.AlterNet`
    keywords."""

    first_conv: ClassVar[str] = "stem.conv"
    classifier: ClassVar[str] = "head.fc"

    layout: str  # stages separated by |; C = Conv block, M = MSA block
    block: str  # basic | bottleneck
    widths: tuple[int, ...] = (64, 128, 256, 512)
    heads: tuple[int, ...] = (3, 6, 12, 24)  # per stage; more heads in later stages
    head_dim: int = 64
    window: int | None = None  # attention window; None: 4 for the CIFAR stem, 7 for the ImageNet stem
    attention: str = "window"  # window | global | focused_linear | position_only
    bias_per_head: bool = False  # one relative position bias table per head (reference: shared)
    fused_attn: bool | None = None  # None: timm's global switch (set_fused_attn); False forces the math path
    qkv_bias: bool | None = None  # None: the attention kind's default (none for window/global, FLatten's for linear)
    stem: str = "auto"  # auto | cifar | patch2 | imagenet (auto: ImageNet stem from 128 px)

    @classmethod
    def alternating(cls, depths: tuple[int, ...], msas: tuple[int, ...], block: str, **extra: Any) -> AlterNetSpec:
        """Blocks per stage and MSAs per stage, laid out by the AlterNet build-up rule."""
        return cls(layout=alternate_layout(depths, msas), block=block, **extra)

    @classmethod
    def check_config(cls, values: Any) -> None:
        _checked(values, block=check_block, stem=check_stem)
        built = values.built()
        check_attention(built["attention"], "model.attention", bool(built.get("bias_per_head")))
        values.require("head_dim", integer(1), "must be an integer >= 1")
        values.require("window", integer(1), "must be an integer >= 1 (or null: the stem's)")

    def check(self, img_size: int | tuple[int, int]) -> None:
        """The layout against the widths, heads and windows at ``img_size``, as the constructor checks it."""
        stem = choose_stem(self.stem, img_size)
        resolve_stages(
            self.layout,
            self.widths,
            self.heads,
            head_dim=self.head_dim,
            window=self.window,
            default_window=DEFAULT_WINDOW[stem],
            attention=self.attention,
            img_size=img_size,
            stem_reduction=STEM_REDUCTION[stem],
        )


@dataclass(frozen=True)
class ResNetSpec(ModelSpec):
    """The paper's post-activation ResNet: timm's ``ResNet`` with HDVW's stems."""

    first_conv: ClassVar[str] = "conv1"
    classifier: ClassVar[str] = "fc"

    layers: tuple[int, ...]  # blocks per stage
    block: str = "bottleneck"  # basic | bottleneck
    stem: str = "auto"  # auto | cifar | imagenet (auto: ImageNet stem from 128 px)
    img_size: int = 32

    @classmethod
    def check_config(cls, values: Any) -> None:
        _checked(values, block=check_block, stem=check_timm_stem)


@dataclass(frozen=True)
class ViTSpec(ModelSpec):
    """A timm ``VisionTransformer`` (``local_kernel``: attention within a square neighbourhood, the locality
    constraint of the paper's Fig. 9 contrast; null: global)."""

    first_conv: ClassVar[str] = "patch_embed.proj"
    classifier: ClassVar[str] = "head"

    patch_size: int
    embed_dim: int
    depth: int
    num_heads: int
    qkv_bias: bool = True
    local_kernel: int | None = None
    class_token: bool = True
    global_pool: str = "token"
    img_size: int = 32

    @classmethod
    def check_config(cls, values: Any) -> None:
        values.require(
            "local_kernel", integer(2), "must be a window side >= 2 (1 is a softmax over one key), or null: global"
        )
        values.one_of("global_pool", ("avg", "token"))


@dataclass(frozen=True)
class PiTSpec(ModelSpec):
    """A timm ``PoolingVisionTransformer``."""

    first_conv: ClassVar[str] = "patch_embed.conv"
    classifier: ClassVar[str] = "head"

    patch_size: int
    stride: int
    base_dims: tuple[int, ...]
    depth: tuple[int, ...]
    heads: tuple[int, ...]
    mlp_ratio: float
    img_size: int = 32


@dataclass(frozen=True)
class SwinSpec(ModelSpec):
    """A timm ``SwinTransformer``."""

    first_conv: ClassVar[str] = "patch_embed.proj"
    classifier: ClassVar[str] = "head.fc"

    patch_size: int
    window_size: int
    embed_dim: int
    depths: tuple[int, ...]
    num_heads: tuple[int, ...]
    qkv_bias: bool = True
    img_size: int = 32


def _divisible(value: float, divisor: int = 8) -> int:
    """The channel count timm's ``make_divisible`` makes of ``value`` (a test holds the two equal)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


@dataclass(frozen=True)
class ByobSpec(ModelSpec):
    """A ByobNet hybrid (BoTNet, HaloNet, LambdaNet): the layout and the family's knobs (timm's names where timm has
    one). ``C`` is a ResNet bottleneck, ``M`` the same with ``self_attn_layer`` in place of its 3x3 conv."""

    first_conv: ClassVar[str] = "stem.conv"  # the CIFAR stem's conv (timm's tiered stem: stem.conv1.conv)
    classifier: ClassVar[str] = "head.fc"

    layout: str
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

    def strides(self) -> list[int]:
        return [1] + [2] * (len(self.stages()) - 1)

    def stem_reduction(self, stem: str) -> int:
        """How much the stem downsamples: 1 for the CIFAR stem; as timm's stem builder (``create_byob_stem``) makes
        it, 4 for its stacked stems (quad, tiered, deep: stride 4 with or without a pool), 2 for its single-block
        ones (rep, one), else 2 and twice that with a pool."""
        if stem == "cifar":
            return 1
        if any(kind in self.stem_type for kind in ("quad", "tiered", "deep")):
            return 4
        if any(kind in self.stem_type for kind in ("rep", "one")):
            return 2
        return 4 if self.stem_pool else 2

    @classmethod
    def check_config(cls, values: Any) -> None:
        _checked(values, stem=check_timm_stem)
        values.one_of("self_attn_layer", SELF_ATTN_LAYERS)

    def check(self, img_size: int | tuple[int, int], stem: str | None = None) -> None:
        """The family's hard constraints at ``img_size``, each in one line (:class:`LayoutError`), before anything is
        built; ``stem``: the stem chosen for it (``self.stem`` resolved)."""
        stem = stem or choose_stem(self.stem, img_size, TIMM_STEMS)
        one_of("model.self_attn_layer", self.self_attn_layer, SELF_ATTN_LAYERS)
        stages = self.stages()
        n = len(stages)
        widths = per_stage("widths", self.widths, n)
        heads = per_stage("heads", self.heads, n)
        if self.self_attn_layer == "lambda" and self.lambda_r and (self.lambda_r < 0 or self.lambda_r % 2 == 0):
            raise LayoutError(
                f"lambda_r={self.lambda_r}: the lambda layer's position context is a convolution that keeps the map's "
                "size only with an odd radius; use an odd lambda_r (timm's: 9), or 0 for relative position embeddings"
            )
        sizes = stage_sizes(n, img_size, self.stem_reduction(stem), self.strides())
        for index, sequence in enumerate(stages):
            label = f"stage {index + 1} ({sequence})"
            if MSA not in sequence:
                continue
            inner = _divisible(widths[index] * self.bottle_ratio)
            if heads[index] is None or heads[index] < 1 or inner % heads[index]:
                raise LayoutError(
                    f"{label}: the attention width {inner} (bottle_ratio {self.bottle_ratio} x width {widths[index]}) "
                    f"is not divisible by heads={heads[index]}; change heads or widths"
                )
            if self.self_attn_layer == "halo":
                self._check_halo(label, index, sequence, sizes[index])

    def _check_halo(self, label: str, index: int, sequence: str, sizes: tuple[tuple[int, int], ...]) -> None:
        """Halo attention cuts the map each M block sees (a stage's first block: the stage's input) into blocks."""
        block = per_stage("block_size", self.block_size, len(self.stages()))[index]
        seen = {sizes[0] if position == 0 else sizes[1] for position, token in enumerate(sequence) if token == MSA}
        for height, width in sorted(seen):
            if block < 1 or height % block or width % block:
                raise LayoutError(
                    f"{label}: halo block_size {block} does not divide the {height}x{width} feature map its attention "
                    f"sees; set model.block_size to one of {common_divisors(height, width)} (per stage: a list)"
                )


PARTITION_RATIO = 32  # timm's default MaxViT window: input size / 32 (the last stage's map with timm's stem)


@dataclass(frozen=True)
class MaxxVitSpec(ModelSpec):
    """A MaxxVit hybrid (CoAtNet, MaxViT): the layout and the family's knobs (timm's names where timm has one).
    ``C`` is ``conv_block``, ``M`` the ``msa_block``. Every stage halves the map (timm's rule)."""

    first_conv: ClassVar[str] = "stem.conv1"
    classifier: ClassVar[str] = "head.fc"

    layout: str
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

    def partition(self, build_size: tuple[int, int]) -> tuple[int, int]:
        """The MaxViT window and grid at the size the model is built for."""
        if self.window is not None:
            return self.window, self.window
        return build_size[0] // PARTITION_RATIO, build_size[1] // PARTITION_RATIO

    @classmethod
    def check_config(cls, values: Any) -> None:
        _checked(values, stem=check_timm_stem)
        values.one_of("msa_block", MSA_BLOCKS)
        values.one_of("conv_block", CONV_BLOCKS)

    def check(self, img_size: int | tuple[int, int], stem: str | None = None) -> None:
        """The family's hard constraints at ``img_size``, each in one line (:class:`LayoutError`), before anything is
        built; ``stem``: the stem chosen for it (``self.stem`` resolved)."""
        stem = stem or choose_stem(self.stem, img_size, TIMM_STEMS)
        one_of("model.msa_block", self.msa_block, MSA_BLOCKS)
        one_of("model.conv_block", self.conv_block, CONV_BLOCKS)
        stages = self.stages()
        widths = per_stage("widths", self.widths, len(stages))
        reduction = 1 if stem == "cifar" else 2
        sizes = stage_sizes(len(stages), img_size, reduction, [2] * len(stages))
        build_size = tuple(s * (2 if stem == "cifar" else 1) for s in _pair(img_size))
        for index, sequence in enumerate(stages):
            label = f"stage {index + 1} ({sequence})"
            if MSA not in sequence:
                continue
            if self.dim_head < 1 or widths[index] % self.dim_head:
                raise LayoutError(
                    f"{label}: width {widths[index]} is not divisible by dim_head={self.dim_head} (heads = width / "
                    "dim_head); change widths or dim_head"
                )
            if self.msa_block == "T":
                continue
            window, (height, width) = self.partition(build_size), sizes[index][1]
            if min(window) < 1 or height % window[0] or width % window[1]:
                automatic = f"timm's automatic window (input size / {PARTITION_RATIO})"
                source = automatic if self.window is None else "model.window"
                raise LayoutError(
                    f"{label}: the MaxViT window and grid {window[0]} ({source}) must divide the stage's "
                    f"{height}x{width} feature map; set model.window to one of {common_divisors(height, width)}"
                )


FAMILY_SPECS: tuple[type[ModelSpec], ...] = (
    AlterNetSpec,
    ResNetSpec,
    ViTSpec,
    PiTSpec,
    SwinSpec,
    ByobSpec,
    MaxxVitSpec,
)


Spec = TypeVar("Spec", bound=ModelSpec)


def spec_with(spec: Spec, kwargs: dict[str, Any]) -> Spec:
    """``spec`` with the keywords that are its fields taken out of ``kwargs`` (a hybrid's others go to timm's
    class)."""
    names = {f.name for f in fields(spec)}
    return replace(spec, **{key: kwargs.pop(key) for key in list(kwargs) if key in names})
