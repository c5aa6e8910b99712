"""``model``: the typed section of each model family, chosen by ``model.name`` (:func:`model_section`).

A zoo family's keys are its spec's constructor keywords (:mod:`alternet.models.zoo`), each optional: ``null`` in the
config means "the zoo's value", so the architecture's defaults live in the zoo alone and the YAML
(``conf/model/_FAMILY.yaml``) lists the keys a user may set. Any other timm model
(``model=timm model.name=NAME``) is an open section: the keys it does not declare (``+model.drop_rate=0.1``) are its
constructor's, checked against that constructor when the model is built
(:func:`alternet.models.factory.model_args`).

The command line's help does not import this module (it imports torch, for the layers' own tables): the training
schema names :func:`model_section` through a deferred import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import one_of
from ..typed import Section, build, integer
from .attention import check_attention
from .blocks import check_block, check_stem
from .byob import SELF_ATTN_LAYERS, ByobSpec
from .external import architecture, check_name
from .maxxvit import CONV_BLOCKS, MSA_BLOCKS, MaxxVitSpec
from .zoo import (
    MODEL_NAMES,
    SPECS,
    AlterNetSpec,
    PiTSpec,
    ResNetSpec,
    SwinSpec,
    ViTSpec,
    spec_kwargs,
)

BUILDUP_RULES = ("warn", "off")
# the model's name, where its starting weights come from, and whether to warn about the paper's build-up rules
NOT_MODEL_ARGS = ("name", "pretrained", "buildup_rules", "extra")


@dataclass(kw_only=True)
class ModelConfig(Section):
    """Every family's keys: the model's name and its starting weights."""

    name: str
    pretrained: bool | str | None  # true: timm's weights for the name; or an export, checkpoint, run or W&B artifact

    def arguments(self) -> dict[str, Any]:
        """The ``create_model`` keywords the config sets (its non-null keys but the name and the weights)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | getattr(self, "extra", {})
        return {k: v for k, v in values.items() if k not in NOT_MODEL_ARGS and v is not None}

    def built(self) -> dict[str, Any]:
        """The architecture this config builds: the zoo's keywords for its name (none for a timm model) under the
        keys it sets."""
        return spec_kwargs(architecture(self.name)) | self.arguments()


@dataclass(kw_only=True)
class LayoutModel(ModelConfig):
    """A family built from a layout of Conv and MSA blocks, whose build-up rules the config checks warn about."""

    layout: str | None = None  # stages separated by |: C = Conv block, M = MSA block
    buildup_rules: str  # warn | off (a deliberate contrast)

    def check(self) -> None:
        one_of("buildup_rules", self.buildup_rules, BUILDUP_RULES)


@dataclass(kw_only=True)
class AlterNetModel(LayoutModel):
    """An AlterNet or pre-activation ResNet (``model/_alternet.yaml``)."""

    block: str | None = None
    widths: list[int] | None = None
    heads: list[int] | None = None
    head_dim: int | None = None
    window: int | None = None
    attention: str | None = None
    bias_per_head: bool | None = None
    fused_attn: bool | None = None
    qkv_bias: bool | None = None
    stem: str | None = None

    def check(self) -> None:
        super().check()
        _checked(self, block=check_block, stem=check_stem)
        built = self.built()
        check_attention(built["attention"], "model.attention", bool(built.get("bias_per_head")))
        self.require("head_dim", integer(1), "must be an integer >= 1")
        self.require("window", integer(1), "must be an integer >= 1 (or null: the stem's)")


@dataclass(kw_only=True)
class ResNetModel(ModelConfig):
    """The paper's post-activation ResNet (``model/_resnet.yaml``)."""

    layers: list[int] | None = None
    block: str | None = None
    stem: str | None = None

    def check(self) -> None:
        _checked(self, block=check_block, stem=check_stem)


