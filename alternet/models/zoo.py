"""The zoo's models registered in timm, and how each family is built: the specs and names are data
(:mod:`alternet.architectures`); here are the classes they build, timm's ``pretrained_cfg`` of each name and the
``@register_model`` entry points. After ``import alternet.models`` (or ``alternet.create_model``),
``timm.create_model("alternet_r50", num_classes=100)`` works; every keyword overrides the spec's value.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from timm.models import (
    build_model_with_cfg,
    checkpoint_seq,
    generate_default_cfgs,
    pit,
    register_model,
    resolve_pretrained_cfg,
    swin_transformer,
    vision_transformer,
)
from timm.models.pit import PoolingVisionTransformer
from timm.models.swin_transformer import SwinTransformer
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from ..architectures.named import ARCHITECTURES, COMPARISONS, HYBRIDS, SPECS, TIMM_TWINS
from ..architectures.specs import (
    AlterNetSpec,
    ByobSpec,
    MaxxVitSpec,
    ModelSpec,
    PiTSpec,
    ResNetSpec,
    SwinSpec,
    ViTSpec,
    spec_with,
)
from ..dataset_facts import FACTS
from .backbone import AlterNet
from .byob import build_byob
from .features import feature_arguments, feature_model
from .guards import built_size_check, check_build_arguments
from .local_attention import localise_attention
from .maxxvit import build_maxxvit
from .resnet import PostActResNet


class _CheckpointedBlocks(nn.Sequential):
    """An ``nn.Sequential`` of blocks that can recompute each block in backward (same children, same names)."""

    def __init__(self, *blocks: nn.Module):
        super().__init__(*blocks)
        self.grad_checkpointing = False  # an instance attribute: TorchScript sees no class attribute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.grad_checkpointing and not torch.jit.is_scripting() and torch.is_grad_enabled():
            return checkpoint_seq(self, x)
        for block in self:  # nn.Sequential's forward, written out: TorchScript compiles no super() call
            x = block(x)
        return x


class PiT(PoolingVisionTransformer):
    """timm's PiT with gradient checkpointing, which timm's class refuses; parameter names are unchanged, so
    weights load either way."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        for stage in self.transformers:
            stage.blocks = _CheckpointedBlocks(*stage.blocks)
        self.input_size_built = tuple(self.patch_embed.img_size)  # its position embedding: that input's patches
        self.register_forward_pre_hook(built_size_check)  # timm's: a tensor size mismatch deep inside

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each transformer block in backward (see :meth:`AlterNet.set_grad_checkpointing`)."""
        for stage in self.transformers:
            stage.blocks.grad_checkpointing = enable


def _adapt_pit_checkpoint(state_dict: dict[str, torch.Tensor], model: PiT) -> dict[str, torch.Tensor]:
    """timm's PiT checkpoint conversion, and the position embedding (a map) resized bicubically to the model's,
    which timm's leaves undone: a checkpoint loads at another input size, as a ViT's does."""
    state_dict = pit.checkpoint_filter_fn(state_dict, model)
    position = state_dict.get("pos_embed")
    if position is not None and position.shape[-2:] != model.pos_embed.shape[-2:]:
        size = model.pos_embed.shape[-2:]
        state_dict["pos_embed"] = F.interpolate(position, size=size, mode="bicubic", align_corners=False)
    return state_dict


# the class each comparison family builds (AlterNets and the hybrids have builders of their own)
MODEL_CLASSES: dict[type[ModelSpec], type[nn.Module]] = {
    ResNetSpec: PostActResNet,
    ViTSpec: VisionTransformer,
    PiTSpec: PiT,
    SwinSpec: SwinTransformer,
}
# timm's own adaptation of a checkpoint to the model being built, for the families timm adapts: position embeddings
# and relative position tables resized to another input size or window (the ResNet has none)
CHECKPOINT_FILTERS = {
    ViTSpec: vision_transformer.checkpoint_filter_fn,
    PiTSpec: _adapt_pit_checkpoint,
    SwinSpec: swin_transformer.checkpoint_filter_fn,
}


def adapt_checkpoint(state_dict: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """``state_dict`` as timm adapts a checkpoint to the model it loads into, for the families timm adapts (a
    ViT's, PiT's or Swin's position tables resized to the model's input size); any other model's as it is."""
    for spec_type, adapt in CHECKPOINT_FILTERS.items():
        if isinstance(model, MODEL_CLASSES[spec_type]):
            return adapt(dict(state_dict), model)
    return state_dict


