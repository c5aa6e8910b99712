"""Building blocks: pre-activation Conv blocks, the MSA block, stems.

All follow the reference implementation (HDVW ``models/preresnet_dnn_block.py``, ``models/alternet.py``):
pre-activation, bias-free convolutions, a 1x1 projection shortcut on the pre-activated input when
the shape changes, and stochastic depth on the residual branch.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.layers import DropPath
from torch import nn

from .attention import build_attention


def conv1x1(in_chs: int, out_chs: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_chs, out_chs, kernel_size=1, stride=stride, bias=False)


def conv3x3(in_chs: int, out_chs: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_chs, out_chs, kernel_size=3, stride=stride, padding=1, bias=False)


def norm_act(chs: int, act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    return nn.Sequential(nn.BatchNorm2d(chs), act())


class NormAct(nn.Module):
    """BatchNorm then activation, as one module (so timm's feature extraction can tap its output)."""

    def __init__(self, chs: int, act: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.bn = nn.BatchNorm2d(chs)
        self.act = act()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(x))


class PreActBlock(nn.Module):
    """Base of the residual blocks: ``out = drop_path(branch(pre_act(x))) + shortcut``.

    ``kind`` is ``"C"`` or ``"M"``; ``branch`` is the residual branch after the pre-activation.
    Setting ``residual_scale`` to 0 removes the branch (used by the lesion study).
    """

    kind = "C"
    expansion = 1

    def __init__(self, in_chs: int, out_chs: int, stride: int, drop_path: float, act: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.pre_act = norm_act(in_chs, act)
        self.shortcut = conv1x1(in_chs, out_chs, stride) if stride != 1 or in_chs != out_chs else None
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.residual_scale = 1.0

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.pre_act(x)
        skip = x if self.shortcut is None else self.shortcut(pre)
        out = self.drop_path(self.branch(pre))
        if self.residual_scale != 1.0:
            out = out * self.residual_scale
        return out + skip


class BasicBlock(PreActBlock):
    """BN-ReLU-conv3x3(stride), BN-ReLU-conv3x3."""

    expansion = 1

    def __init__(self, in_chs: int, width: int, stride: int = 1, drop_path: float = 0.0):
        out_chs = width * self.expansion
        super().__init__(in_chs, out_chs, stride, drop_path)
        self.conv1 = conv3x3(in_chs, width, stride)
        self.conv2 = nn.Sequential(*norm_act(width), conv3x3(width, out_chs))

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


class Bottleneck(PreActBlock):
    """BN-ReLU-conv1x1, BN-ReLU-conv3x3(stride), BN-ReLU-conv1x1 (x4)."""

    expansion = 4

    def __init__(self, in_chs: int, width: int, stride: int = 1, drop_path: float = 0.0):
        out_chs = width * self.expansion
        super().__init__(in_chs, out_chs, stride, drop_path)
        self.conv1 = conv1x1(in_chs, width)
        self.conv2 = nn.Sequential(*norm_act(width), conv3x3(width, width, stride))
        self.conv3 = nn.Sequential(*norm_act(width), conv1x1(width, out_chs))

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(self.conv2(self.conv1(x)))


class MSABlock(PreActBlock):
    """BN-GELU, conv1x1 (C_in -> C_in / expansion), BN, attention (-> C_out); no FFN, no LayerNorm. The attention is
    :func:`~alternet.models.attention.build_attention`'s of the kind ``attention`` and the keywords ``attn``."""

    kind = "M"

    def __init__(
        self, in_chs: int, width: int, *, expansion: int, attention: str = "window", drop_path: float = 0.0, **attn: Any
    ):
        out_chs = width * expansion
        super().__init__(in_chs, out_chs, 1, drop_path, act=nn.GELU)
        reduced = in_chs // expansion
        self.reduce = nn.Sequential(conv1x1(in_chs, reduced), nn.BatchNorm2d(reduced))
        self.attn = build_attention(attention, reduced, out_chs, **attn)

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(self.reduce(x))


BLOCK_TYPES: dict[str, type[PreActBlock]] = {"basic": BasicBlock, "bottleneck": Bottleneck}


class CifarStem(nn.Sequential):
    """One 3x3 conv, stride 1, no norm or activation (the pre-activation blocks follow)."""

    def __init__(self, in_chans: int, out_chs: int):
        super().__init__()
        self.conv = conv3x3(in_chans, out_chs)


class ImageNetStem(nn.Sequential):
    """7x7 stride-2 conv and 3x3 stride-2 max-pool."""

    def __init__(self, in_chans: int, out_chs: int):
        super().__init__()
        self.conv = nn.Conv2d(in_chans, out_chs, kernel_size=7, stride=2, padding=3, bias=False)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)


class Patch2Stem(nn.Sequential):
    """One 2x2 conv, stride 2 ("patchify", as ConvNeXt's stem at a quarter of its side): every input pixel reaches
    the first stage, whose maps have half the CIFAR stem's side, so a step costs about a quarter (the fast CPU
    recipes: experiment=cifar100_speedrun)."""

    def __init__(self, in_chans: int, out_chs: int):
        super().__init__()
        self.conv = nn.Conv2d(in_chans, out_chs, kernel_size=2, stride=2, bias=False)


# the classes of architectures.rules.BLOCKS and STEMS (a test holds the names equal)
STEM_TYPES: dict[str, type[nn.Sequential]] = {"cifar": CifarStem, "patch2": Patch2Stem, "imagenet": ImageNetStem}
