"""Every named model of the zoo, as its family's spec: :data:`ARCHITECTURES` (AlterNets and pre-activation
ResNets), :data:`COMPARISONS` (the paper's post-activation ResNet-50 and ViT, PiT, Swin at CIFAR settings, as the
paper's authors trained them), :data:`HYBRIDS` (timm's hybrid families from a layout) and :data:`TIMM_TWINS` (timm's
named hybrids in our notation). :mod:`alternet.models.zoo` registers each name in timm; every keyword
(``layout``, ``heads``, ``window``, ``attention``, ``img_size``...) overrides the spec's value. The same names are
the Hydra options under ``conf/model/``, whose keys are ``null`` (the spec's value) unless a user overrides them.
"""

from __future__ import annotations

from typing import Any

from .specs import AlterNetSpec, ByobSpec, MaxxVitSpec, ModelSpec, PiTSpec, ResNetSpec, SwinSpec, ViTSpec

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
SPECS: dict[str, ModelSpec] = {**ARCHITECTURES, **COMPARISONS, **HYBRIDS}  # every model of the zoo
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


def base_name(name: str) -> str:
    """A model name without its pretrained tag, as timm reads it: ``resnet50.a1_in1k`` -> ``resnet50``; a
    ``hf-hub:`` / ``local-dir:`` source stays as it is."""
    return name if ":" in name else name.split(".", 1)[0]