def _cfg(spec: ModelSpec, data: str | None = None) -> dict[str, Any]:
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


def _cfgs(name: str, spec: ModelSpec) -> dict[str, dict[str, Any]]:
    """The neutral cfg first (timm's default tag), then one per data set the model is meant for."""
    tags = ("cifar10", "cifar100", "in1k") if isinstance(spec, AlterNetSpec) else ("cifar10", "cifar100")
    return {name: _cfg(spec), **{f"{name}.{tag}": _cfg(spec, tag) for tag in tags}}


default_cfgs = generate_default_cfgs(
    {key: cfg for name, spec in SPECS.items() for key, cfg in _cfgs(name, spec).items()}
)


def _input_size(variant: str, kwargs: dict[str, Any]) -> tuple[int, int]:
    """The input size the model is built for, set as ``img_size`` in ``kwargs`` unless given: a tagged cfg's
    (``alternet_r50.in1k``: 224 px, ImageNet stem), else 32 px. The arguments are checked first
    (:func:`~.guards.check_build_arguments`)."""
    check_build_arguments(kwargs)
    if "img_size" not in kwargs:
        cfg = resolve_pretrained_cfg(variant, pretrained_cfg=kwargs.get("pretrained_cfg"))
        kwargs["img_size"] = int(cfg.input_size[-1]) if cfg is not None and cfg.input_size else 32
    size = kwargs["img_size"]
    return (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))


def _describe_build(model: nn.Module, img_size: tuple[int, int]) -> nn.Module:
    """The model's ``pretrained_cfg`` states the input size it was built for (timm's data config reads it); a
    ``features_only`` model is timm's wrapper, which carries its own cfg."""
    if not hasattr(model, "pretrained_cfg"):
        return model
    pretrained_cfg = dict(model.pretrained_cfg)
    channels = int((pretrained_cfg.get("input_size") or (3,))[0])
    pretrained_cfg["input_size"] = (channels, *img_size)
    model.pretrained_cfg = model.default_cfg = pretrained_cfg
    return model


def _create_alternet(variant: str, pretrained: bool = False, **kwargs: Any) -> AlterNet:
    size = _input_size(variant, kwargs)
    model_args = {**ARCHITECTURES[variant].kwargs(), **kwargs}
    features, out_indices, feature_cls = feature_arguments(model_args)
    model = _describe_build(build_model_with_cfg(AlterNet, variant, pretrained, **model_args), size)
    return feature_model(model, out_indices, feature_cls) if features else model


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
    args = {**spec.kwargs(), **kwargs}
    local_kernel = args.pop("local_kernel", None) if isinstance(spec, ViTSpec) else None  # applied once built
    features, out_indices, feature_cls = feature_arguments(args)
    size = _input_size(variant, args)
    adapt = CHECKPOINT_FILTERS.get(type(spec))
    model = build_model_with_cfg(MODEL_CLASSES[type(spec)], variant, pretrained, pretrained_filter_fn=adapt, **args)
    model = _describe_build(localise_attention(model, local_kernel), size)
    return feature_model(model, out_indices, feature_cls) if features else model


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


def build_hybrid(variant: str, spec: ByobSpec | MaxxVitSpec, pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """The family's builder for ``spec`` under ``kwargs`` (spec fields override it, the rest go to timm)."""
    spec = spec_with(spec, kwargs)
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
