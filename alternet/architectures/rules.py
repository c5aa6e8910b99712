"""The choices of a model's keys and their one-line checks, shared by the config sections (before any work) and the
constructors in :mod:`alternet.models`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ConfigValueError, one_of

BLOCKS = ("basic", "bottleneck")  # a Conv block: expansion 1 or 4
STEMS = ("cifar", "patch2", "imagenet")  # and "auto": the CIFAR stem below IMAGENET_STEM_MIN_SIZE
TIMM_STEMS = ("cifar", "imagenet")  # the families timm builds (ResNet, ByobNet, MaxxVit): no patch2 stem
IMAGENET_STEM_MIN_SIZE = 128
STEM_REDUCTION = {"cifar": 1, "patch2": 2, "imagenet": 4}  # how much each stem downsamples
DEFAULT_WINDOW = {"cifar": 4, "patch2": 4, "imagenet": 7}  # AlterNet's attention window where model.window is null
ATTENTION_KINDS = ("window", "global", "focused_linear", "position_only")
WINDOWED_KINDS = ("window", "position_only")  # kinds that attend within p x p windows (the others: the whole map)
SELF_ATTN_LAYERS = ("bottleneck", "halo", "lambda")  # ByobNet's M: BoTNet, HaloNet, LambdaNet
MSA_BLOCKS = ("T", "M", "PM")  # MaxxVit's M, timm's block_type letters: CoAtNet, MaxViT, parallel MaxViT
CONV_BLOCKS = ("mbconv", "convnext")  # MaxxVit's C


def check_block(block: Any, key: str = "block") -> None:
    """The one check of a Conv block type (``model.block``)."""
    one_of(key, block, BLOCKS)


def check_stem(stem: Any, key: str = "stem", stems: Sequence[str] = STEMS) -> None:
    """The one check of a stem (``model.stem``): ``auto`` or one of the family's ``stems``."""
    one_of(key, stem, ("auto", *stems))


def check_timm_stem(stem: Any, key: str = "stem") -> None:
    """:func:`check_stem` for the families timm builds, which have no ``patch2`` stem (it built the ImageNet one)."""
    check_stem(stem, key, TIMM_STEMS)


def choose_stem(stem: str, img_size: int | Sequence[int], stems: Sequence[str] = STEMS) -> str:
    """``auto``: the CIFAR stem for small inputs (< 128 px), the ImageNet stem otherwise."""
    check_stem(stem, stems=stems)
    if stem == "auto":
        size = img_size if isinstance(img_size, int) else min(img_size)
        return "imagenet" if size >= IMAGENET_STEM_MIN_SIZE else "cifar"
    return stem


def check_attention(kind: Any, key: str = "attention", bias_per_head: bool = True) -> None:
    """The one check of an attention kind (``model.attention``). ``position_only`` needs one bias table per head:
    its kernel softmax(B) is all a head has, so a shared table would give every head the same kernel (and confound
    data specificity with head diversity)."""
    one_of(key, kind, ATTENTION_KINDS)
    if kind == "position_only" and not bias_per_head:
        prefix = key.rsplit(".", 1)[0] + "." if "." in key else ""
        raise ConfigValueError(
            f"{key}=position_only needs {prefix}bias_per_head=true (one kernel per head; with one shared table "
            "every head would mix positions alike), in both arms of a comparison with window attention"
        )
