"""Named models, registered in timm: AlterNets, their pre-activation ResNet twins and comparison ViTs.

After ``import alternet``, ``timm.create_model("alternet_r50", num_classes=100)`` works; every keyword
(``layout``, ``heads``, ``window``, ``attention``, ``img_size``...) overrides the variant's default.
The same names are the Hydra options under ``conf/model/``.
"""

from __future__ import annotations

from typing import Any

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
from timm.models.pit import PoolingVisionTransformer
from timm.models.swin_transformer import SwinTransformer
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from .backbone import AlterNet
from .layout import alternate_layout, parse_layout

HEADS = (3, 6, 12, 24)


def _spec(depths: tuple[int, ...], msas: tuple[int, ...], block: str, **extra: Any) -> dict[str, Any]:
    return dict(layout=alternate_layout(depths, msas), block=block, **{"heads": HEADS, **extra})


ARCHITECTURES: dict[str, dict[str, Any]] = {
    # AlterNets (HDVW models/alternet.py); alternet_r50 uses the paper's CIFAR-100 figure layout.
    "alternet_r18": _spec((2, 2, 2, 2), (0, 1, 1, 1), "basic"),
    "alternet_r34": _spec((3, 4, 6, 4), (0, 1, 3, 2), "basic"),
    "alternet_r50": _spec((3, 4, 6, 4), (0, 1, 1, 2), "bottleneck"),
    "alternet_r50_hdvw": _spec((3, 4, 6, 4), (0, 1, 3, 2), "bottleneck"),
    "alternet_r101": _spec((3, 4, 23, 4), (0, 1, 3, 2), "bottleneck"),
    "alternet_r152": _spec((3, 8, 36, 4), (0, 1, 3, 2), "bottleneck"),
    # A CPU-friendly AlterNet for the embedded default and tests, and its Conv-only twin.
    "alternet_tiny": _spec((1, 2, 2), (0, 1, 1), "basic", widths=(32, 64, 128), heads=(1, 2, 4), head_dim=32),
    "preresnet_tiny": _spec((1, 2, 2), (0, 0, 0), "basic", widths=(32, 64, 128), heads=(1, 2, 4), head_dim=32),
    # Pre-activation ResNet baselines (no MSA, classic depths).
    "preresnet18": _spec((2, 2, 2, 2), (0, 0, 0, 0), "basic"),
    "preresnet34": _spec((3, 4, 6, 3), (0, 0, 0, 0), "basic"),
    "preresnet50": _spec((3, 4, 6, 3), (0, 0, 0, 0), "bottleneck"),
    "preresnet101": _spec((3, 4, 23, 3), (0, 0, 0, 0), "bottleneck"),
    "preresnet152": _spec((3, 8, 36, 3), (0, 0, 0, 0), "bottleneck"),
}

COMPARISON_MODELS = ("vit_ti_cifar", "pit_ti_cifar", "swin_ti_cifar")


def _cfg(**kwargs: Any) -> dict[str, Any]:
    defaults = dict(
        url="",
        num_classes=1000,
        input_size=(3, 32, 32),
        pool_size=None,
        crop_pct=1.0,
        interpolation="bilinear",
        mean=(0.5071, 0.4867, 0.4408),
        std=(0.2675, 0.2565, 0.2761),
        first_conv="stem.conv",
        classifier="head.fc",
        license="mit",
    )
    return {**defaults, **kwargs}


default_cfgs = generate_default_cfgs({name: _cfg() for name in ARCHITECTURES})
default_cfgs.update(
    generate_default_cfgs(
        {
            "vit_ti_cifar": _cfg(first_conv="patch_embed.proj", classifier="head"),
            "pit_ti_cifar": _cfg(first_conv="patch_embed.conv", classifier="head"),
            "swin_ti_cifar": _cfg(first_conv="patch_embed.proj", classifier="head.fc"),
        }
    )
)


def _create_alternet(variant: str, pretrained: bool = False, **kwargs: Any) -> AlterNet:
    model_args = {**ARCHITECTURES[variant], **kwargs}
    num_stages = len(parse_layout(model_args["layout"]))
    out_indices = kwargs.pop("out_indices", tuple(range(num_stages)))
    return build_model_with_cfg(
        AlterNet,
        variant,
        pretrained,
        feature_cfg=dict(flatten_sequential=True, out_indices=out_indices),
        **{k: v for k, v in model_args.items() if k != "out_indices"},
    )


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


def _create_timm(cls: type[nn.Module], variant: str, pretrained: bool, defaults: dict, kwargs: dict) -> nn.Module:
    return build_model_with_cfg(cls, variant, pretrained, **{**defaults, **kwargs})


@register_model
def vit_ti_cifar(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """ViT-Ti for 32x32 inputs: patch 2, dim 192, depth 12, 3 heads."""
    defaults = dict(img_size=32, patch_size=2, embed_dim=192, depth=12, num_heads=3)
    return _create_timm(VisionTransformer, "vit_ti_cifar", pretrained, defaults, kwargs)


@register_model
def pit_ti_cifar(pretrained: bool = False, **kwargs: Any) -> PoolingVisionTransformer:
    """PiT-Ti for 32x32 inputs: patch 2, stride 1, dims 32x(2, 4, 8), depths 2, 6, 4."""
    defaults = dict(
        img_size=32, patch_size=2, stride=1, base_dims=(32, 32, 32), depth=(2, 6, 4), heads=(2, 4, 8), mlp_ratio=4
    )
    return _create_timm(PoolingVisionTransformer, "pit_ti_cifar", pretrained, defaults, kwargs)


@register_model
def swin_ti_cifar(pretrained: bool = False, **kwargs: Any) -> SwinTransformer:
    """Swin-Ti for 32x32 inputs: patch 1, window 4, dim 96, depths 2, 2, 6, 2."""
    defaults = dict(
        img_size=32, patch_size=1, window_size=4, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)
    )
    return _create_timm(SwinTransformer, "swin_ti_cifar", pretrained, defaults, kwargs)