@dataclass(kw_only=True)
class ViTModel(ModelConfig):
    """A ViT at CIFAR settings (``model/_vit.yaml``)."""

    patch_size: int | None = None
    embed_dim: int | None = None
    depth: int | None = None
    num_heads: int | None = None
    qkv_bias: bool | None = None
    local_kernel: int | None = None
    class_token: bool | None = None
    global_pool: str | None = None

    def check(self) -> None:
        self.require(
            "local_kernel", integer(2), "must be a window side >= 2 (1 is a softmax over one key), or null: global"
        )
        self.one_of("global_pool", ("avg", "token"))


@dataclass(kw_only=True)
class PiTModel(ModelConfig):
    """A PiT at CIFAR settings (``model/_pit.yaml``)."""

    patch_size: int | None = None
    stride: int | None = None
    base_dims: list[int] | None = None
    depth: list[int] | None = None
    heads: list[int] | None = None
    mlp_ratio: float | None = None


@dataclass(kw_only=True)
class SwinModel(ModelConfig):
    """A Swin at CIFAR settings (``model/_swin.yaml``)."""

    patch_size: int | None = None
    window_size: int | None = None
    embed_dim: int | None = None
    depths: list[int] | None = None
    num_heads: list[int] | None = None
    qkv_bias: bool | None = None


@dataclass(kw_only=True)
class ByobModel(LayoutModel):
    """A ByobNet hybrid: BoTNet, HaloNet, LambdaNet (``model/_byob.yaml``)."""

    widths: list[int] | None = None
    bottle_ratio: float | None = None
    self_attn_layer: str | None = None
    heads: int | list[int] | None = None
    dim_head: int | None = None
    block_size: int | list[int] | None = None
    halo_size: int | list[int] | None = None
    lambda_r: int | None = None
    act_layer: str | None = None
    stem: str | None = None
    stem_chs: int | None = None
    stem_type: str | None = None
    stem_pool: str | None = None

    def check(self) -> None:
        super().check()
        _checked(self, stem=check_stem)
        self.one_of("self_attn_layer", SELF_ATTN_LAYERS)


@dataclass(kw_only=True)
class MaxxVitModel(LayoutModel):
    """A MaxxVit hybrid: CoAtNet, MaxViT (``model/_maxxvit.yaml``)."""

    widths: list[int] | None = None
    msa_block: str | None = None
    conv_block: str | None = None
    dim_head: int | None = None
    window: int | None = None
    stem: str | None = None
    stem_width: int | list[int] | None = None
    head_hidden_size: int | None = None
    rel_pos_type: str | None = None

    def check(self) -> None:
        super().check()
        _checked(self, stem=check_stem)
        self.one_of("msa_block", MSA_BLOCKS)
        self.one_of("conv_block", CONV_BLOCKS)


@dataclass(kw_only=True)
class TimmModel(ModelConfig):
    """Any other timm model (``model/timm.yaml``): an open section, its other keys its constructor's."""

    OPEN = True
    extra: dict[str, Any] = field(default_factory=dict)  # +model.KEY=VALUE: the constructor's own keywords

    def check(self) -> None:
        check_name(self.name, MODEL_NAMES)  # an unknown name, with the closest ones


# each zoo spec class's section
FAMILIES: dict[type, type[ModelConfig]] = {
    AlterNetSpec: AlterNetModel,
    ResNetSpec: ResNetModel,
    ViTSpec: ViTModel,
    PiTSpec: PiTModel,
    SwinSpec: SwinModel,
    ByobSpec: ByobModel,
    MaxxVitSpec: MaxxVitModel,
}


def model_section(values: Mapping[str, Any]) -> type[ModelConfig]:
    """The section a model config is typed by: its zoo family's, or :class:`TimmModel` for any other name."""
    name = values.get("name")
    arch = architecture(name) if isinstance(name, str) and name != "???" else None
    return FAMILIES[type(SPECS[arch])] if arch in SPECS else TimmModel


def model_config(values: Mapping[str, Any]) -> ModelConfig:
    """A model section (as composed, or as a checkpoint keeps it) as its family's typed object, checked."""
    return build(model_section(values), values, "model.")


def _checked(section: ModelConfig, **checks: Any) -> None:
    """Each set key through its layer's one check (``check_block(value, key)``)."""
    for key, check in checks.items():
        if getattr(section, key) is not None:
            check(getattr(section, key), key)
