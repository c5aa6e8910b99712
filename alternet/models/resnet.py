"""The paper's "ResNet": HDVW's post-activation ResNet as timm's :class:`~timm.models.resnet.ResNet`, which computes
the same function; only the stem differs from timm's ``resnet50``. Its blocks and stems: docs/reference.md, "The
paper's comparison models".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from timm.models.resnet import BasicBlock, Bottleneck, ResNet
from torch import nn

from ..architectures.layout import LayoutError
from ..architectures.rules import TIMM_STEMS, choose_stem

RESNET_BLOCKS: dict[str, type[nn.Module]] = {"basic": BasicBlock, "bottleneck": Bottleneck}
CIFAR_STEM_REDUCTION = 4  # timm's stem (7x7 stride 2, max-pool stride 2) downsamples 4x; the CIFAR stem does not


class PostActResNet(ResNet):
    """timm's ResNet with a named block kind and HDVW's stems (``stem``: auto | cifar | imagenet; auto picks the
    CIFAR stem below 128 px, as for AlterNet). Parameter names are timm's (``conv1``, ``bn1``, ``layerN``, ``fc``),
    so timm's tools and weights for ``resnet50`` apply; initialisation is timm's."""

    def __init__(
        self,
        layers: Sequence[int],
        block: str = "bottleneck",
        stem: str = "auto",
        img_size: int | Sequence[int] = 32,
        in_chans: int = 3,
        **kwargs: Any,
    ):
        if block not in RESNET_BLOCKS:
            raise LayoutError(f"unknown ResNet block {block!r}; choose one of {list(RESNET_BLOCKS)}")
        super().__init__(block=RESNET_BLOCKS[block], layers=tuple(layers), in_chans=in_chans, **kwargs)
        self.stem_kind = choose_stem(stem, img_size, TIMM_STEMS)
        if self.stem_kind == "cifar":
            self._use_cifar_stem(in_chans)

    def _use_cifar_stem(self, in_chans: int) -> None:
        """One 3x3 stride-1 conv in place of the 7x7 stride-2 conv, and no max-pool (BN and ReLU stay)."""
        width = self.conv1.out_channels
        self.conv1 = nn.Conv2d(in_chans, width, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(self.conv1.weight, mode="fan_out", nonlinearity="relu")  # as timm's init_weights
        self.maxpool = nn.Identity()
        for info in self.feature_info:
            info["reduction"] = max(1, info["reduction"] // CIFAR_STEM_REDUCTION)
