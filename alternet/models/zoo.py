"""Named models, registered in timm: AlterNets, their pre-activation ResNet twins and comparison models.

This module is the one home of every named architecture: :data:`ARCHITECTURES` (AlterNets and pre-activation
ResNets) and :data:`COMPARISONS` (the paper's post-activation ResNet-50 and ViT, PiT, Swin at CIFAR settings, as
the paper's authors trained them) map each name to a typed spec. After
``import alternet``, ``timm.create_model("alternet_r50", num_classes=100)`` works; every keyword (``layout``,
``heads``, ``window``, ``attention``, ``img_size``...) overrides the spec's value. The same names are the Hydra
options under ``conf/model/``, whose keys are ``null`` (the spec's value) unless a user overrides them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import torch
from timm.models import (
    build_model_with_cfg,
    checkpoint_seq,
    generate_default_cfgs,
    register_model,
    resolve_pretrained_cfg,
)
from timm.models.pit import PoolingVisionTransformer
from timm.models.swin_transformer import SwinTransformer
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from ..dataset_facts import FACTS
from .backbone import AlterNet
from .byob import ByobSpec, build_byob
from .layout import alternate_layout, parse_layout
from .local_attention import localise_attention
from .maxxvit import MaxxVitSpec, build_maxxvit
from .resnet import PostActResNet
from .spec import ModelSpec as _Spec


@dataclass(frozen=True)
class AlterNetSpec(_Spec):
    """An AlterNet or pre-activation ResNet (an AlterNet without MSAs): the :class:`AlterNet` keywords."""

    model_class: ClassVar[type[nn.Module]] = AlterNet
    first_conv: ClassVar[str] = "stem.conv"
    classifier: ClassVar[str] = "head.fc"

    layout: str  # stages separated by |; C = Conv block, M = MSA block
    block: str  # basic | bottleneck
    widths: tuple[int, ...] = (64, 128, 256, 512)
    heads: tuple[int, ...] = (3, 6, 12, 24)  # per stage; more heads in later stages
    head_dim: int = 64
    window: int | None = None  # attention window; None: 4 for the CIFAR stem, 7 for the ImageNet stem
    attention: str = "window"  # window | global | focused_linear
    bias_per_head: bool = False  # one relative position bias table per head (reference: shared)
    fused_attn: bool | None = None  # None: timm's global switch (set_fused_attn); False forces the math path
    qkv_bias: bool | None = None  # None: the attention kind's default (none for window/global, FLatten's for linear)
    stem: str = "auto"  # auto | cifar | imagenet (auto: ImageNet stem from 128 px)

    @classmethod
    def alternating(cls, depths: tuple[int, ...], msas: tuple[int, ...], block: str, **extra: Any) -> AlterNetSpec:
        """Blocks per stage and MSAs per stage, laid out by the AlterNet build-up rule."""
        return cls(layout=alternate_layout(depths, msas), block=block, **extra)


@dataclass(frozen=True)
class ViTSpec(_Spec):
    """A timm :class:`VisionTransformer`."""

    model_class: ClassVar[type[nn.Module]] = VisionTransformer
    first_conv: ClassVar[str] = "patch_embed.proj"
    classifier: ClassVar[str] = "head"

    patch_size: int
    embed_dim: int
    depth: int
    num_heads: int
    qkv_bias: bool = True
    img_size: int = 32


class _CheckpointedBlocks(nn.Sequential):
    """An ``nn.Sequential`` of blocks that can recompute each block in backward (same children, same names)."""

    grad_checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpointing and not torch.jit.is_scripting() and torch.is_grad_enabled():
            return checkpoint_seq(self, x)
        return super().forward(x)


class PiT(PoolingVisionTransformer):
    """timm's PiT with gradient checkpointing, which timm's class refuses; parameter names are unchanged, so
    weights load either way."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        for stage in self.transformers:
            stage.blocks = _CheckpointedBlocks(*stage.blocks)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each transformer block in backward (see :meth:`AlterNet.set_grad_checkpointing`)."""
        for stage in self.transformers:
            stage.blocks.grad_checkpointing = enable


@dataclass(frozen=True)
class PiTSpec(_Spec):
    """A timm :class:`PoolingVisionTransformer` (as :class:`PiT`, which adds gradient checkpointing)."""

    model_class: ClassVar[type[nn.Module]] = PiT
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
class SwinSpec(_Spec):
    """A timm :class:`SwinTransformer`."""

    model_class: ClassVar[type[nn.Module]] = SwinTransformer
    first_conv: ClassVar[str] = "patch_embed.proj"
    classifier: ClassVar[str] = "head.fc"

    patch_size: int
    window_size: int
    embed_dim: int
    depths: tuple[int, ...]
    num_heads: tuple[int, ...]
    qkv_bias: bool = True
    img_size: int = 32


@dataclass(frozen=True)
class ResNetSpec(_Spec):
    """A post-activation ResNet: timm's :class:`ResNet` with HDVW's stems (:class:`PostActResNet`)."""

    model_class: ClassVar[type[nn.Module]] = PostActResNet
    first_conv: ClassVar[str] = "conv1"
    classifier: ClassVar[str] = "fc"

    layers: tuple[int, ...]  # blocks per stage
    block: str = "bottleneck"  # basic | bottleneck
    stem: str = "auto"  # auto | cifar | imagenet (auto: ImageNet stem from 128 px)
    img_size: int = 32


_alternating = AlterNetSpec.alternating
_TINY = dict(widths=(32, 64, 128), heads=(1, 2, 4), head_dim=32)
# the laptop scale (experiment=cifar100_speedrun, the paper presets on a CPU): the tiny depths at 1.5x the widths
# behind a 2x2 stride-2 stem, so every map has half the CIFAR stem's side and a step costs about what the tiny one
# costs at its full side, with 2.2x the parameters
_LAPTOP = dict(widths=(48, 96, 192), heads=(2, 3, 6), head_dim=32, stem="patch2")

ARCHITECTURES: dict[str, AlterNetSpec] = {
    # AlterNets (HDVW models/alternet.py); alternet_r50 uses the paper's CIFAR-100 figure layout.
    "alternet_r18": _alternating((2, 2, 2, 2), (0, 1, 1, 1), "basic"),
    "alternet_r34": _alternating((3, 4, 6, 4), (0, 1, 3, 2), "basic"),
    "alternet_r50": _alternating((3, 4, 6, 4), (0, 1, 1, 2), "bottleneck"),
    "alternet_r50_hdvw": _alternating((3, 4, 6, 4), (0, 1, 3, 2), "bottleneck"),
    "alternet_r101": _alternating((3, 4, 23, 4), (0, 1, 3, 2), "bottleneck"),
    "alternet_r152": _alternating((3, 8, 36, 4), (0, 1, 3, 2), "bottleneck"),
    # A CPU-friendly AlterNet for the embedded default and tests, and its Conv-only twin.
    "alternet_tiny": _alternating((1, 2, 2), (0, 1, 1), "basic", **_TINY),
    "preresnet_tiny": _alternating((1, 2, 2), (0, 0, 0), "basic", **_TINY),
    # The laptop-scale AlterNet (one MSA, ending the last stage) and its Conv-only twin, the twin's last stage at 144
    # channels so that both have the same parameters (1.05M vs 1.06M) and multiply-adds (40.8M vs 41.0M per image):
    # at 192 channels a 3x3 Conv block outweighs the MSA by 45%, and a comparison would measure size.
    "alternet_laptop": _alternating((1, 2, 2), (0, 0, 1), "basic", **_LAPTOP),
    "preresnet_laptop": _alternating((1, 2, 2), (0, 0, 0), "basic", **{**_LAPTOP, "widths": (48, 96, 144)}),
    # Pre-activation ResNet baselines (no MSA, classic depths).
    "preresnet18": _alternating((2, 2, 2, 2), (0, 0, 0, 0), "basic"),
    "preresnet34": _alternating((3, 4, 6, 3), (0, 0, 0, 0), "basic"),
    "preresnet50": _alternating((3, 4, 6, 3), (0, 0, 0, 0), "bottleneck"),
    "preresnet101": _alternating((3, 4, 23, 3), (0, 0, 0, 0), "bottleneck"),
    "preresnet152": _alternating((3, 8, 36, 3), (0, 0, 0, 0), "bottleneck"),
}

# Comparison models for the paper's tables, at CIFAR settings (timm classes), each the model the paper's authors
# trained and released for CIFAR-100 (HDVW README: ViT-Ti and Swin-Ti without q/k/v bias, timm's PiT-Ti), so their
# checkpoints load (`alternet import-hdvw`).
COMPARISONS: dict[str, ResNetSpec | ViTSpec | PiTSpec | SwinSpec] = {
    "resnet50_hdvw": ResNetSpec(layers=(3, 4, 6, 3)),
    "vit_ti_cifar": ViTSpec(patch_size=2, embed_dim=192, depth=12, num_heads=3, qkv_bias=False),
    "pit_ti_cifar": PiTSpec(
        patch_size=2, stride=1, base_dims=(32, 32, 32), depth=(2, 6, 4), heads=(2, 4, 8), mlp_ratio=4
    ),
    "swin_ti_cifar": SwinSpec(
        patch_size=1, window_size=4, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24), qkv_bias=False
    ),
    # the same families shrunk for CPU experiments (conf/experiment/paper/): a few minutes per CIFAR-100 run
    "vit_mini_cifar": ViTSpec(patch_size=4, embed_dim=96, depth=4, num_heads=3),
    "pit_mini_cifar": PiTSpec(
        patch_size=4, stride=4, base_dims=(32, 32, 32), depth=(1, 2, 1), heads=(2, 4, 8), mlp_ratio=4
    ),
    "swin_mini_cifar": SwinSpec(
        patch_size=2, window_size=4, embed_dim=48, depths=(1, 1, 2, 1), num_heads=(2, 4, 8, 16)
    ),
}

# Hybrids of timm's families at CIFAR settings, built from a layout through timm's own configs and builders
# (alternet/models/byob.py, maxxvit.py): each family's own layout pattern at about preresnet_tiny's size, a stride-1
# stem and 4 stages (ByobNet: 32, 16, 8 and 4 px maps at 32 px input; MaxxVit halves the map in every stage: 16, 8,
# 4 and 2 px). Their layouts stack MSAs as the families do, which the paper's build-up rules would not (their
# options set model.buildup_rules=off: a deliberate contrast).
_BYOB_CIFAR = dict(layout="C|C|CM|MM", widths=(64, 128, 256, 512), stem_chs=32)
HYBRIDS: dict[str, ByobSpec | MaxxVitSpec] = {
    "botnet_cifar": ByobSpec(**_BYOB_CIFAR, self_attn_layer="bottleneck", heads=4),
    "halonet_cifar": ByobSpec(**_BYOB_CIFAR, self_attn_layer="halo", heads=4, block_size=4, halo_size=1),
    "lambdanet_cifar": ByobSpec(**_BYOB_CIFAR, self_attn_layer="lambda", heads=4, lambda_r=5),
    "coatnet_cifar": MaxxVitSpec(layout="C|C|MM|M", widths=(32, 64, 96, 192), stem_width=32, dim_head=32),
    "maxvit_cifar": MaxxVitSpec(
        layout="C|C|M|M", widths=(32, 64, 96, 192), stem_width=32, dim_head=32, msa_block="M", window=2
    ),
    # the same BoTNet and CoAtNet patterns at the laptop scale (experiment=hybrids): widths chosen so that each has
    # alternet_laptop's parameters (1.06M at 100 classes, within 1%), the stride-1 stem kept (multiply-adds per
    # image: BoTNet 60M, CoAtNet 32M, alternet_laptop 41M; tests/models/test_hybrids.py pins both)
    "botnet_laptop": ByobSpec(
        layout="C|C|CM|MM", widths=(80, 160, 320, 640), stem_chs=32, self_attn_layer="bottleneck", heads=4
    ),
    "coatnet_laptop": MaxxVitSpec(layout="C|C|MM|M", widths=(40, 80, 128, 224), stem_width=32, dim_head=32),
    # the same families at ResNet-50 scale for 32 px (experiment=hybrids_full): timm's BoTNet-50-TS and CoAtNet-0
    # layouts and widths with the stride-1 stem
    "botnet50_cifar": ByobSpec(layout="CCC|CCCM|CMCMCM|CMC", act_layer="silu"),
    "coatnet0_cifar": MaxxVitSpec(layout="CC|CCC|MMMMM|MM", head_hidden_size=768),
}
SPECS: dict[str, _Spec] = {**ARCHITECTURES, **COMPARISONS, **HYBRIDS}  # every model of the zoo
MODEL_NAMES: tuple[str, ...] = tuple(SPECS)

# timm's named hybrids in our notation: build_twin(name) gives timm.create_model(name)'s parameters and state-dict
# keys exactly, through the same specs and builders as the hybrids above (tests/models/test_hybrids.py)
_RESNET50_T = dict(layout="CCC|CCCM|CMCMCM|CMC", act_layer="silu", stem="imagenet")
TIMM_TWINS: dict[str, ByobSpec | MaxxVitSpec] = {
    "botnet26t_256": ByobSpec(layout="CC|CC|CM|MM", stem="imagenet"),
    "botnet50ts_256": ByobSpec(**_RESNET50_T),
    "halonet50ts": ByobSpec(**_RESNET50_T, self_attn_layer="halo", heads=(8, 4, 8, 8), block_size=8, halo_size=3),
    "lambda_resnet50ts": ByobSpec(**_RESNET50_T, self_attn_layer="lambda", lambda_r=9),
    "coatnet_0_224": MaxxVitSpec(layout="CC|CCC|MMMMM|MM", head_hidden_size=768, stem="imagenet"),
}


def spec_kwargs(name: str) -> dict[str, Any]:
    """The zoo's constructor keywords for ``name`` (e.g. to record a model's full architecture next to a config's
    overrides: ``{**spec_kwargs(name), **overrides}``); ``{}`` for a name the zoo does not define (a timm model)."""
    return SPECS[name].kwargs() if name in SPECS else {}


def _cfg(spec: _Spec, data: str | None = None) -> dict[str, Any]:
    """The registry's ``pretrained_cfg``: neutral without ``data`` (ImageNet statistics and 1000 classes, as timm's
    untrained entries; the input size follows the build, 224 px with the ImageNet stem), or, tagged with a data set
    (``alternet_r50.cifar100``), the class count, input size and statistics of weights trained on it. No tag carries
    weights: a trained model's own cfg travels in its export's config.json."""
    facts = FACTS[data] if data else replace(FACTS["in1k"], image_size=32)
    return dict(
        url="",
        num_classes=facts.num_classes,
        input_size=(3, facts.image_size, facts.image_size),
        pool_size=None,
        crop_pct=1.0 if facts.image_size <= 64 else 0.875,
        interpolation="bilinear" if facts.image_size <= 64 else "bicubic",
        mean=facts.mean,
        std=facts.std,
        first_conv=spec.first_conv,
        classifier=spec.classifier,
        license="mit",
    )


def _cfgs(name: str, spec: _Spec) -> dict[str, dict[str, Any]]:
    """The neutral cfg first (timm's default tag), then one per data set the model is meant for."""
    tags = ("cifar10", "cifar100", "in1k") if isinstance(spec, AlterNetSpec) else ("cifar10", "cifar100")
    return {name: _cfg(spec), **{f"{name}.{tag}": _cfg(spec, tag) for tag in tags}}


default_cfgs = generate_default_cfgs(
    {key: cfg for name, spec in SPECS.items() for key, cfg in _cfgs(name, spec).items()}
)


def _input_size(variant: str, kwargs: dict[str, Any]) -> int:
    """The input size the model is built for, set as ``img_size`` in ``kwargs`` unless given: a tagged cfg's
    (``alternet_r50.in1k``: 224 px, ImageNet stem), else 32 px."""
    if "img_size" not in kwargs:
        cfg = resolve_pretrained_cfg(variant, pretrained_cfg=kwargs.get("pretrained_cfg"))
        kwargs["img_size"] = int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else 32
    size = kwargs["img_size"]
    return int(size if isinstance(size, int) else size[-1])


def _describe_build(model: nn.Module, img_size: int) -> nn.Module:
    """The model's ``pretrained_cfg`` states the input size it was built for (timm's data config reads it); a
    ``features_only`` model is timm's wrapper, which carries its own cfg."""
    if not hasattr(model, "pretrained_cfg"):
        return model
    pretrained_cfg = dict(model.pretrained_cfg)
    channels = int((pretrained_cfg.get("input_size") or (3,))[0])
    pretrained_cfg["input_size"] = (channels, img_size, img_size)
    model.pretrained_cfg = model.default_cfg = pretrained_cfg
    return model


def _create_alternet(variant: str, pretrained: bool = False, **kwargs: Any) -> AlterNet:
    size = _input_size(variant, kwargs)
    model_args = {**ARCHITECTURES[variant].kwargs(), **kwargs}
    stages = tuple(range(len(parse_layout(model_args["layout"]))))
    feature_cfg = dict(flatten_sequential=True, out_indices=model_args.pop("out_indices", stages))
    model = build_model_with_cfg(AlterNet, variant, pretrained, feature_cfg=feature_cfg, **model_args)
    return _describe_build(model, size)


@register_model
def alternet_r18(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """AlterNet on pre-activation ResNet-18: CC|CM|CM|CM."""
    return _create_alternet("alternet_r18", pretrained, **kwargs)


@register_model
def alternet_r34(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """AlterNet on pre-activation ResNet-34 (stage 4 of 4 blocks): CCC|CCCM|CMCMCM|CMCM."""
    return _create_alternet("alternet_r34", pretrained, **kwargs)


@register_model
def alternet_r50(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """AlterNet-50, the paper's CIFAR-100 figure layout with 4 MSAs: CCC|CCCM|CCCCCM|CMCM."""
    return _create_alternet("alternet_r50", pretrained, **kwargs)


@register_model
def alternet_r50_hdvw(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """AlterNet-50 as in the reference code, 6 MSAs: CCC|CCCM|CMCMCM|CMCM."""
    return _create_alternet("alternet_r50_hdvw", pretrained, **kwargs)


@register_model
def alternet_r101(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """AlterNet-101: 3, 4, 23, 4 bottleneck blocks with 0, 1, 3, 2 MSAs."""
    return _create_alternet("alternet_r101", pretrained, **kwargs)


@register_model
def alternet_r152(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """AlterNet-152: 3, 8, 36, 4 bottleneck blocks with 0, 1, 3, 2 MSAs."""
    return _create_alternet("alternet_r152", pretrained, **kwargs)


@register_model
def alternet_tiny(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """A 3-stage, 5-block AlterNet (widths 32/64/128, 2 MSAs) that trains in seconds on a CPU."""
    return _create_alternet("alternet_tiny", pretrained, **kwargs)


@register_model
def preresnet_tiny(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """alternet_tiny with every MSA block replaced by a Conv block."""
    return _create_alternet("preresnet_tiny", pretrained, **kwargs)


@register_model
def alternet_laptop(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """The laptop-scale AlterNet: C|CC|CM, widths 48/96/192, a 2x2 stride-2 stem (CIFAR-100 on a CPU in minutes)."""
    return _create_alternet("alternet_laptop", pretrained, **kwargs)


@register_model
def preresnet_laptop(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """alternet_laptop with its MSA block replaced by a Conv block and the last stage at 144 channels: the Conv-only
    twin matched in parameters and multiply-adds."""
    return _create_alternet("preresnet_laptop", pretrained, **kwargs)


@register_model
def preresnet18(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """Pre-activation ResNet-18."""
    return _create_alternet("preresnet18", pretrained, **kwargs)


@register_model
def preresnet34(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """Pre-activation ResNet-34."""
    return _create_alternet("preresnet34", pretrained, **kwargs)


@register_model
def preresnet50(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """Pre-activation ResNet-50."""
    return _create_alternet("preresnet50", pretrained, **kwargs)


@register_model
def preresnet101(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """Pre-activation ResNet-101."""
    return _create_alternet("preresnet101", pretrained, **kwargs)


@register_model
def preresnet152(pretrained: bool = False, **kwargs: Any) -> AlterNet:
    """Pre-activation ResNet-152."""
    return _create_alternet("preresnet152", pretrained, **kwargs)


# Comparison models for the paper's tables, at CIFAR settings (timm classes) ------------------


def _create_comparison(variant: str, pretrained: bool, **kwargs: Any) -> nn.Module:
    spec = COMPARISONS[variant]
    local_kernel = kwargs.pop("local_kernel", None) if isinstance(spec, ViTSpec) else None
    model = build_model_with_cfg(spec.model_class, variant, pretrained, **{**spec.kwargs(), **kwargs})
    return localise_attention(model, local_kernel)


@register_model
def resnet50_hdvw(pretrained: bool = False, **kwargs: Any) -> PostActResNet:
    """The paper's ResNet-50: post-activation, with a 3x3 stride-1 stem and no max-pool below 128 px (HDVW)."""
    return _create_comparison("resnet50_hdvw", pretrained, **kwargs)


@register_model
def vit_ti_cifar(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """ViT-Ti for 32x32 inputs: patch 2, dim 192, depth 12, 3 heads, no q/k/v bias (as the paper's)."""
    return _create_comparison("vit_ti_cifar", pretrained, **kwargs)


@register_model
def pit_ti_cifar(pretrained: bool = False, **kwargs: Any) -> PiT:
    """PiT-Ti for 32x32 inputs: patch 2, stride 1, dims 32x(2, 4, 8), depths 2, 6, 4."""
    return _create_comparison("pit_ti_cifar", pretrained, **kwargs)


@register_model
def swin_ti_cifar(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-Ti for 32x32 inputs: patch 1, window 4, dim 96, depths 2, 2, 6, 2, no q/k/v bias (as the paper's)."""
    return _create_comparison("swin_ti_cifar", pretrained, **kwargs)


@register_model
def vit_mini_cifar(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """A ViT for CPU experiments at 32x32: patch 4, dim 96, depth 4, 3 heads."""
    return _create_comparison("vit_mini_cifar", pretrained, **kwargs)


@register_model
def pit_mini_cifar(pretrained: bool = False, **kwargs: Any) -> PiT:
    """A PiT for CPU experiments at 32x32: patch 4, stride 4, dims 32x(2, 4, 8), depths 1, 2, 1."""
    return _create_comparison("pit_mini_cifar", pretrained, **kwargs)


@register_model
def swin_mini_cifar(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """A Swin for CPU experiments at 32x32: patch 2, window 4, dim 48, depths 1, 1, 2, 1."""
    return _create_comparison("swin_mini_cifar", pretrained, **kwargs)


# Hybrids of timm's families (ByobNet, MaxxVit) from a layout -------------------------------


def hybrid_spec(spec: ByobSpec | MaxxVitSpec, kwargs: dict[str, Any]) -> ByobSpec | MaxxVitSpec:
    """``spec`` with the keywords that are its fields taken out of ``kwargs`` (the rest go to timm's class)."""
    names = {f.name for f in fields(spec)}
    return replace(spec, **{key: kwargs.pop(key) for key in list(kwargs) if key in names})


def build_hybrid(variant: str, spec: ByobSpec | MaxxVitSpec, pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """The family's builder for ``spec`` under ``kwargs`` (spec fields override it, the rest go to timm)."""
    spec = hybrid_spec(spec, kwargs)
    build = build_byob if isinstance(spec, ByobSpec) else build_maxxvit
    return build(variant, pretrained, spec, **kwargs)


def build_twin(name: str, pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """timm's named hybrid ``name`` rebuilt from its layout (:data:`TIMM_TWINS`), at timm's input size for it; with
    ``pretrained=True``, timm's weights for it load unchanged."""
    cfg = resolve_pretrained_cfg(name)
    kwargs.setdefault("img_size", int(cfg.input_size[-1]))
    return build_hybrid(name, TIMM_TWINS[name], pretrained, **kwargs)


def _create_hybrid(variant: str, pretrained: bool, **kwargs: Any) -> nn.Module:
    size = _input_size(variant, kwargs)
    return _describe_build(build_hybrid(variant, HYBRIDS[variant], pretrained, **kwargs), size)


@register_model
def botnet_cifar(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """A BoTNet for 32x32 inputs (timm's ByobNet): C|C|CM|MM, bottleneck attention with relative position logits."""
    return _create_hybrid("botnet_cifar", pretrained, **kwargs)


@register_model
def halonet_cifar(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """A HaloNet for 32x32 inputs (timm's ByobNet): C|C|CM|MM, halo attention in 4x4 blocks with a 1-pixel halo."""
    return _create_hybrid("halonet_cifar", pretrained, **kwargs)


@register_model
def lambdanet_cifar(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """A LambdaNet for 32x32 inputs (timm's ByobNet): C|C|CM|MM, lambda layers with a 5x5 position context."""
    return _create_hybrid("lambdanet_cifar", pretrained, **kwargs)


@register_model
def coatnet_cifar(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """A CoAtNet for 32x32 inputs (timm's MaxxVit): C|C|MM|M, MBConv then transformer blocks, widths 32 to 192."""
    return _create_hybrid("coatnet_cifar", pretrained, **kwargs)


@register_model
def maxvit_cifar(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """A MaxViT for 32x32 inputs (timm's MaxxVit): C|C|M|M, MaxViT blocks with 2x2 windows and grids."""
    return _create_hybrid("maxvit_cifar", pretrained, **kwargs)


@register_model
def botnet_laptop(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """botnet_cifar at alternet_laptop's parameters: C|C|CM|MM, widths 80 to 640 (experiment=hybrids)."""
    return _create_hybrid("botnet_laptop", pretrained, **kwargs)


@register_model
def coatnet_laptop(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """coatnet_cifar at alternet_laptop's parameters: C|C|MM|M, widths 40/80/128/224 (experiment=hybrids)."""
    return _create_hybrid("coatnet_laptop", pretrained, **kwargs)


@register_model
def botnet50_cifar(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """BoTNet-50-TS (timm's botnet50ts layout and widths, SiLU) with the stride-1 stem for 32x32 inputs."""
    return _create_hybrid("botnet50_cifar", pretrained, **kwargs)


@register_model
def coatnet0_cifar(pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """CoAtNet-0 (timm's coatnet_0 layout, widths and MLP head) with the stride-1 stem for 32x32 inputs."""
    return _create_hybrid("coatnet0_cifar", pretrained, **kwargs)
